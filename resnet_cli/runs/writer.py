"""Writing a run directory: the trainer's one writer (the files are named in files.py, read back by
reader.py). Every file but metrics.jsonl is written whole and renamed into place, so a reader never
sees half of one; metrics.jsonl is appended a line at a time, and a line cut by a kill is left out.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import fcntl
import importlib.metadata
import json
import os
import platform
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from .. import __version__, errors, writable
from ..errors import UserError
from ..spec import Spec, is_plain, to_yaml
from .files import CHECKPOINT, LOCK, META, METRICS, PROBE, SLURM, SPEC, STUDY, SUMMARY, TENSORBOARD
from .reader import read_json, read_metrics, read_object, spec_as_written


def default_path(spec: Spec) -> Path:
    """runs/<time>-<family><depth>-<unit>-<shortcut>-<dataset>-s<seed>: sortable and readable.

    The directory is made here, atomically (os.mkdir fails if it exists), so two runs started in
    the same second (a shell loop, `&`) get `...-s0` and `...-s0-2` instead of one losing the lock."""
    m = spec.model
    stamp = dt.datetime.now().strftime("%Y%m%d-%H%M%S")
    short = "plain" if is_plain(m.shortcut.kind) else m.shortcut.kind
    base = Path("runs") / f"{stamp}-{m.family}{m.depth}-{m.unit}-{short}-{spec.data.dataset}-s{spec.run.seed}"
    base.parent.mkdir(parents=True, exist_ok=True)
    for n in range(1, 1000):
        path = base if n == 1 else base.with_name(f"{base.name}-{n}")
        try:
            path.mkdir()
            return path
        except FileExistsError:
            continue
    raise UserError(f"{base}: a thousand runs of this name this second; pick one with --out")


def git_commit() -> str | None:
    here = Path(__file__).resolve().parent
    try:
        out = subprocess.run(["git", "rev-parse", "HEAD"], cwd=here, capture_output=True, text=True, timeout=5)
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=here,
                               capture_output=True, text=True, timeout=5)
    except (OSError, subprocess.SubprocessError):
        return None
    if out.returncode:
        return None
    return out.stdout.strip() + ("-dirty" if dirty.stdout.strip() else "")


def versions() -> dict[str, str]:
    import torch

    out = {"resnet_cli": __version__, "python": platform.python_version(), "torch": torch.__version__}
    if (vision := torchvision_version()) is not None:
        out["torchvision"] = vision
    out["cuda"] = torch.version.cuda or "none"
    return out


def torchvision_version() -> str | None:
    """torchvision.__version__ (a local tag such as +cu130 included) read from its version.py, not by
    importing torchvision: that import costs half a second at every run's start, for one string."""
    try:
        dist = importlib.metadata.distribution("torchvision")
    except importlib.metadata.PackageNotFoundError:
        return None
    found = re.search(r"^__version__\s*=\s*['\"]([^'\"]+)['\"]", _text(dist.locate_file("torchvision/version.py")), re.M)
    return found.group(1) if found else dist.version


def _text(path: Any) -> str:
    try:
        return Path(path).read_text()
    except OSError:
        return ""


def make_dir(path: Path, flag: str = "--out") -> None:
    """mkdir -p, where every failure (a file in the way, a read-only or virtual file system such as
    /proc) is one line naming the path instead of a traceback."""
    writable.check_dir(path, flag)
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise UserError(f"{flag} {path}: cannot create the directory ({exc.strerror or exc}); "
                        "give a path you can write to") from None


