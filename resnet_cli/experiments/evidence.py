"""What a study's seeds can carry: intervals, paired differences and the paper's order, tested.

One place for the statistics of every study table (`resnet ablate`, `resnet report`, `resnet
degrade` and the docs' renderers in tools/). Torch-free: scipy and numpy only, so the docs jobs and
`resnet report` import it in a fraction of a second.

- Per row: median, mean ± sample std, n, and a 95% percentile-bootstrap interval of the *median*
  over seeds (scipy.stats.bootstrap). Percentile rather than BCa: BCa's jackknife of a median over
  3-5 seeds is degenerate (scipy returns NaN). Below 3 seeds no interval is given, not a fake one.
- Two rows compared: rows share seeds (the sweep trains every row at every seed), so the
  difference is paired by seed value, and the interval is a percentile bootstrap of the *mean*
  paired difference (seeds present in both rows only). A pair is resolved when the interval
  excludes 0.
- Against the paper's order: Kendall's tau-b between our medians and the paper's figures (rows with
  a numeric figure), with a one-sided permutation p-value (scipy.stats.permutation_test, the
  alternative that ours agree with the paper's order better than chance; exact when the rows'
  orderings are fewer than the resamples).
- Seeds that would resolve an unresolved gap, from the measured std of the paired differences
  (normal approximation, two-sided 5% test at 80% power): n = ((1.96 + 0.84) * sd / gap)^2.

Every resampling draws from numpy's default_rng(SEED), so a table is the same on every rerun.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable, Mapping, Sequence
from typing import Any

CONFIDENCE = 0.95
RESAMPLES = 9999
SEED = 0  # the resampling's own seed: tables are reproducible
MIN_N = 3  # fewer seeds: no interval
Z_ALPHA, Z_POWER = 1.959964, 0.841621  # two-sided 5%, 80% power
NO_INTERVAL = f"n < {MIN_N}: no interval"


def _finite(values: Sequence[Any]) -> list[float]:
    return [float(v) for v in values if isinstance(v, (int, float)) and math.isfinite(v)]


def _bootstrap(values: list[float], statistic) -> list[float]:
    import numpy as np
    from scipy import stats

    res = stats.bootstrap((np.asarray(values),), statistic, confidence_level=CONFIDENCE, n_resamples=RESAMPLES,
                          method="percentile", rng=np.random.default_rng(SEED))
    return [float(res.confidence_interval.low), float(res.confidence_interval.high)]


def describe(values: Sequence[Any]) -> dict[str, Any]:
    """median, mean, std (sample, n - 1), n and ci95 (the median's interval, or None with a reason)."""
    import numpy as np

    vals = _finite(values)
    n = len(vals)
    out: dict[str, Any] = {"median": statistics.median(vals) if vals else None,
                           "mean": statistics.fmean(vals) if vals else None,
                           "std": statistics.stdev(vals) if n >= 2 else None, "n": n, "ci95": None}
    if n < MIN_N:
        out["ci95_reason"] = NO_INTERVAL
    else:
        out["ci95"] = _bootstrap(vals, np.median)
    return out


def seeds_needed(sd: float | None, gap: float | None) -> int | None:
    """Seeds at which a paired gap this large would be resolved (see the module's docstring); None
    when there is no gap to resolve or no spread measured."""
    if sd is None or gap is None or gap == 0 or sd == 0:
        return None
    return max(MIN_N, math.ceil(((Z_ALPHA + Z_POWER) * sd / abs(gap)) ** 2))


def paired(a: Mapping[Any, float | None], b: Mapping[Any, float | None]) -> dict[str, Any]:
    """b - a over the seeds both rows have (per-seed values keyed by seed): mean and median of the
    differences, their sd, n, the bootstrap interval of the mean, resolved, and seeds_needed."""
    import numpy as np

    seeds = sorted(s for s in a if s in b and len(_finite([a[s], b[s]])) == 2)
    diffs = [float(b[s]) - float(a[s]) for s in seeds]
    n = len(diffs)
    out: dict[str, Any] = {"seeds": seeds, "n": n, "mean": statistics.fmean(diffs) if diffs else None,
                           "median": statistics.median(diffs) if diffs else None,
                           "sd": statistics.stdev(diffs) if n >= 2 else None, "ci95": None, "resolved": False}
    if n < MIN_N:
        out["ci95_reason"] = NO_INTERVAL
    else:
        lo, hi = out["ci95"] = _bootstrap(diffs, np.mean)
        out["resolved"] = lo > 0 or hi < 0
    out["seeds_needed"] = None if out["resolved"] else seeds_needed(out["sd"], out["mean"])
    return out


def kendall(ours: Sequence[float], paper: Sequence[float]) -> dict[str, Any]:
    """Kendall's tau-b of our medians against the paper's figures and its one-sided permutation
    p-value (agreement with the paper's order); None with a reason below 3 rows."""
    import numpy as np
    from scipy import stats

    if len(ours) < MIN_N:
        return {"kendall_tau": None, "p_value": None, "rows": len(ours),
                "reason": f"{len(ours)} rows with a paper figure and a median: no order to test"}
    x, y = np.asarray(ours, dtype=float), np.asarray(paper, dtype=float)

    def tau(xs, ys):
        return stats.kendalltau(xs, ys).statistic

    t = tau(x, y)
    if not math.isfinite(t):  # every median or every paper figure equal: no order
        return {"kendall_tau": None, "p_value": None, "rows": len(ours), "reason": "all values tied: no order"}
    res = stats.permutation_test((x, y), tau, permutation_type="pairings", alternative="greater",
                                 n_resamples=RESAMPLES, rng=np.random.default_rng(SEED))
    return {"kendall_tau": float(t), "p_value": float(res.pvalue), "rows": len(ours)}


def compare(rows: Sequence[Mapping[str, Any]], group: Callable[[str], str] | None = None) -> dict[str, Any]:
    """A study against the paper's order. `rows`: dicts with `index`, `row` (label), `paper`,
    `median`, `fail` and `values` (seed -> test error, None where a run gave none). Pairs are the rows
    with numeric, different paper figures (within one `group` of labels where given, as He 2016b
    Table 2 compares the orderings of one net at a time), leaving out pairs that both fail here (two
    nets at chance have no order) and rows with no completed seed; each pair's difference is worse-in-the-paper minus
    better-in-the-paper, paired by seed, so a positive difference is the paper's order."""
    numeric = [r for r in rows if isinstance(r.get("paper"), (int, float)) and not isinstance(r.get("paper"), bool)]
    groups: dict[str, list[Mapping[str, Any]]] = {}
    for r in numeric:
        groups.setdefault(group(r["row"]) if group else "", []).append(r)

    def failed(r: Mapping[str, Any]) -> bool:
        return bool(r.get("fail")) or r.get("median") is None

    def measured(r: Mapping[str, Any]) -> bool:
        return bool(_finite(list(r["values"].values())))

    pairs = []
    for name, members in groups.items():
        for i, a in enumerate(members):
            for b in members[i + 1:]:
                # A row with no completed seed (diverged) has nothing to pair; the tables say it fails.
                if a["paper"] == b["paper"] or (failed(a) and failed(b)) or not (measured(a) and measured(b)):
                    continue
                better, worse = (a, b) if a["paper"] < b["paper"] else (b, a)
                d = paired(better["values"], worse["values"])
                lo, hi = d["ci95"] or (None, None)
                verdict = ("in order" if d["resolved"] and lo > 0 else
                           "reversed" if d["resolved"] and hi < 0 else "unresolved")
                pairs.append({"group": name or None, "better": better["index"], "worse": worse["index"],
                              "verdict": verdict, **d})
    ranked = [r for r in numeric if r.get("median") is not None]
    taus = kendall([r["median"] for r in ranked], [r["paper"] for r in ranked])
    return {**taus, "pairs_in_order_resolved": sum(p["verdict"] == "in order" for p in pairs),
            "pairs_unresolved": sum(p["verdict"] == "unresolved" for p in pairs),
            "pairs_reversed_resolved": sum(p["verdict"] == "reversed" for p in pairs),
            "pairs": pairs}


def interval_str(ci: Sequence[float] | None, digits: int = 2) -> str:
    """[lo, hi], or the reason there is none."""
    if ci is None:
        return NO_INTERVAL
    return f"[{ci[0]:.{digits}f}, {ci[1]:.{digits}f}]"
