"""What a study's seeds can carry: intervals at their coverage, paired tests at their level, the paper's order.

One place for the statistics of every study table (`resnet ablate`, `resnet report`, `resnet
degrade` and the docs' renderers in tools/). Torch-free: scipy and numpy only. Which pairs form a
study's family is verdicts.py's; how many seeds a family needs, power.py's.

- Per row: median, mean ± sample std, n, and the distribution-free interval of the *median* from
  the order statistics [x_(k), x_(n+1-k)], whose coverage is exact for any continuous distribution:
  1 - 2 P(Binomial(n, 1/2) <= k - 1). The narrowest with at least 95% is used; where no k reaches
  95% (n <= 5) the range [min, max] is given with its own coverage (75% at n = 3, 93.7% at n = 5,
  printed floored so no label promises more), and labelled so. Below 3 seeds no interval.
- Two rows compared: rows share seeds, so the difference is paired by seed value. The test is the
  sign-flip permutation test of the mean paired difference (two-sided; all 2^n sign patterns up
  to n = 16, a seeded Monte Carlo above, whose p carries its standard error). It assumes only that
  under "no difference" each seed's difference is as likely negative as positive. Its smallest
  possible p is 2 / 2^n: 3-5 seeds cannot reach 5% whatever the numbers; 6 that agree in sign can.
  Beside the p, the difference's size: the Hodges-Lehmann estimate with its exact signed-rank
  interval at the coverage it has (shift_interval).
- Many comparisons in one family: Holm's step-down adjustment keeps the chance of any false
  "resolved" at 5%; a comparison is resolved when its Holm-adjusted p is at most 5%.
- Against the paper's order: Kendall's tau-b between our medians and the paper's figures with its
  one-sided permutation p (ours agree with the paper's order better than chance), exact by
  enumerating all n! orders up to 8 rows, a seeded Monte Carlo above (said in the result).
"""

from __future__ import annotations

import functools
import itertools
import math
import statistics
from collections.abc import Mapping, Sequence
from typing import Any

LEVEL = 0.95  # the coverage an interval aims at
ALPHA = 0.05  # a pair is resolved when its Holm-adjusted p is at most this
EXACT_FLIPS = 16  # up to this many seeds, every sign pattern; above, Monte Carlo
EXACT_ORDERS = 8  # up to this many rows, every order (8! = 40320); above, Monte Carlo
RESAMPLES = 20000  # Monte Carlo draws (sign flips or orders)
SEED = 0  # the resampling's own seed: tables are the same on every rerun
MIN_N = 3  # fewer seeds: no interval
NO_INTERVAL = f"n < {MIN_N}: no interval"


def finite_values(values: Sequence[Any]) -> list[float]:
    """The finite numbers among `values` (None, NaN, inf and booleans left out)."""
    return [float(v) for v in values if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)]


def _rng():
    import numpy as np

    return np.random.default_rng(SEED)


# -- one row -----------------------------------------------------------------------------------

