"""One run of a `resnet degrade` grid and the directory it is kept in.

Each (net, depth, seed) trains into runs/<net>-<depth>-seed<seed> under the grid's folder, as
`resnet train` would, so `resnet lesion`, `landscape` and `paths` can read the trained net. Its
record (final metrics, the He 2016a Fig. 6 curve, the first layer's gradient at step 1) is one
line of runs.jsonl; a run cut off before its record was written continues from its checkpoint.
"""

from __future__ import annotations

import hashlib
import json
import time
from pathlib import Path
from typing import Any

import torch

from .. import output
from .. import spec as spec_mod
from ..training.callbacks import Callback
from ..errors import UserError

RUN_DIRS = "runs"  # one run directory per (net, depth, seed), as `resnet train` writes them


def spec_key(spec) -> str:
    """A run's identity for reuse: its resolved spec minus where it runs."""
    tree = spec_mod.to_tree(spec)
    for key in spec_mod.RESUME_FREE:
        section, _, leaf = key.partition(".")
        tree[section].pop(leaf, None)
    return hashlib.sha256(json.dumps(tree, sort_keys=True).encode()).hexdigest()[:16]


# ---------------------------------------------------------------------------------------------
# One run


class Probe(Callback):
    """The first weight layer's gradient norm at step 1, and a training curve: mean loss and error
    (%) over windows of `window` steps, as He 2016a Fig. 6 plots training error against iteration.
    Both travel in the run's checkpoints, so a resumed run's curve starts at iteration 1."""

    checkpoint_key = "degrade_probe"

    def __init__(self, window: int):
        self.window = max(1, window)
        self.grad_norm_first_layer: float | None = None
        self.curve: list[list[float]] = []  # [iteration, loss, error %]
        self.resumed = {"loss_sum": 0.0, "wrong": 0.0, "seen": 0, "steps": 0}  # the open window

    def state(self) -> dict[str, Any]:
        return {"window": self.window, "grad_norm_first_layer": self.grad_norm_first_layer, "curve": self.curve,
                "loss_sum": self.loss_sum.item(), "wrong": self.wrong.item(), "seen": self.seen, "steps": self.steps}

    def load_state(self, state: dict[str, Any]) -> None:
        self.window, self.grad_norm_first_layer = state["window"], state["grad_norm_first_layer"]
        self.curve = [list(point) for point in state["curve"]]
        self.resumed = {k: state[k] for k in self.resumed}

    def on_start(self, t) -> None:
        self.first = next(m for m in t.model.modules() if isinstance(m, (torch.nn.Conv2d, torch.nn.Linear)))
        self.loss_sum = torch.tensor(self.resumed["loss_sum"], device=t.rt.device)
        self.wrong = torch.tensor(self.resumed["wrong"], device=t.rt.device)
        self.seen, self.steps = self.resumed["seen"], self.resumed["steps"]

    def after_backward(self, t) -> None:
        if t.p.iteration == 0:
            self.grad_norm_first_layer = self.first.weight.grad.norm().item()
        y = t.last_target
        self.loss_sum += t.last_loss.detach() * len(y)
        self.wrong += (t.last_output.argmax(1) != y).sum()
        self.seen += len(y)
        self.steps += 1
        if self.steps == self.window or t.p.iteration + 1 >= t.total:
            self.curve.append([t.p.iteration + 1, self.loss_sum.item() / self.seen,
                               100.0 * self.wrong.item() / self.seen])
            self.loss_sum.zero_(), self.wrong.zero_()
            self.seen = self.steps = 0


