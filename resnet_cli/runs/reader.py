"""Reading a run directory: the one function every report, study table, degrade grid and sweep asks.

`RunRecord.read(path)` looks at the small files at once (summary.json, study.json, slurm.json, the
lock) and at the spec and the metrics only when asked, so a sweep that asks thousands of times
whether a run has finished never parses a spec. Nothing here imports torch or the trainer: a
directory copied from a cluster reads the same on a laptop with no GPU.
"""

from __future__ import annotations

import fcntl
import json
import os
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Any

from ..errors import DamagedFile, UserError
from .files import FINAL, LEGACY_RUNS, LOCK, META, METRICS, PROBE, SLURM, SPEC, STUDY, SUMMARY


def read_json(path: Path) -> dict[str, Any] | None:
    """A JSON object file, None when it is missing, cut short or not an object (a run still being
    written, or killed mid-write before the atomic rename: every writer here renames into place)."""
    try:
        obj = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError):
        return None
    return obj if isinstance(obj, dict) else None


def damaged(path: Path) -> str | None:
    """Why a run's JSON file that is there cannot be read (None: it reads, or there is none). Every
    writer renames a whole file into place, so such a file was damaged after it was written."""
    if not path.exists() or read_json(path) is not None:
        return None
    try:
        json.loads(path.read_text(encoding="utf-8"))
        why = "not a JSON object"
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        why = getattr(exc, "msg", None) or getattr(exc, "strerror", None) or type(exc).__name__
    return f"{path}: damaged ({why})"


def read_object(path: Path, fix: str) -> dict[str, Any]:
    """A JSON object file a run needs ({} when there is none); a damaged one is one line naming it
    and `fix`, an errors.DamagedFile (a sweep goes on with its other runs)."""
    why = damaged(path)
    if why is not None:
        raise DamagedFile(f"{why}; {fix}")
    return read_json(path) or {}


def read_metrics(path: Path) -> list[dict[str, Any]]:
    """The records of a metrics.jsonl, [] when there is none. A last line without its newline was cut
    by a kill mid-write and is left out (the records before it are intact; a resume rewrites the file).
    Anything else that is not a JSON object, or bytes that are not UTF-8, is a damaged file: one line
    naming the file and the line."""
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return []
    except OSError as exc:
        raise UserError(f"{path}: cannot read ({exc.strerror or exc})") from None
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data.count(b"\n", 0, exc.start) + 1
        raise UserError(f"{path}:{line}: not UTF-8 text (byte 0x{data[exc.start]:02x}); the file is damaged: "
                        "restore it, or delete the line") from None
    lines = text.split("\n")  # the last item is "" when the file ends with its newline
    out = []
    for n, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError as exc:
            if n == len(lines):  # no newline after it: cut mid-write
                continue
            raise UserError(f"{path}:{n}: not a JSON record ({exc.msg}); the file is damaged: restore it, "
                            "or delete the line") from None
        if not isinstance(record, dict):
            raise UserError(f"{path}:{n}: not a JSON object; the file is damaged: restore it, or delete the line")
        out.append(record)
    return out


def lock_held(path: Path) -> bool:
    """Whether a process holds the run's lock now (the OS drops it when the holder dies, even on
    SIGKILL, so a lock file left behind by a killed run reads as not held)."""
    try:
        fd = os.open(path / LOCK, os.O_RDONLY)
    except OSError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    except OSError:
        return False
    finally:
        os.close(fd)
    return False


def spec_as_written(path: Path) -> dict[str, Any]:
    """RUN/spec.yaml as the run wrote it, with the renames of earlier versions applied (spec/legacy.py):
    what a resume, eval or export rebuilds the net from. Not a run directory: one line saying so."""
    from ..spec import yamlio
    from ..spec.legacy import as_written

    if not (path / SPEC).exists():
        raise UserError(f"{path}: not a run directory (no {SPEC})")
    return as_written(yamlio.load_file(path / SPEC))


def find(root: str | Path) -> list[Path]:
    """Every run directory at or below `root` (one with a spec.yaml, or a planned study run with its
    study.json alone), in path order."""
    root = Path(root)
    return sorted({p.parent for name in (STUDY, SPEC) for p in root.rglob(name)})


