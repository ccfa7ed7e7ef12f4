"""The degradation problem, measured (He 2016a sec. 4.2 and Fig. 6; the digits experiment of the
"Residual Connection" article).

Plain and residual twins (the same layers and parameters; only `model.shortcut.kind` differs) are
trained at several depths over several seeds. Per run we keep the last epoch's training loss and
accuracy (averaged over that epoch, as the article reports them), the last epoch's test accuracy, the
first conv's gradient norm at step 1, and a training-error curve; per (net, depth) the median and
min-max over seeds with n. Nothing is selected on the test set.

Runs train in memory on data loaded once. Each finished run is appended to `runs.jsonl` in the
output directory, and a rerun with the same directory reuses the runs whose resolved spec matches,
so a long grid (the CIFAR-10 Fig. 6 config) survives interruption at run granularity.
"""

from __future__ import annotations

import hashlib
import json
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Literal

import torch
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from .. import spec as spec_mod
from ..errors import UserError
from ..train import Callback
from .degrade_reference import ARTICLE, REFERENCE, findings, he2016a  # noqa: F401 (re-exported)

NETS = ("plain", "residual")
RUNS_FILE, RESULT_FILE, FIGURE_FILE = "runs.jsonl", "degrade.json", "degrade.png"
RUN_DIRS = "runs"  # one run directory per (net, depth, seed), as `resnet train` writes them
DEFAULT_CONFIG = "degrade/digits-8-26"

class Section(BaseModel):
    """The `degrade:` section of a degrade config; everything else in the file is a spec."""

    model_config = ConfigDict(extra="forbid", strict=True)
    depths: list[int] = Field(default_factory=lambda: [8, 26], min_length=1)
    seeds: Annotated[int, Field(ge=1)] | list[Annotated[int, Field(ge=0)]] = 10  # a count (0..n-1) or a list
    nets: list[Literal["plain", "residual"]] = Field(default_factory=lambda: list(NETS), min_length=1)


@dataclass
class Plan:
    """What to train: the base spec tree (without the `degrade:` section), depths, seeds, nets."""

    base: dict
    depths: list[int]
    seeds: list[int]
    nets: list[str]
    source: str


def _section(raw: Any, source: str) -> Section:
    if raw is None:
        raw = {}
    if not isinstance(raw, dict):
        raise UserError(f"{source}: 'degrade' is a mapping (depths, seeds, nets)")
    try:
        return Section.model_validate(raw)
    except ValidationError as err:
        e = err.errors(include_url=False)[0]
        path = ".".join(str(p) for p in ("degrade", *e["loc"]))
        if e["type"] == "extra_forbidden":
            raise UserError(f"{source}: unknown key '{path}'; valid keys in degrade: depths, seeds, nets") from None
        raise UserError(f"{source}: {path}: {e['msg']} (got {e.get('input')!r})") from None


def parse_seeds(text: str) -> list[int]:
    """'10' -> 0..9 (a count); '0,3,7' -> a list; '5..9' -> 5..9 inclusive; '7,' -> [7]."""
    text = text.strip()
    try:
        if ".." in text:
            lo, hi = (int(p) for p in text.split(".."))
            seeds = list(range(lo, hi + 1))
        elif "," in text:
            seeds = [int(p) for p in text.split(",") if p.strip()]
        else:
            seeds = list(range(int(text)))
    except ValueError:
        raise UserError(f"--seeds {text}: expected a count (10), a list (0,3,7) or a range (5..9)") from None
    if not seeds or min(seeds) < 0 or len(set(seeds)) != len(seeds):
        raise UserError(f"--seeds {text}: need at least one seed, none negative, no repeats")
    return seeds


def parse_depths(items: list[str]) -> list[int]:
    """'8,26' or repeated --depths 8 --depths 26."""
    out: list[int] = []
    for item in items:
        for part in str(item).split(","):
            if part.strip():
                try:
                    out.append(int(part))
                except ValueError:
                    raise UserError(f"--depths {item}: '{part}' is not an integer depth") from None
    if not out:
        raise UserError("--depths: give at least one depth, e.g. --depths 8,26")
    return out


def make_plan(spec_file: str | None, *, depths: list[int] | None = None, seeds: list[int] | None = None,
              nets: list[str] | None = None, overrides: list[tuple[str, Any]] = (), sets: list[str] = ()
              ) -> Plan:
    """Base spec from a degrade config or any spec file (default: the digits experiment), then flags."""
    name = spec_file or DEFAULT_CONFIG
    tree = spec_mod.load_tree(name)
    section = _section(tree.pop("degrade", None), name)
    for key, value in overrides:
        spec_mod.set_dotted(tree, key, value)
    for item in sets:
        spec_mod.set_dotted(tree, *spec_mod.parse_set(item))
    seed_list = seeds if seeds is not None else (
        list(range(section.seeds)) if isinstance(section.seeds, int) else list(section.seeds))
    plan = Plan(base=tree, depths=depths or list(section.depths), seeds=seed_list,
                nets=list(nets or section.nets), source=name)
    for depth in plan.depths:  # fail before training anything, with the spec's own one-line errors
        for net in plan.nets:
            twin(plan, net, depth, plan.seeds[0])
    return plan


