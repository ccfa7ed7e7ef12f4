"""A run directory describes its run: everything a report needs is read from these files.

    RUN_DIR/
      spec.yaml        the resolved spec (rerun with `resnet train RUN_DIR/spec.yaml`)
      meta.json        versions, git commit, device, seed, command line, start time
      metrics.jsonl    one JSON object per line, appended as training goes
      checkpoint.pt    the latest checkpoint (atomic; see checkpoint.py)
      summary.json     written once at the end: status, final errors, wall time
      tensorboard/     with train.tensorboard: the same scalars as event files (`tensorboard --logdir runs`)
      .lock            held by the process training in it
"""

from __future__ import annotations

import contextlib
import datetime as dt
import fcntl
import json
import os
import platform
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

from . import __version__, errors
from .errors import UserError
from .spec import Spec, to_yaml

SPEC, META, METRICS, CHECKPOINT, SUMMARY, LOCK = (
    "spec.yaml", "meta.json", "metrics.jsonl", "checkpoint.pt", "summary.json", ".lock")
TENSORBOARD = "tensorboard"


def default_path(spec: Spec) -> Path:
    """runs/<time>-<family><depth>-<unit>-<shortcut>-<dataset>-s<seed>: sortable and readable.

    The directory is made here, atomically (os.mkdir fails if it exists), so two runs started in
    the same second (a shell loop, `&`) get `...-s0` and `...-s0-2` instead of one losing the lock."""
    m = spec.model
    stamp = dt.datetime.now().strftime("%Y%m%d-%H%M%S")
    short = "plain" if m.shortcut.kind == "none" else m.shortcut.kind
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
    try:
        import torchvision

        out["torchvision"] = torchvision.__version__
    except ImportError:  # pragma: no cover
        pass
    out["cuda"] = torch.version.cuda or "none"
    return out


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
        self.path.mkdir(parents=True, exist_ok=True)
        self._write_text(SPEC, to_yaml(spec))
        meta = {
            "versions": versions(), "git_commit": git_commit(), "seed": spec.run.seed, **runtime,
            "command": argv if argv is not None else sys.argv, "host": platform.node(),
            "started": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        }
        self._write_text(META, json.dumps(meta, indent=2) + "\n")

    def lock(self) -> None:
        """An exclusive advisory lock, released by the OS when the process dies (even SIGKILL)."""
        self.path.mkdir(parents=True, exist_ok=True)
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

    def remove_unstarted(self) -> None:
        """Undo `create` for a run that failed before its first checkpoint: only the files this
        tool writes, then the directory if that leaves it empty (a user's own files stay)."""
        for name in (SPEC, META, METRICS, SUMMARY, LOCK):
            with contextlib.suppress(OSError):
                self.file(name).unlink()
        for tmp in self.path.glob(".*.tmp"):
            with contextlib.suppress(OSError):
                tmp.unlink()
        shutil.rmtree(self.file(TENSORBOARD), ignore_errors=True)
        with contextlib.suppress(OSError):
            self.path.rmdir()  # fails, as it should, when anything else is in it

    # -- records ------------------------------------------------------------------------------

    def append_metrics(self, record: dict[str, Any]) -> None:
        with open(self.file(METRICS), "a", encoding="utf-8") as f:
            f.write(json.dumps(record) + "\n")
            f.flush()

    def metrics(self) -> list[dict[str, Any]]:
        path = self.file(METRICS)
        if not path.exists():
            return []
        out = []
        for line in path.read_text(encoding="utf-8").splitlines():
            try:
                out.append(json.loads(line))
            except json.JSONDecodeError:
                continue  # a line cut by a kill mid-write: the records before it are intact
        return out

    def truncate_metrics(self, iteration: int) -> None:
        """On resume, drop records written after the checkpoint being resumed from."""
        kept = [r for r in self.metrics() if r.get("iter", 0) <= iteration]
        self._write_text(METRICS, "".join(json.dumps(r) + "\n" for r in kept))

    def write_summary(self, summary: dict[str, Any]) -> None:
        self._write_text(SUMMARY, json.dumps(summary, indent=2) + "\n")

    def summary(self) -> dict[str, Any] | None:
        path = self.file(SUMMARY)
        if not path.exists():
            return None
        try:
            return json.loads(path.read_text(encoding="utf-8"))
        except json.JSONDecodeError:
            return None

    def spec_tree(self) -> dict:
        from . import yamlio

        if not self.file(SPEC).exists():
            raise UserError(f"{self.path}: not a run directory (no {SPEC})")
        return yamlio.load_file(self.file(SPEC))

    def _write_text(self, name: str, text: str) -> None:
        tmp = self.file(f".{name}.tmp")
        tmp.write_text(text, encoding="utf-8")
        os.replace(tmp, self.file(name))