class RunDir:
    def __init__(self, path: str | Path):
        self.path = Path(path)

    def file(self, name: str) -> Path:
        return self.path / name

    # -- lifecycle ----------------------------------------------------------------------------

    def create(self, spec: Spec, runtime: dict[str, Any], argv: list[str] | None = None) -> None:
        """A fresh run. Refuses a directory that already holds a run: nothing is overwritten."""
        if self.file(SPEC).exists() or self.file(CHECKPOINT).exists():
            raise UserError(f"{self.path} already holds a run; resume it with --resume {self.path}, or pick another --out")
        make_dir(self.path)
        self._write_text(SPEC, to_yaml(spec))
        meta = {
            "versions": versions(), "git_commit": git_commit(), "seed": spec.run.seed, **runtime,
            "command": argv if argv is not None else sys.argv, "host": platform.node(),
            "started": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        }
        self._write_text(META, json.dumps(meta, indent=2) + "\n")

    def replace_spec(self, spec: Spec, changed: list[str], iteration: int) -> str:
        """`--force-resume` with a changed spec: write the new spec.yaml (what reports, eval and the
        next --resume read), keep the old one beside it as spec.before-<time>.yaml, and record the
        change in meta.json. Returns the kept file's name."""
        stamp = dt.datetime.now().strftime("%Y%m%d-%H%M%S")
        kept, n = f"spec.before-{stamp}.yaml", 1
        while self.file(kept).exists():
            n += 1
            kept = f"spec.before-{stamp}-{n}.yaml"
        if self.file(SPEC).exists():
            os.replace(self.file(SPEC), self.file(kept))
        self._write_text(SPEC, to_yaml(spec))
        meta = self.meta()
        meta.setdefault("spec_changes", []).append({
            "at": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"), "iteration": iteration,
            "keys": changed, "previous": kept, "command": sys.argv})
        self._write_text(META, json.dumps(meta, indent=2) + "\n")
        return kept

    def lock(self) -> None:
        """An exclusive advisory lock, released by the OS when the process dies (even SIGKILL)."""
        make_dir(self.path)
        while True:
            self._lock_fd = os.open(self.file(LOCK), os.O_RDWR | os.O_CREAT, 0o644)
            try:
                fcntl.flock(self._lock_fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                os.close(self._lock_fd)
                raise UserError(f"{self.path} is in use by another resnet process; wait for it or pick another --out",
                                code=errors.LOCKED) from None
            # `unlock` removes the file: a lock won on a file unlinked meanwhile guards nothing.
            try:
                if os.fstat(self._lock_fd).st_ino == os.stat(self.file(LOCK)).st_ino:
                    break
            except FileNotFoundError:
                pass
            os.close(self._lock_fd)
        os.ftruncate(self._lock_fd, 0)
        os.write(self._lock_fd, f"{os.getpid()}\n".encode())

    def unlock(self) -> None:
        """Release the lock and remove `.lock`: a finished run leaves no lock file behind. It is
        unlinked while still held, so no other process can have taken it in between."""
        fd = getattr(self, "_lock_fd", None)
        if fd is not None:
            with contextlib.suppress(OSError):
                self.file(LOCK).unlink()
            os.close(fd)
            self._lock_fd = None

    def clear_records(self) -> None:
        """The files of a run with nothing to resume (no checkpoint), before it starts over in place:
        spec, meta, metrics and summary. The lock stays: this process holds it."""
        for name in (SPEC, META, METRICS, SUMMARY):
            with contextlib.suppress(OSError):
                self.file(name).unlink()

    def remove_unstarted(self) -> None:
        """Undo `create` for a run that failed before its first checkpoint: only the files this
        tool writes, then the directory if that leaves it empty (a user's own files stay)."""
        self.clear_records()
        with contextlib.suppress(OSError):
            self.file(LOCK).unlink()
        for tmp in self.path.glob(".*.tmp"):
            with contextlib.suppress(OSError):
                tmp.unlink()
        shutil.rmtree(self.file(TENSORBOARD), ignore_errors=True)
        with contextlib.suppress(OSError):
            self.path.rmdir()  # fails, as it should, when anything else is in it

    # -- records ------------------------------------------------------------------------------

    def append_metrics(self, record: dict[str, Any]) -> None:
        # A line cut by a full disk has no newline: read_metrics leaves it out and a resume rewrites the file.
        with errors.writing(self.file(METRICS)), open(self.file(METRICS), "a", encoding="utf-8") as f:
            f.write(json.dumps(record) + "\n")
            f.flush()

    def metrics(self) -> list[dict[str, Any]]:
        return read_metrics(self.file(METRICS))

    def truncate_metrics(self, iteration: int) -> None:
        """On resume, drop records written after the checkpoint being resumed from."""
        kept = [r for r in self.metrics() if r.get("iter", 0) <= iteration]
        self._write_text(METRICS, "".join(json.dumps(r) + "\n" for r in kept))

    def write_summary(self, summary: dict[str, Any]) -> None:
        self._write_text(SUMMARY, json.dumps(summary, indent=2) + "\n")

    def summary(self) -> dict[str, Any] | None:
        return read_json(self.file(SUMMARY))

    def spec_tree(self) -> dict:
        return spec_as_written(self.path)

    def meta(self) -> dict[str, Any]:
        """meta.json as written so far ({} before the run is created); damaged: one line naming it."""
        return read_object(self.file(META), "delete it (the resume writes a new one) or restore it")

    def update_meta(self, fields: dict[str, Any]) -> None:
        """Add what is known only once the run is built (runtime, parameter count, data source) to meta.json."""
        meta = self.meta()
        meta.update(fields)
        self._write_text(META, json.dumps(meta, indent=2) + "\n")

    def write_study(self, record: dict[str, Any]) -> None:
        """study.json: the study row and seed this run is (written by the sweep before it starts)."""
        make_dir(self.path)
        self._write_text(STUDY, json.dumps(record, indent=2) + "\n")

    def write_probe(self, values: dict[str, Any]) -> None:
        """probe.json: the degrade probe's measurements so far (training/curve.py)."""
        self._write_text(PROBE, json.dumps(values) + "\n")

    def write_task_state(self, **state: Any) -> None:
        """slurm.json: the SLURM task running this run, merged into what earlier tasks recorded."""
        self._write_text(SLURM, json.dumps({**(read_json(self.file(SLURM)) or {}), **state, "time": time.time()},
                                           indent=2) + "\n")

    def _write_text(self, name: str, text: str) -> None:
        errors.write_atomically(self.file(name), text)  # a full disk: one line, no temporary file left