def twin(plan: Plan, net: str, depth: int, seed: int):
    """The spec of one run. plain: shortcut.kind none. residual: the base's shortcut if it has one
    (so a user can set plain against, say, a gated net), else identity. All else is shared."""
    tree = spec_mod.merge(plan.base, {})
    spec_mod.set_dotted(tree, "model.depth", depth)
    spec_mod.set_dotted(tree, "run.seed", seed)
    kind = tree.get("model", {}).get("shortcut", {}).get("kind", "identity")
    if net == "plain":
        kind = "none"
    elif kind == "none":
        kind = "identity"
    spec_mod.set_dotted(tree, "model.shortcut.kind", kind)
    return spec_mod.resolve(spec_mod.validate(tree, f"{plan.source} ({net}, depth {depth})"))


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
    (%) over windows of `window` steps, as He 2016a Fig. 6 plots training error against iteration."""

    def __init__(self, window: int):
        self.window = max(1, window)
        self.grad_norm_first_layer: float | None = None
        self.curve: list[list[float]] = []  # [iteration, loss, error %]

    def on_start(self, t) -> None:
        self.first = next(m for m in t.model.modules() if isinstance(m, (torch.nn.Conv2d, torch.nn.Linear)))
        self.loss_sum = torch.zeros((), device=t.rt.device)
        self.wrong = torch.zeros((), device=t.rt.device)
        self.seen = 0
        self.steps = 0

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


def train_one(spec, data, points: int = 60, callbacks: list[Callback] = (), run_dir=None) -> dict[str, Any]:
    """Train one twin; returns its record (metrics, the curve, the wall time). With `run_dir` (a
    created RunDir) the run also leaves what `resnet train` leaves: resolved spec, metrics and the
    final checkpoint, so lesion, landscape and paths can read the trained net afterwards."""
    from ..train import Trainer

    start = time.perf_counter()
    key = spec_key(spec)
    trainer = Trainer(spec, run_dir=run_dir, data=data, callbacks=callbacks)
    probe = Probe(window=-(-trainer.total // points))
    trainer.callbacks.append(probe)
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
        "wall_s": round(time.perf_counter() - start, 2), "spec_key": key, "curve": probe.curve,
    }


# ---------------------------------------------------------------------------------------------
# The grid


def run(plan: Plan, out_dir: Path, on_run: Callable[[dict[str, Any], int, int, bool], None] | None = None,
        callbacks: Callable[[], list[Callback]] | None = None) -> list[dict[str, Any]]:
    """Train every (depth, net, seed) of the plan, reusing finished runs recorded in out_dir.
    `callbacks()` makes extra trainer callbacks for each run (progress, for instance)."""
    from .. import data as data_mod

    out_dir.mkdir(parents=True, exist_ok=True)
    done = {r["spec_key"]: r for r in _read_runs(out_dir / RUNS_FILE)}
    jobs = [(depth, net, seed) for depth in plan.depths for net in plan.nets for seed in plan.seeds]
    data = None
    records = []
    for i, (depth, net, seed) in enumerate(jobs):
        spec = twin(plan, net, depth, seed)
        key = spec_key(spec)
        if key not in done:  # another `resnet degrade` on the same --out may have finished it meanwhile
            done.update({r["spec_key"]: r for r in _read_runs(out_dir / RUNS_FILE)})
        reused = key in done
        if reused:
            record = done[key]
        else:
            if data is None:  # once: every twin shares the base's data section
                data = data_mod.load(spec.data)
            rd = _fresh_run_dir(out_dir, spec, net, key)
            try:
                record = train_one(spec, data, callbacks=callbacks() if callbacks else [], run_dir=rd)
                record["run_dir"] = rd.path.relative_to(out_dir).as_posix()  # the grid's folder can move
                with open(out_dir / RUNS_FILE, "a", encoding="utf-8") as f:
                    f.write(json.dumps(record) + "\n")
            finally:
                rd.unlock()
        records.append(record)
        if on_run:
            on_run(record, i + 1, len(jobs), reused)
    return records


def _fresh_run_dir(out_dir: Path, spec, net: str, key: str):
    """runs/<net>-<depth>-seed<seed> under the degrade directory, created and locked for this run.
    A directory of that name left by this very run, cut off before its record was written, is
    started over; one that holds another spec (the grid was rerun with other settings) is kept, and
    this run takes a name with its spec key instead. The lock makes a second `resnet degrade` on the
    same --out stop with one line rather than train the same run into the same files."""
    from ..rundir import CHECKPOINT, META, METRICS, SPEC, SUMMARY, RunDir

    name = f"{net}-{spec.model.depth}-seed{spec.run.seed}"
    for path in (out_dir / RUN_DIRS / name, out_dir / RUN_DIRS / f"{name}-{key[:8]}"):
        rd = RunDir(path)
        if (path / SPEC).exists() and _kept_key(path) != key:
            continue
        rd.lock()
        for leftover in (SPEC, META, METRICS, SUMMARY, CHECKPOINT):  # nothing here has a record to keep
            (path / leftover).unlink(missing_ok=True)
        spec = spec.model_copy(update={"run": spec.run.model_copy(update={"out": str(path)})})
        rd.create(spec, runtime={})
        return rd
    raise UserError(f"{out_dir / RUN_DIRS / name}: both this name and {name}-{key[:8]} hold other runs; "
                    "pick another --out")


def _kept_key(path: Path) -> str | None:
    """The key of the run kept in `path`, from its spec.yaml as this version reads it (None: no
    spec there, or one this version rejects)."""
    from ..rundir import SPEC, RunDir

    if not (path / SPEC).is_file():
        return None
    try:
        return spec_key(spec_mod.resolve(spec_mod.validate(RunDir(path).spec_tree(), str(path / SPEC))))
    except UserError:
        return None


def _read_runs(path: Path) -> list[dict[str, Any]]:
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


def _stats(values: list[float | None]) -> dict[str, float | None]:
    vals = [v for v in values if v is not None]
    if not vals:
        return {"median": None, "min": None, "max": None}
    return {"median": statistics.median(vals), "min": min(vals), "max": max(vals)}


def summarise(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Median and min-max over seeds per (net, depth); n counts runs, diverged ones included in n
    and named (a diverged run keeps the metrics of its last completed epoch, if any)."""
    groups: dict[tuple[str, int], list[dict[str, Any]]] = {}
    for r in records:
        groups.setdefault((r["net"], r["depth"]), []).append(r)
    out = []
    for (net, depth), runs in sorted(groups.items(), key=lambda kv: (kv[0][1], NETS.index(kv[0][0]))):
        row: dict[str, Any] = {"event": "summary", "net": net, "depth": depth, "n": len(runs),
                               "diverged": sum(r["status"] == "diverged" for r in runs),
                               "params": runs[0]["params"], "seeds": [r["seed"] for r in runs]}
        for metric in ("train_loss", "train_acc", "test_acc", "grad_norm_first_layer"):
            for stat, value in _stats([r[metric] for r in runs]).items():
                row[f"{metric}_{stat}"] = value
        # The published figures are for conv nets; a vit grid on the same data has none.
        ref = REFERENCE.get((runs[0]["dataset"], net, depth)) if runs[0].get("family") != "vit" else None
        if ref:
            row["reference"] = ref
        out.append(row)
    return out


