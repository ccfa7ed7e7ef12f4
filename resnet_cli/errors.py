"""The tool's exit codes and the one error type that reaches the user as a single line."""

from __future__ import annotations

import contextlib
import errno
import os
from pathlib import Path
from typing import Iterator

# Exit codes, one place. Shells and schedulers read these, so they are part of the interface.
OK = 0
FAILED = 1  # an unexpected internal error (a bug): the only case that prints a traceback
USAGE = 2  # bad input: spec, flags, data, checkpoint (Click uses 2 for usage errors too)
DIVERGED = 3  # the loss turned NaN/Inf or exploded; the run directory says `diverged`
LOCKED = 4  # another process holds the run directory (or a study's results): "in use", always this code
RESOURCES = 5  # the machine refused: disk full or over quota, read-only, permission denied, out of memory
INTERRUPTED_INT = 130  # SIGINT: 128 + 2, as a shell reports it
INTERRUPTED_TERM = 143  # SIGTERM: 128 + 15
BROKEN_PIPE = 141  # stdout closed under us (`| head -1`): 128 + SIGPIPE


def worst(codes: set[int]) -> int:
    """The one exit code of a sweep whose runs failed with `codes`: a bug first (it needs a report),
    then the machine's refusal, a run in use, bad input."""
    for code in (FAILED, RESOURCES, LOCKED, USAGE):
        if code in codes:
            return code
    return FAILED


class UserError(Exception):
    """Something the user can fix. Rendered as one line on stderr, never a traceback."""

    def __init__(self, message: str, code: int = USAGE):
        # One line, always: user-supplied text quoted into a message may carry its own newlines.
        message = message.replace("\r", "\\r").replace("\n", "\\n")
        super().__init__(message)
        self.message = message
        self.code = code

    def __str__(self) -> str:  # pragma: no cover - trivial
        return self.message


class DamagedFile(UserError):
    """One run's own file is unreadable (a garbage meta.json, a cut summary.json): that run cannot go
    on, but a sweep can go on with its other runs, and says which it skipped."""


class PipeClosed(Exception):
    """stdout's reader went away (`resnet ... | head -1`)."""


# ---------------------------------------------------------------------------------------------
# The machine's refusals, in one place: a full disk, a quota, a read-only or forbidden place, too
# little memory. Each becomes one line naming the file and what to do, exit RESOURCES; every writer
# here renames a finished temporary file into place, so what was written before stays intact and
# rerunning the same command resumes.

RERUN = "rerun the same command to resume"
# What torch raises where it has lost the errno: its zip writer on a short write (a full disk), and
# its allocators. Matched by text, the only thing these exceptions carry.
_TORCH_WRITE = ("PytorchStreamWriter failed", "unexpected pos", "inline_container")
_OUT_OF_MEMORY = ("DefaultCPUAllocator: can't allocate memory", "CUDA out of memory", "std::bad_alloc",
                  "not enough memory", "Cannot allocate memory", "failed to allocate memory")
_CANNOT_MAP = ("failed to map segment", "cannot map", "cannot allocate memory in static TLS", "Cannot allocate memory")


def device_of(path: str | Path) -> str:
    """The mount point holding `path` (or its nearest existing folder): what `df` would name."""
    here = Path(os.path.abspath(path))
    while not here.exists() and here != here.parent:
        here = here.parent
    try:
        dev = os.stat(here).st_dev
        while here != here.parent and os.stat(here.parent).st_dev == dev:
            here = here.parent
    except OSError:
        pass
    return str(here)


def resource_error(exc: BaseException, path: str | Path | None = None) -> UserError | None:
    """`exc` as one line and exit RESOURCES when it is the machine's refusal, else None (a bug,
    which keeps its traceback). `path`: the file being written, where the caller knows it."""
    path = path if path is not None else getattr(exc, "filename", None)
    where = f" while writing {path}" if path is not None else ""
    text = str(exc)
    code = getattr(exc, "errno", None)
    if isinstance(exc, OSError) and code in (errno.ENOSPC, errno.EDQUOT):
        what = "no space left" if code == errno.ENOSPC else "disk quota exceeded"
        on = device_of(path) if path is not None else "the device"
        return UserError(f"{what} on {on}{where}; free space and {RERUN}", code=RESOURCES)
    if isinstance(exc, OSError) and code == errno.EROFS:
        on = device_of(path) if path is not None else "the device"
        return UserError(f"{on} is a read-only file system{where}; remount it writable or give another --out, "
                         f"then {RERUN}", code=RESOURCES)
    if isinstance(exc, OSError) and code in (errno.EACCES, errno.EPERM):
        return UserError(f"permission denied{where or f' on {path}'}; make it writable or give another --out, "
                         f"then {RERUN}", code=RESOURCES)
    if isinstance(exc, RuntimeError) and path is not None and any(t in text for t in _TORCH_WRITE):
        if _full(path):
            return UserError(f"no space left on {device_of(path)}{where}; free space and {RERUN}", code=RESOURCES)
        return UserError(f"torch could not finish{where} ({_first_line(text)}); check the disk and {RERUN}",
                         code=RESOURCES)
    if (isinstance(exc, MemoryError) or (isinstance(exc, OSError) and code == errno.ENOMEM)
            or (isinstance(exc, RuntimeError) and any(t in text for t in _OUT_OF_MEMORY))):
        detail = f" ({_first_line(text)})" if text else ""
        return UserError(f"out of memory{detail}; free memory or raise the limit (ulimit -v), or choose a smaller "
                         f"net or batch, then {RERUN}", code=RESOURCES)
    if isinstance(exc, (ImportError, OSError)) and any(t in text for t in _CANNOT_MAP):
        return UserError(f"cannot load a library: too little memory to map it ({_first_line(text)}); raise the "
                         f"memory limit (ulimit -v) and {RERUN}", code=RESOURCES)
    return None


def _full(path: str | Path) -> bool:
    try:
        st = os.statvfs(device_of(path))
    except OSError:
        return False
    return st.f_bavail * st.f_frsize < 1 << 20  # under a MiB left: the write ran out of room


def _first_line(text: str) -> str:
    lines = [line for line in text.splitlines() if line.strip()]
    return lines[0].strip()[:200] if lines else ""


@contextlib.contextmanager
def writing(path: str | Path, tmp: str | Path | None = None) -> Iterator[None]:
    """Around a write of `path`: the machine's refusal as one line naming it; `tmp`, the temporary
    file the write goes through, removed on any failure, so nothing half-written is left behind."""
    try:
        yield
    except BaseException as exc:
        if tmp is not None:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
        error = resource_error(exc, path) if isinstance(exc, Exception) else None
        if error is None:
            raise
        raise error from None


def write_atomically(path: str | Path, text: str) -> None:
    """`path` holds `text` whole or keeps what it held: a temporary file beside it, renamed into
    place; a failure (a full disk) removes the temporary file and is one line naming `path`."""
    path = Path(path)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    with writing(path, tmp):
        with open(tmp, "w", encoding="utf-8") as f:
            f.write(text)
            f.flush()
        os.replace(tmp, path)