def median_interval(values: Sequence[float]) -> tuple[float, float, float] | None:
    """(lo, hi, coverage): the order-statistic interval of the median (see the module's note)."""
    from scipy import stats

    x = sorted(finite_values(values))
    n = len(x)
    if n < MIN_N:
        return None
    best = 1  # k = 1 is [min, max], the widest
    for k in range(2, n // 2 + 1):
        if 1 - 2 * stats.binom.cdf(k - 1, n, 0.5) >= LEVEL:
            best = k
    coverage = 1 - 2 * float(stats.binom.cdf(best - 1, n, 0.5))
    return x[best - 1], x[n - best], coverage


def describe(values: Sequence[Any]) -> dict[str, Any]:
    """median, mean, std (sample, n - 1), n, `interval` (the median's) and its `coverage`, or None
    with `interval_reason`."""
    vals = finite_values(values)
    n = len(vals)
    out: dict[str, Any] = {"median": statistics.median(vals) if vals else None,
                           "mean": statistics.fmean(vals) if vals else None,
                           "std": statistics.stdev(vals) if n >= 2 else None, "n": n,
                           "interval": None, "coverage": None}
    mi = median_interval(vals)
    if mi is None:
        out["interval_reason"] = NO_INTERVAL
    else:
        out["interval"], out["coverage"] = [mi[0], mi[1]], mi[2]
    return out


def coverage_label(coverage: float | None) -> str:
    """'95%', '75%': the level an interval holds, floored so no label promises more."""
    return "-" if coverage is None else f"{math.floor(coverage * 1000) / 10:g}%"


# -- two rows ----------------------------------------------------------------------------------

@functools.lru_cache(maxsize=EXACT_FLIPS + 1)
def _sign_patterns(n: int):
    """Every one of the 2^n sign patterns of n seeds, as a (2^n, n) matrix of +-1 (read-only: shared)."""
    import numpy as np

    signs = (1 - 2 * ((np.arange(2 ** n)[:, None] >> np.arange(n)) & 1)).astype(float)
    signs.flags.writeable = False
    return signs


def signflip(diffs: Sequence[float]) -> dict[str, Any]:
    """Two-sided sign-flip permutation p of the mean paired difference: the share of sign patterns
    whose |sum| is at least the observed |sum|. `exact` over all 2^n patterns up to EXACT_FLIPS
    seeds; otherwise RESAMPLES seeded draws, with the observed pattern counted once, and `p_se`."""
    import numpy as np

    d = np.asarray(finite_values(diffs))
    n = len(d)
    if n == 0:
        return {"p": None, "exact": True, "p_se": 0.0}
    observed = abs(d.sum()) * (1 - 1e-12)  # float sums of equal magnitude count as ties
    if n <= EXACT_FLIPS:
        signs = _sign_patterns(n)
        return {"p": float(np.mean(np.abs(signs @ d) >= observed)), "exact": True, "p_se": 0.0}
    signs = _rng().choice([-1.0, 1.0], size=(RESAMPLES, n))
    p = (1 + int(np.sum(np.abs(signs @ d) >= observed))) / (RESAMPLES + 1)
    return {"p": p, "exact": False, "p_se": math.sqrt(p * (1 - p) / RESAMPLES)}


def smallest_p(n: int) -> float:
    """The smallest two-sided sign-flip p that n seeds can give (all differences of one sign)."""
    return 2.0 / 2 ** n if n else 1.0


def seeds_to_resolve(family: int = 1) -> int:
    """The fewest seeds whose sign-flip test can reach ALPHA at all, in a family of `family` pairs
    after Holm (whose first step asks for ALPHA / family): 6 alone, 9 among 11 pairs."""
    return next(n for n in itertools.count(1) if smallest_p(n) <= ALPHA / max(family, 1))


def _signed_rank_cdf(n: int) -> list[float]:
    """P(W+ <= w) for w = 0 .. n(n+1)/2 under the null of the Wilcoxon signed-rank test: each of
    the 2^n sign patterns of ranks 1..n equally likely (counted by subset sums of the ranks)."""
    counts = [1] + [0] * (n * (n + 1) // 2)
    for rank in range(1, n + 1):
        for w in range(len(counts) - 1, rank - 1, -1):
            counts[w] += counts[w - rank]
    total, running, out = 2 ** n, 0, []
    for c in counts:
        running += c
        out.append(running / total)
    return out


def shift_interval(diffs: Sequence[float]) -> dict[str, Any]:
    """The paired difference's size: the Hodges-Lehmann estimate (the median of the n(n+1)/2 Walsh
    averages (d_i + d_j) / 2, i <= j) and its exact interval [W_(k), W_(M+1-k)] from the signed-rank
    distribution (Hollander and Wolfe, Nonparametric Statistical Methods, sec. 3.3), whose coverage
    1 - 2 P(W+ <= k - 1) holds for any continuous distribution of differences symmetric about its
    centre. The narrowest with at least LEVEL; where none reaches it (n <= 5) the widest, [min, max]
    of the Walsh averages, with the coverage it has; below MIN_N seeds, none."""
    d = sorted(finite_values(diffs))
    n = len(d)
    if not n:
        return {"shift": None, "interval": None, "coverage": None}
    walsh = sorted((d[i] + d[j]) / 2 for i in range(n) for j in range(i, n))
    shift = statistics.median(walsh)
    if n < MIN_N:
        return {"shift": shift, "interval": None, "coverage": None}
    cdf = _signed_rank_cdf(n)
    best = 1
    for k in range(2, len(walsh) // 2 + 1):
        if 1 - 2 * cdf[k - 1] >= LEVEL:
            best = k
    return {"shift": shift, "interval": [walsh[best - 1], walsh[len(walsh) - best]],
            "coverage": 1 - 2 * cdf[best - 1]}


SHIFT_METHOD = "Hodges-Lehmann estimate, exact signed-rank interval of the Walsh averages"


def paired(a: Mapping[Any, float | None], b: Mapping[Any, float | None], family: int = 1) -> dict[str, Any]:
    """b - a over the seeds both rows have, paired by seed value (per-seed values keyed by seed, in
    any order; a seed one row lacks is left out): the seeds, n, mean, median and sd of the
    differences, the Hodges-Lehmann `shift` with its `interval` and `coverage` (shift_interval), the
    sign-flip p, and `can_resolve` (whether its n can reach Holm's first step among `family` at
    all). `p_holm` and `resolved` come from `holm` over the family (`adjust`); alone, a pair is its
    own family."""
    seeds = sorted(s for s in a if s in b and len(finite_values([a[s], b[s]])) == 2)
    diffs = [float(b[s]) - float(a[s]) for s in seeds]
    n = len(diffs)
    test = signflip(diffs)
    out: dict[str, Any] = {"seeds": seeds, "n": n, "diffs": diffs,
                           "mean": statistics.fmean(diffs) if diffs else None,
                           "median": statistics.median(diffs) if diffs else None,
                           "sd": statistics.stdev(diffs) if n >= 2 else None, **shift_interval(diffs),
                           "p": test["p"], "p_exact": test["exact"], "p_se": test["p_se"],
                           "can_resolve": smallest_p(n) <= ALPHA / max(family, 1)}
    return adjust([out])[0]


def holm(ps: Sequence[float | None]) -> list[float | None]:
    """Holm's step-down adjusted p-values, in the given order (None stays None and does not count)."""
    idx = sorted((i for i, p in enumerate(ps) if p is not None), key=lambda i: ps[i])
    m, out, running = len(idx), list(ps), 0.0
    for rank, i in enumerate(idx):
        running = max(running, min(1.0, (m - rank) * ps[i]))
        out[i] = running
    return out


def adjust(pairs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Each pair's `p_holm` over the family `pairs`, and `resolved` = p_holm <= ALPHA (in place)."""
    for pair, p in zip(pairs, holm([q["p"] for q in pairs])):
        pair["p_holm"] = p
        pair["resolved"] = p is not None and p <= ALPHA and pair["mean"] != 0
    return pairs


# -- the paper's order -------------------------------------------------------------------------

def kendall(ours: Sequence[float], paper: Sequence[float]) -> dict[str, Any]:
    """Kendall's tau-b of our medians against the paper's figures and its one-sided permutation p
    (ours in the paper's order better than chance): every order of our values up to EXACT_ORDERS
    rows, RESAMPLES seeded orders above; None with a reason below 3 rows."""
    import numpy as np
    from scipy import stats

    n = len(ours)
    if n < MIN_N:
        return {"kendall_tau": None, "p_value": None, "rows": n,
                "reason": f"{n} rows with a paper figure and a median: no order to test"}
    x, y = np.asarray(ours, dtype=float), np.asarray(paper, dtype=float)
    t = stats.kendalltau(x, y).statistic
    if not math.isfinite(t):  # every median or every paper figure equal: no order
        return {"kendall_tau": None, "p_value": None, "rows": n, "reason": "all values tied: no order"}
    # tau-b's denominator depends only on the ties in each variable, which a reordering keeps: the
    # permutation distribution of tau is that of S = sum over pairs of sign(dx) sign(dy).
    i, j = np.triu_indices(n, 1)
    sy = np.sign(y[i] - y[j])
    observed = np.sign(x[i] - x[j]) @ sy
    exact = n <= EXACT_ORDERS
    if exact:
        orders = np.array(list(itertools.permutations(range(n))))
    else:
        rng = _rng()
        orders = np.array([rng.permutation(n) for _ in range(RESAMPLES)])
    xs = x[orders]
    s = np.sign(xs[:, i] - xs[:, j]) @ sy
    hits = int(np.sum(s >= observed - 1e-9))
    p = hits / len(orders) if exact else (hits + 1) / (len(orders) + 1)
    return {"kendall_tau": float(t), "p_value": float(p), "rows": n, "p_exact": exact}


def interval_str(interval: Sequence[float] | None, coverage: float | None = None, digits: int = 2) -> str:
    """[lo, hi] (with its coverage where given), or the reason there is none."""
    if interval is None:
        return NO_INTERVAL
    text = f"[{interval[0]:.{digits}f}, {interval[1]:.{digits}f}]"
    return f"{text} {coverage_label(coverage)}" if coverage is not None else text