# ---------------------------------------------------------------------------------------------
# The figure


def figure(records: list[dict[str, Any]], path: Path) -> Path:
    """Left: training error (%) against iteration, median over seeds, one colour per depth, plain
    dashed and residual solid (He 2016a Fig. 6). Right: final training and test accuracy against
    depth, median with min-max bars."""
    from .. import figures

    plt = figures.pyplot()
    fig, (ax_c, ax_d) = plt.subplots(1, 2, figsize=(11, 4.2), gridspec_kw={"width_ratios": [1.6, 1]})
    depths = sorted({r["depth"] for r in records})
    for net in NETS:
        for j, depth in enumerate(depths):
            runs = [r for r in records if r["net"] == net and r["depth"] == depth and r["curve"]]
            if not runs:
                continue
            iters, median, lo, hi = _curve_band(runs)
            colour = f"C{j % 10}"
            ax_c.plot(iters, median, color=colour, label=f"{net}-{depth}", lw=1.4, **figures.STYLE[net])
            if len(runs) > 1:
                ax_c.fill_between(iters, lo, hi, color=colour, alpha=0.08, lw=0)
    ax_c.set(xlabel="iteration", ylabel="training error (%)", ylim=(0, None),
             title="training error (median over seeds; band: min-max)")
    ax_c.legend(fontsize=7, ncol=2)
    for net in NETS:
        for metric, marker in (("train_acc", "o"), ("test_acc", "s")):
            xs, med, err_lo, err_hi = [], [], [], []
            for depth in depths:
                vals = [r[metric] for r in records if r["net"] == net and r["depth"] == depth and r[metric] is not None]
                if vals:
                    m = statistics.median(vals)
                    xs.append(depth), med.append(m), err_lo.append(m - min(vals)), err_hi.append(max(vals) - m)
            if xs:
                ax_d.errorbar(xs, med, yerr=[err_lo, err_hi], marker=marker, capsize=3, lw=1.2,
                              color="C3" if net == "plain" else "C0", label=f"{net} {metric.replace('_', ' ')}",
                              **figures.STYLE[net])
    ax_d.set(xlabel="depth (weight layers)", ylabel="accuracy", xticks=depths,
             title="final accuracy (median, min-max)")
    ax_d.legend(fontsize=7)
    return figures.save(fig, path)


def _curve_band(runs: list[dict[str, Any]]) -> tuple[list[float], list[float], list[float], list[float]]:
    """Pointwise median/min/max of the runs' error curves over the iterations they all share."""
    length = min(len(r["curve"]) for r in runs)
    iters = [runs[0]["curve"][i][0] for i in range(length)]
    cols = [[r["curve"][i][2] for r in runs] for i in range(length)]
    return iters, [statistics.median(c) for c in cols], [min(c) for c in cols], [max(c) for c in cols]