@dataclass
class RunRecord:
    """What one run directory says about its run, from its files alone."""

    path: Path
    summary: dict[str, Any] | None  # summary.json: None until the run ends (or stops on a signal)
    study: dict[str, Any] | None  # study.json: the study row and seed a sweep planned it as
    task: dict[str, Any] | None  # slurm.json: the last SLURM array task that ran it
    locked: bool  # a process holds the run's lock now: it is training

    @classmethod
    def read(cls, path: str | Path) -> RunRecord:
        path = Path(path)
        return cls(path=path, summary=read_json(path / SUMMARY), study=read_json(path / STUDY),
                   task=read_json(path / SLURM), locked=lock_held(path))

    @property
    def damaged(self) -> str | None:
        """One line naming summary.json or meta.json where that file is there and cannot be read: the
        run then reads as unfinished, and says why (None: both read, or are not there)."""
        if self.summary is None and (why := damaged(self.path / SUMMARY)):
            return f"{why}; delete it and rerun to rebuild it from the checkpoint, or restore it"
        return damaged(self.path / META)

    @property
    def has_spec(self) -> bool:
        return (self.path / SPEC).is_file()

    @property
    def is_run(self) -> bool:
        """A run directory, or one a study planned (study.json written, training not begun)."""
        return self.study is not None or self.has_spec

    @property
    def finished(self) -> bool:
        """Ended with nothing left to do: a rerun skips it, a table counts it."""
        return self.summary is not None and self.summary.get("status") in FINAL

    @property
    def status(self) -> str:
        """completed | diverged (summary.json); else running (its lock is held), error (its SLURM task
        failed), unfinished (trained some, or stopped on a signal: a rerun resumes it) or pending."""
        if self.finished:
            return str(self.summary["status"])
        if self.locked:
            return "running"
        if (self.task or {}).get("state") == "failed":
            return "error"
        return "unfinished" if self.summary is not None or self.has_spec else "pending"

    @property
    def task_message(self) -> str:
        """Why its SLURM task failed, with the log to read ("" when it did not)."""
        t = self.task or {}
        if t.get("state") != "failed":
            return ""
        return f"task {t.get('job')} failed: {t.get('message')}; log: {t.get('log')}"

    @cached_property
    def spec_written(self) -> dict[str, Any] | None:
        """spec.yaml as written (spec_as_written), None where there is none or it cannot be read."""
        try:
            tree = spec_as_written(self.path)
        except UserError:
            return None
        return tree if isinstance(tree, dict) else None

    @cached_property
    def spec_tree(self) -> dict[str, Any] | None:
        """The run's spec as this version reads it: a field added since the run was written takes its
        default, so a run from before and one from after with the same settings read alike. A spec
        this version rejects is kept as written (still grouped by what it says)."""
        from .. import spec as spec_mod

        tree = self.spec_written
        if tree is None:
            return None
        try:
            return spec_mod.to_tree(spec_mod.load(tree, name=str(self.path / SPEC)))
        except UserError:
            return tree

    @cached_property
    def probe(self) -> dict[str, Any] | None:
        """probe.json: what `resnet degrade`'s probe measured in this run (None: no probe ran)."""
        return read_json(self.path / PROBE)

    def metrics(self) -> list[dict[str, Any]]:
        """metrics.jsonl's records (read_metrics: a damaged file is one line naming it)."""
        return read_metrics(self.path / METRICS)

    def last_metrics(self) -> dict[str, Any] | None:
        records = self.metrics()
        return records[-1] if records else None


def legacy_probes(out_dir: Path) -> dict[str, dict[str, Any]]:
    """run_dir (relative to a degrade grid's output directory) -> the probe values an earlier version
    recorded for it in OUT/runs.jsonl, before runs wrote probe.json: such grids still report, and
    their finished runs are reused as they are."""
    path = out_dir / LEGACY_RUNS
    if not path.is_file():
        return {}
    out: dict[str, dict[str, Any]] = {}
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            rec = json.loads(line)
        except json.JSONDecodeError:
            continue  # a line cut by a kill mid-write
        if isinstance(rec, dict) and rec.get("event") == "run" and isinstance(rec.get("run_dir"), str):
            out[rec["run_dir"]] = {"grad_norm_first_layer": rec.get("grad_norm_first_layer"),
                                   "curve": rec.get("curve") or []}
    return out
