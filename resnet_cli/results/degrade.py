"""A degrade grid's results, computed once from its runs' records (experiments/degrade_runs.py): per
(net, depth) the summary over seeds (median, min-max, mean ± std, the median's interval with its
coverage, residual minus plain paired by seed with Holm over the grid) and the training-error
curve's band. The table, the JSON lines, degrade.json and the figure render these.
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping
from typing import Any

from . import evidence, power

NETS = ("plain", "residual")


def _stats(values: list[float | None]) -> dict[str, float | None]:
    vals = [v for v in values if v is not None]
    if not vals:
        return {"median": None, "min": None, "max": None}
    return {"median": statistics.median(vals), "min": min(vals), "max": max(vals)}


PAIRED = ("train_acc", "test_acc")


def summarise(records: list[dict[str, Any]], reference: Mapping[tuple, dict[str, Any]]) -> list[dict[str, Any]]:
    """Median and min-max over seeds per (net, depth), with mean, std and the median's
    order-statistic interval with its coverage (evidence.py; none below 3 seeds); n counts runs,
    diverged ones included in n and named (a diverged run counts as a failed run at chance,
    degrade_runs.py, in the medians, the intervals and the pairs alike). The residual row of a depth also carries `paired`: residual minus plain per
    metric, paired by seed (the twins share every seed), with the sign-flip p, its Holm adjustment
    over all the grid's pairs, the Hodges-Lehmann difference with its interval and coverage, and
    the seeds that would resolve it (power.py). `reference`: the published
    figures by (dataset, net, depth), carried beside ours."""
    groups: dict[tuple[str, int], list[dict[str, Any]]] = {}
    for r in records:
        groups.setdefault((r["net"], r["depth"]), []).append(r)
    family = len(PAIRED) * sum(net == "residual" and ("plain", depth) in groups for net, depth in groups)
    out = []
    for (net, depth), runs in sorted(groups.items(), key=lambda kv: (kv[0][1], NETS.index(kv[0][0]))):
        row: dict[str, Any] = {"event": "summary", "net": net, "depth": depth, "n": len(runs),
                               "diverged": sum(bool(r.get("diverged", r["status"] == "diverged")) for r in runs),
                               "params": runs[0]["params"], "seeds": [r["seed"] for r in runs]}
        for metric in ("train_loss", "train_acc", "test_acc", "grad_norm_first_layer"):
            values = [r[metric] for r in runs]
            for stat, value in _stats(values).items():
                row[f"{metric}_{stat}"] = value
            ev = evidence.describe(values)
            row[f"{metric}_mean"], row[f"{metric}_std"] = ev["mean"], ev["std"]
            row[f"{metric}_interval"], row[f"{metric}_coverage"] = ev["interval"], ev["coverage"]
        twin_runs = groups.get(("plain", depth)) if net == "residual" else None
        if twin_runs:
            row["paired"] = {m: evidence.paired({r["seed"]: r[m] for r in twin_runs}, {r["seed"]: r[m] for r in runs},
                                                family) for m in PAIRED}
        # The published figures are for conv nets; a vit grid on the same data has none.
        ref = reference.get((runs[0]["dataset"], net, depth)) if runs[0].get("family") != "vit" else None
        if ref:
            row["reference"] = ref
        out.append(row)
    evidence.adjust([row["paired"][m] for row in out if "paired" in row for m in PAIRED])  # one family: the grid
    for row in out:
        for pair in (row.get("paired") or {}).values():
            pair["seeds_needed"] = power.seeds_needed(pair["diffs"], family)
    return out


def curve_bands(records: list[dict[str, Any]]) -> dict[tuple[str, int], dict[str, Any]]:
    """(net, depth) -> the pointwise median, min and max of its runs' training-error curves over the
    iterations they all share (He 2016a Fig. 6's curves, one band per net and depth)."""
    groups: dict[tuple[str, int], list[dict[str, Any]]] = {}
    for r in records:
        if r["curve"]:
            groups.setdefault((r["net"], r["depth"]), []).append(r)
    out = {}
    for key, runs in groups.items():
        iters, median, lo, hi = _band(runs)
        out[key] = {"iters": iters, "median": median, "lo": lo, "hi": hi, "runs": len(runs)}
    return out


def _band(runs: list[dict[str, Any]]) -> tuple[list[float], list[float], list[float], list[float]]:
    """Pointwise median/min/max of the runs' error curves over the iterations they all share."""
    length = min(len(r["curve"]) for r in runs)
    iters = [runs[0]["curve"][i][0] for i in range(length)]
    cols = [[r["curve"][i][2] for r in runs] for i in range(length)]
    return iters, [statistics.median(c) for c in cols], [min(c) for c in cols], [max(c) for c in cols]
