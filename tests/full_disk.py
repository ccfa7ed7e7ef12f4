"""A full disk in this process: the n-th file opened for writing whose path holds a given name
takes a few bytes and then fails as write(2) does on a full disk (ENOSPC), through every way the
package opens files (open, io.open under pathlib, os.fdopen under the checkpoint's mkstemp)."""

import builtins
import errno
import io
import os


class _Full:
    def __init__(self, f, room: int):
        self._f, self._room = f, room

    def write(self, data):
        if len(data) > self._room:
            if self._room > 0:  # a short write first, as a disk that fills mid-file gives
                self._f.write(data[:self._room])
                self._room = 0
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        self._room -= len(data)
        return self._f.write(data)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self._f.close()

    def __getattr__(self, name):
        return getattr(self._f, name)


def fill_at(monkeypatch, name: str, nth: int = 1, room: int = 7) -> dict:
    """Make the `nth` write-opening of a path containing `name` a full disk; returns a dict whose
    "hit" counts the openings seen (a test checks the fault was met)."""
    real_open, real_fdopen = builtins.open, os.fdopen
    seen = {"hit": 0}

    def maybe(f, path):
        if name in str(path):
            seen["hit"] += 1
            if seen["hit"] == nth:
                return _Full(f, room)
        return f

    def fake_open(file, mode="r", *a, **k):
        f = real_open(file, mode, *a, **k)
        return maybe(f, os.fspath(file)) if isinstance(file, (str, os.PathLike)) and set(mode) & set("wax") else f

    def fake_fdopen(fd, mode="r", *a, **k):
        f = real_fdopen(fd, mode, *a, **k)
        return maybe(f, os.readlink(f"/proc/self/fd/{fd}")) if set(mode) & set("wax") else f

    monkeypatch.setattr(builtins, "open", fake_open)
    monkeypatch.setattr(io, "open", fake_open)
    monkeypatch.setattr(os, "fdopen", fake_fdopen)
    return seen
