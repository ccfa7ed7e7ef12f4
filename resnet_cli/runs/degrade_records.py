"""A degrade grid's runs as records, read from their run directories alone.

Each (net, depth, seed) trains into OUT/runs/<net>-<depth>-seed<seed> through the sweep engine, as
`resnet train` would, so `resnet lesion`, `landscape` and `paths` can read the trained net. Its
record comes from that directory: summary.json (status, last-epoch training loss and error, test
error; a diverged run counts at chance: accuracy 1/classes, training loss ln(classes), a uniform
guess's), spec.yaml (net, depth, data) and probe.json (the first layer's gradient norm at step 1 and
the He 2016a Fig. 6 curve, written by the `degrade` probe, training/curve.py).

Output directories of earlier versions kept each run's probe values in OUT/runs.jsonl (one record
per finished run, naming its run directory); a run directory without probe.json takes them from
there, so those grids still report and their finished runs are reused as they are.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from .. import spec as spec_mod
from ..errors import UserError
from ..spec.datasets import shape_of
from .reader import RunRecord, legacy_probes

RUN_DIRS = "runs"  # one run directory per (net, depth, seed), as `resnet train` writes them


def _finite(x: Any) -> bool:
    return isinstance(x, (int, float)) and math.isfinite(x)


def _classes(tree: dict[str, Any]) -> int | None:
    try:
        return shape_of(spec_mod.load(tree).data)[1]
    except (UserError, KeyError, AttributeError):
        return None


def run_name(net: str, depth: int, seed: int) -> str:
    return f"{net}-{depth}-seed{seed}"


def load_record(path: Path, out_dir: Path, legacy: dict[str, dict[str, Any]] | None = None) -> dict[str, Any] | None:
    """The record of a finished (completed or diverged) run in `path`; None for any other."""
    run = RunRecord.read(path)
    tree = run.spec_written if run.finished else None
    if tree is None:
        return None
    summary = run.summary
    model, data = tree.get("model") or {}, tree.get("data") or {}
    kind = (model.get("shortcut") or {}).get("kind", "identity")
    rel = path.relative_to(out_dir).as_posix() if path.is_relative_to(out_dir) else str(path)
    probe = run.probe or (legacy or {}).get(rel) or {}

    def acc(error: float | None) -> float | None:
        return None if error is None else 1.0 - error / 100.0

    train_loss, train_acc, test_acc = (summary.get("train_loss"), acc(summary.get("train_error")),
                                       acc(summary.get("test_error")))
    if summary["status"] == "diverged" or not _finite(test_acc):
        # A failed run at chance, as every study table counts it (never its last good epoch's
        # metrics: a diverged depth would be judged on what it was before it failed).
        classes = _classes(tree)
        train_loss, train_acc, test_acc = ((math.log(classes), 1.0 / classes, 1.0 / classes) if classes
                                           else (None, None, None))
    return {
        "event": "run", "net": "plain" if kind == "none" else "residual", "depth": model.get("depth"),
        "seed": (tree.get("run") or {}).get("seed"), "status": summary["status"],
        "diverged": summary["status"] == "diverged" or not _finite(summary.get("test_error")),
        "train_loss": train_loss, "train_acc": train_acc,
        "test_acc": test_acc, "grad_norm_first_layer": probe.get("grad_norm_first_layer"),
        "params": summary.get("params"), "shortcut": kind, "family": model.get("family"),
        "dataset": data.get("dataset"), "iterations": summary.get("iterations"), "epochs": summary.get("epochs"),
        "wall_s": summary.get("wall_time_s"), "curve": probe.get("curve") or [], "run_dir": rel,
    }


def records(sp, refused: set[str] = frozenset()) -> list[dict[str, Any]]:
    """The finished runs of a degrade plan (sweep/degrade_plan.py), read from their run directories;
    `refused`: ROW:SEED of the directories the sweep would not take (they hold another spec)."""
    legacy = legacy_probes(sp.results)
    return [rec for run in sp.runs if run.key not in refused
            and (rec := load_record(run.path, sp.results, legacy)) is not None]
