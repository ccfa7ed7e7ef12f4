"""The degradation problem, measured (He 2016a sec. 4.2 and Fig. 6; the digits experiment of the
"Residual Connection" article).

Plain and residual twins (the same layers and parameters; only `model.shortcut.kind` differs) are
trained at several depths over several seeds. Per run we keep the last epoch's training loss and
accuracy (averaged over that epoch, as the article reports them), the last epoch's test accuracy, the
first conv's gradient norm at step 1, and a training-error curve; per (net, depth) the median and
min-max over seeds with n. Nothing is selected on the test set.

Runs train in memory on data loaded once. Each finished run is appended to `runs.jsonl` in the
output directory, and a rerun with the same directory reuses the runs whose resolved spec matches,
and a run cut off before its record continues from its last checkpoint (degrade_runs.py), so a
long grid (the CIFAR-10 Fig. 6 config) survives interruption without losing more than an epoch.
"""

from __future__ import annotations

import json
import statistics
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from .. import spec as spec_mod
from ..errors import UserError
from ..spec import unknown_key
from ..training.callbacks import Callback
from ..training.rundir import make_dir
from .degrade_runs import RUN_DIRS, open_run_dir, read_runs, spec_key, train_one  # noqa: F401 (re-exported)
from . import evidence
from .degrade_reference import ARTICLE, REFERENCE, findings, he2016a  # noqa: F401 (re-exported)

NETS = ("plain", "residual")
RUNS_FILE, RESULT_FILE, FIGURE_FILE = "runs.jsonl", "degrade.json", "degrade.png"
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
            raise UserError(unknown_key(source, path, list(Section.model_fields), "degrade")) from None
        raise UserError(f"{source}: {path}: {e['msg']} (got {e.get('input')!r})") from None


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


# ---------------------------------------------------------------------------------------------
# The grid


def run(plan: Plan, out_dir: Path, on_run: Callable[[dict[str, Any], int, int, bool], None] | None = None,
        callbacks: Callable[[], list[Callback]] | None = None) -> list[dict[str, Any]]:
    """Train every (depth, net, seed) of the plan, reusing finished runs recorded in out_dir.
    `callbacks()` makes extra trainer callbacks for each run (progress, for instance)."""
    from .. import data as data_mod

    make_dir(out_dir)
    done = {r["spec_key"]: r for r in read_runs(out_dir / RUNS_FILE)}
    jobs = [(depth, net, seed) for depth in plan.depths for net in plan.nets for seed in plan.seeds]
    data = None
    records = []
    for i, (depth, net, seed) in enumerate(jobs):
        spec = twin(plan, net, depth, seed)
        key = spec_key(spec)
        if key not in done:  # another `resnet degrade` on the same --out may have finished it meanwhile
            done.update({r["spec_key"]: r for r in read_runs(out_dir / RUNS_FILE)})
        reused = key in done
        if reused:
            record = done[key]
        else:
            if data is None:  # once: every twin shares the base's data section
                data = data_mod.load(spec.data)
            rd, state = open_run_dir(out_dir, spec, net, key)
            try:
                record = train_one(spec, data, callbacks=callbacks() if callbacks else [], run_dir=rd, state=state)
                record["run_dir"] = rd.path.relative_to(out_dir).as_posix()  # the grid's folder can move
                with open(out_dir / RUNS_FILE, "a", encoding="utf-8") as f:
                    f.write(json.dumps(record) + "\n")
            finally:
                rd.unlock()
        records.append(record)
        if on_run:
            on_run(record, i + 1, len(jobs), reused)
    return records


def _stats(values: list[float | None]) -> dict[str, float | None]:
    vals = [v for v in values if v is not None]
    if not vals:
        return {"median": None, "min": None, "max": None}
    return {"median": statistics.median(vals), "min": min(vals), "max": max(vals)}


PAIRED = ("train_acc", "test_acc")


def summarise(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Median and min-max over seeds per (net, depth), with mean, std and the median's 95% bootstrap
    interval (evidence.py; none below 3 seeds); n counts runs, diverged ones included in n and named
    (a diverged run keeps the metrics of its last completed epoch, if any). The residual row of a
    depth also carries `paired`: residual minus plain per metric, paired by seed (the twins share
    every seed), with the interval of the mean difference."""
    groups: dict[tuple[str, int], list[dict[str, Any]]] = {}
    for r in records:
        groups.setdefault((r["net"], r["depth"]), []).append(r)
    out = []
    for (net, depth), runs in sorted(groups.items(), key=lambda kv: (kv[0][1], NETS.index(kv[0][0]))):
        row: dict[str, Any] = {"event": "summary", "net": net, "depth": depth, "n": len(runs),
                               "diverged": sum(r["status"] == "diverged" for r in runs),
                               "params": runs[0]["params"], "seeds": [r["seed"] for r in runs]}
        for metric in ("train_loss", "train_acc", "test_acc", "grad_norm_first_layer"):
            values = [r[metric] for r in runs]
            for stat, value in _stats(values).items():
                row[f"{metric}_{stat}"] = value
            ev = evidence.describe(values)
            row[f"{metric}_mean"], row[f"{metric}_std"], row[f"{metric}_ci95"] = ev["mean"], ev["std"], ev["ci95"]
        twin_runs = groups.get(("plain", depth)) if net == "residual" else None
        if twin_runs:
            row["paired"] = {m: evidence.paired({r["seed"]: r[m] for r in twin_runs}, {r["seed"]: r[m] for r in runs})
                             for m in PAIRED}
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