def train_one(spec, data, points: int = 60, callbacks: list[Callback] = (), run_dir=None,
              state: dict[str, Any] | None = None) -> dict[str, Any]:
    """Train one twin; returns its record (metrics, the curve, the wall time). With `run_dir` (a
    created RunDir) the run also leaves what `resnet train` leaves: resolved spec, metrics and the
    final checkpoint, so lesion, landscape and paths can read the trained net afterwards. With
    `state` (that run's checkpoint) it continues where the checkpoint left off."""
    from ..training.trainer import Trainer

    start = time.perf_counter()
    key = spec_key(spec)
    trainer = Trainer(spec, run_dir=run_dir, data=data, callbacks=callbacks)
    probe = Probe(window=-(-trainer.total // points))
    trainer.callbacks.append(probe)
    before = 0.0  # seconds trained before this process, for a resumed run
    if state is not None:
        trainer.restore(state)
        before = trainer.p.elapsed
        run_dir.truncate_metrics(trainer.p.iteration)
    resumed_at = trainer.p.iteration
    summary = trainer.run()
    m = spec.model
    net = "plain" if m.shortcut.kind == "none" else "residual"

    def acc(error: float | None) -> float | None:
        return None if error is None else 1.0 - error / 100.0

    return {
        "event": "run", "net": net, "depth": m.depth, "seed": spec.run.seed, "status": summary["status"],
        "train_loss": summary["train_loss"], "train_acc": acc(summary["train_error"]),
        "test_acc": acc(summary["test_error"]), "grad_norm_first_layer": probe.grad_norm_first_layer,
        "params": summary["params"], "shortcut": m.shortcut.kind, "family": m.family, "dataset": spec.data.dataset,
        "iterations": summary["iterations"], "epochs": summary["epochs"],
        "wall_s": round(before + time.perf_counter() - start, 2), "spec_key": key, "curve": probe.curve,
        **({"resumed_at": resumed_at} if resumed_at else {}),
    }


def open_run_dir(out_dir: Path, spec, net: str, key: str):
    """runs/<net>-<depth>-seed<seed> under the degrade directory, locked for this run, and the
    checkpoint to continue from (None: a fresh start). A directory of that name left by this very
    run, cut off before its record was written, continues from its last checkpoint; without a
    usable one it is started over. One that holds another spec (the grid was rerun with other
    settings) is kept, and this run takes a name with its spec key instead. The lock makes a second
    `resnet degrade` on the same --out stop with one line rather than train the same run twice."""
    from ..training.rundir import RunDir, SPEC

    name = f"{net}-{spec.model.depth}-seed{spec.run.seed}"
    for path in (out_dir / RUN_DIRS / name, out_dir / RUN_DIRS / f"{name}-{key[:8]}"):
        if (path / SPEC).exists() and _kept_key(path) != key:
            continue
        rd = RunDir(path)
        rd.lock()
        state = _resumable(path)
        if state is None:
            _start_over(rd, spec)
        return rd, state
    raise UserError(f"{out_dir / RUN_DIRS / name}: both this name and {name}-{key[:8]} hold other runs; "
                    "pick another --out")


def _resumable(path: Path) -> dict[str, Any] | None:
    """The checkpoint an interrupted run left in `path`, if it carries the probe's curve (one
    written before degrade resumed runs does not, and its run is started over)."""
    from ..training import checkpoint as ckpt
    from ..training.rundir import CHECKPOINT, SPEC

    if not (path / SPEC).is_file() or not (path / CHECKPOINT).is_file():
        return None
    ckpt.clean_orphans(path)
    try:
        state = ckpt.load(path / CHECKPOINT)
    except UserError as exc:
        output.info(f"{path}: starting over ({exc})")
        return None
    return state if Probe.checkpoint_key in (state.get("callbacks") or {}) else None


def _start_over(rd, spec) -> None:
    from ..training.rundir import CHECKPOINT, META, METRICS, SPEC, SUMMARY

    for leftover in (SPEC, META, METRICS, SUMMARY, CHECKPOINT):  # nothing here has a record to keep
        rd.file(leftover).unlink(missing_ok=True)
    spec = spec.model_copy(update={"run": spec.run.model_copy(update={"out": str(rd.path)})})
    rd.create(spec, runtime={})


def _kept_key(path: Path) -> str | None:
    """The key of the run kept in `path`, from its spec.yaml as this version reads it (None: no
    spec there, or one this version rejects)."""
    from ..training.rundir import SPEC, RunDir

    if not (path / SPEC).is_file():
        return None
    try:
        return spec_key(spec_mod.resolve(spec_mod.validate(RunDir(path).spec_tree(), str(path / SPEC))))
    except UserError:
        return None


def read_runs(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    out = []
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            rec = json.loads(line)
        except json.JSONDecodeError:
            continue  # a line cut by a kill mid-write
        if isinstance(rec, dict) and rec.get("event") == "run" and "spec_key" in rec:
            out.append(_current_key(rec, path.parent))
    return out


def _current_key(rec: dict[str, Any], out_dir: Path) -> dict[str, Any]:
    """A record whose run directory is kept gets its key from that run's spec.yaml as this version
    reads it: a field added since (with its default) then leaves finished runs reusable, while a
    value the run really used, written in its spec.yaml, still counts."""
    key = _kept_key(out_dir / rec["run_dir"]) if rec.get("run_dir") else None
    return rec if key is None else {**rec, "spec_key": key}
