"""What a study's seeds can carry: intervals at their coverage, paired tests at their level, the paper's order.

One place for the statistics of every study table (`resnet ablate`, `resnet report`, `resnet
degrade` and the docs' renderers in tools/). Torch-free: scipy and numpy only.

- Per row: median, mean ± sample std, n, and the distribution-free interval of the *median* from
  the order statistics [x_(k), x_(n+1-k)], whose coverage is exact for any continuous distribution:
  1 - 2 P(Binomial(n, 1/2) <= k - 1). The narrowest with at least 95% is used; where no k reaches
  95% (n <= 5) the range [min, max] is given with its own coverage (75% at n = 3, 94% at n = 5),
  and labelled so. Below 3 seeds no interval.
- Two rows compared: rows share seeds, so the difference is paired by seed value. The test is the
  sign-flip permutation test of the mean paired difference (two-sided; all 2^n sign patterns up
  to n = 16, a seeded Monte Carlo above, whose p carries its standard error). It assumes only that
  under "no difference" each seed's difference is as likely negative as positive. Its smallest
  possible p is 2 / 2^n: 3-5 seeds cannot reach 5% whatever the numbers; 6 that agree in sign can.
  Beside it, the 95% t-interval of the mean difference (Student; it assumes normal differences).
- Many pairs in one study (or one degrade grid): Holm's step-down adjustment keeps the chance of
  any false "resolved" at 5%; a pair is resolved when its Holm-adjusted p is at most 5%.
- Seeds needed: the paired t-test's sample size for 80% power at 5% (two-sided; 5% / m among m
  pairs, Holm's strictest step) for the observed mean gap, computed from the noncentral t; as a
  range over the central 80% interval of the differences' sd (chi-square, n - 1 degrees of
  freedom), since an sd from 3 seeds is itself very uncertain; never below the seeds the sign-flip test needs at that level (6 alone, 9 among 11
  pairs). The gap is the observed one: a planning figure, not a promise.
- Against the paper's order: Kendall's tau-b between our medians and the paper's figures with its
  one-sided permutation p (ours agree with the paper's order better than chance), exact by
  enumerating all n! orders up to 8 rows, a seeded Monte Carlo above (said in the result).
"""

from __future__ import annotations

import itertools
import math
import statistics
from collections.abc import Callable, Mapping, Sequence
from typing import Any

LEVEL = 0.95  # the coverage an interval aims at
ALPHA = 0.05  # a pair is resolved when its Holm-adjusted p is at most this
POWER = 0.80  # seeds needed: the power aimed at
SD_RANGE = 0.80  # seeds needed: the central interval of the sd that spans its range
EXACT_FLIPS = 16  # up to this many seeds, every sign pattern; above, Monte Carlo
EXACT_ORDERS = 8  # up to this many rows, every order (8! = 40320); above, Monte Carlo
RESAMPLES = 20000  # Monte Carlo draws (sign flips or orders)
SEED = 0  # the resampling's own seed: tables are the same on every rerun
MIN_N = 3  # fewer seeds: no interval
NO_INTERVAL = f"n < {MIN_N}: no interval"


def _finite(values: Sequence[Any]) -> list[float]:
    return [float(v) for v in values if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)]


def _rng():
    import numpy as np

    return np.random.default_rng(SEED)


# -- one row -----------------------------------------------------------------------------------

def median_interval(values: Sequence[float]) -> tuple[float, float, float] | None:
    """(lo, hi, coverage): the order-statistic interval of the median (see the module's note)."""
    from scipy import stats

    x = sorted(_finite(values))
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
    vals = _finite(values)
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

def signflip(diffs: Sequence[float]) -> dict[str, Any]:
    """Two-sided sign-flip permutation p of the mean paired difference: the share of sign patterns
    whose |sum| is at least the observed |sum|. `exact` over all 2^n patterns up to EXACT_FLIPS
    seeds; otherwise RESAMPLES seeded draws, with the observed pattern counted once, and `p_se`."""
    import numpy as np

    d = np.asarray(_finite(diffs))
    n = len(d)
    if n == 0:
        return {"p": None, "exact": True, "p_se": 0.0}
    observed = abs(d.sum()) * (1 - 1e-12)  # float sums of equal magnitude count as ties
    if n <= EXACT_FLIPS:
        signs = 1 - 2 * ((np.arange(2 ** n)[:, None] >> np.arange(n)) & 1)
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


def t_interval(diffs: Sequence[float]) -> list[float] | None:
    """The LEVEL t-interval of the mean difference (Student, n - 1 degrees of freedom)."""
    from scipy import stats

    d = _finite(diffs)
    if len(d) < 2:
        return None
    half = stats.t.ppf(0.5 + LEVEL / 2, len(d) - 1) * statistics.stdev(d) / math.sqrt(len(d))
    m = statistics.fmean(d)
    return [float(m - half), float(m + half)]


MAX_SEEDS = 10 ** 6  # seeds needed past this: reported as this (the gap is noise for any budget)


def _t_test_n(gap: float, sd: float, alpha: float = ALPHA) -> int:
    """Seeds for a paired two-sided t-test at `alpha` to have POWER against a true mean gap `gap`
    (power rises with n: doubled until it is reached, then bisected)."""
    from scipy import stats

    effect = abs(gap) / sd

    def power(n: int) -> float:
        t_crit = stats.t.ppf(1 - alpha / 2, n - 1)
        nc = effect * math.sqrt(n)
        # The far tail (a significant gap of the wrong sign) is tiny, and scipy's nct.cdf returns NaN
        # for some of its values (effect 1.86 at alpha 0.05/55: n = 12-15), which read as "power
        # not reached" and sent the count up past the next sd's; counted as 0 where it is NaN.
        far = stats.nct.cdf(-t_crit, n - 1, nc)
        return stats.nct.sf(t_crit, n - 1, nc) + (0.0 if math.isnan(far) else far)

    lo, hi = 1, 2  # power(lo) < POWER <= power(hi), once hi is found
    while power(hi) < POWER:
        if hi >= MAX_SEEDS:
            return MAX_SEEDS
        lo, hi = hi, min(2 * hi, MAX_SEEDS)
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (lo, mid) if power(mid) >= POWER else (mid, hi)
    return hi


def seeds_needed(diffs: Sequence[float], family: int = 1) -> dict[str, Any] | None:
    """Seeds at which the observed mean gap would be resolved with POWER (see the module's note):
    `estimate` from the measured sd, `range` over its central SD_RANGE interval; None without a gap
    or a spread. Among `family` pairs the level is ALPHA / family, Holm's strictest step, so the
    figure is enough wherever the pair falls in Holm's order."""
    from scipy import stats

    d = _finite(diffs)
    if len(d) < 2:
        return None
    gap, sd = statistics.fmean(d), statistics.stdev(d)
    if gap == 0 or sd == 0:
        return None
    df = len(d) - 1
    tail = (1 - SD_RANGE) / 2
    sd_lo = sd * math.sqrt(df / stats.chi2.ppf(1 - tail, df))
    sd_hi = sd * math.sqrt(df / stats.chi2.ppf(tail, df))
    floor, alpha = seeds_to_resolve(family), ALPHA / max(family, 1)
    return {"estimate": max(floor, _t_test_n(gap, sd, alpha)),
            "range": [max(floor, _t_test_n(gap, sd_lo, alpha)), max(floor, _t_test_n(gap, sd_hi, alpha))]}


def paired(a: Mapping[Any, float | None], b: Mapping[Any, float | None], family: int = 1) -> dict[str, Any]:
    """b - a over the seeds both rows have (per-seed values keyed by seed): mean, median and sd of
    the differences, n, the t-interval of the mean, the sign-flip p, `can_resolve` (whether its n
    can reach Holm's first step among `family` pairs at all) and seeds_needed (for that family).
    `p_holm` and `resolved` come from `holm` over the pairs of a study (`adjust`); alone, a pair is
    its own family."""
    seeds = sorted(s for s in a if s in b and len(_finite([a[s], b[s]])) == 2)
    diffs = [float(b[s]) - float(a[s]) for s in seeds]
    n = len(diffs)
    test = signflip(diffs)
    out: dict[str, Any] = {"seeds": seeds, "n": n, "mean": statistics.fmean(diffs) if diffs else None,
                           "median": statistics.median(diffs) if diffs else None,
                           "sd": statistics.stdev(diffs) if n >= 2 else None, "t_interval": t_interval(diffs),
                           "p": test["p"], "p_exact": test["exact"], "p_se": test["p_se"],
                           "can_resolve": smallest_p(n) <= ALPHA / max(family, 1),
                           "seeds_needed": seeds_needed(diffs, family)}
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


def resolvable_gap(n: int, sd: float | None, m: int) -> float | None:
    """The smallest mean gap that n seeds with this sd of differences would resolve at ALPHA after
    Holm over m pairs (its strictest step, ALPHA / m), by the t approximation; None where n seeds
    cannot resolve anything at that level or no spread is known."""
    from scipy import stats

    if sd is None or n < 2 or smallest_p(n) > ALPHA / max(m, 1):
        return None
    return float(stats.t.ppf(1 - ALPHA / max(m, 1) / 2, n - 1) * sd / math.sqrt(n))


def power_line(pairs: Sequence[Mapping[str, Any]], family: int | None = None) -> str:
    """The sentence under a table: what its n and spread could resolve at 5% after Holm over
    `family` pairs (default: these; a reading of one group's pairs passes the whole study's count,
    since Holm ran over all of them)."""
    if not pairs:
        return ""
    m, n = family or len(pairs), min(p["n"] for p in pairs)
    sds = [p["sd"] for p in pairs if p.get("sd")]
    if smallest_p(n) > ALPHA / m:
        need = next(k for k in itertools.count(1) if smallest_p(k) <= ALPHA / m)
        return (f"{n} seeds cannot resolve a pair at 5% after Holm over {m} pairs; {need} whose differences "
                f"all agree in sign can")
    gap = resolvable_gap(n, statistics.median(sds) if sds else None, m)
    return ("" if gap is None else
            f"with {n} seeds and the pairs' median sd, the smallest gap resolvable at 5% after Holm over {m} "
            f"pairs is about {gap:.2g} (t approximation)")


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


def compare(rows: Sequence[Mapping[str, Any]], group: Callable[[str], str] | None = None) -> dict[str, Any]:
    """A study against the paper's order. `rows`: dicts with `index`, `row` (label), `paper`,
    `median`, `fail` and `values` (seed -> test error, None where a run gave none). Pairs are the rows
    with numeric, different paper figures (within one `group` of labels where given, as He 2016b
    Table 2 compares the orderings of one net at a time), leaving out pairs that both fail here (two
    nets at chance have no order) and rows with no completed seed; each pair's difference is
    worse-in-the-paper minus better-in-the-paper, paired by seed, so a positive difference is the
    paper's order. Holm's adjustment runs over all the study's pairs."""
    numeric = [r for r in rows if isinstance(r.get("paper"), (int, float)) and not isinstance(r.get("paper"), bool)]
    groups: dict[str, list[Mapping[str, Any]]] = {}
    for r in numeric:
        groups.setdefault(group(r["row"]) if group else "", []).append(r)

    def failed(r: Mapping[str, Any]) -> bool:
        return bool(r.get("fail")) or r.get("median") is None

    def measured(r: Mapping[str, Any]) -> bool:
        return bool(_finite(list(r["values"].values())))

    matched = []
    for name, members in groups.items():
        for k, a in enumerate(members):
            for b in members[k + 1:]:
                # A row with no value (no finished seed; diverged ones count at chance error where their
                # dataset is known) has nothing to pair.
                if a["paper"] == b["paper"] or (failed(a) and failed(b)) or not (measured(a) and measured(b)):
                    continue
                matched.append((name, *((a, b) if a["paper"] < b["paper"] else (b, a))))
    pairs = [{"group": name or None, "better": better["index"], "worse": worse["index"],
              **paired(better["values"], worse["values"], len(matched))} for name, better, worse in matched]
    for p in adjust(pairs):
        p["verdict"] = ("in order" if p["resolved"] and p["mean"] > 0 else
                        "reversed" if p["resolved"] and p["mean"] < 0 else "unresolved")
    ranked = [r for r in numeric if r.get("median") is not None]
    taus = kendall([r["median"] for r in ranked], [r["paper"] for r in ranked])
    return {**taus, "pairs_in_order_resolved": sum(p["verdict"] == "in order" for p in pairs),
            "pairs_unresolved": sum(p["verdict"] == "unresolved" for p in pairs),
            "pairs_reversed_resolved": sum(p["verdict"] == "reversed" for p in pairs),
            "power": power_line(pairs), "pairs": pairs}


def interval_str(interval: Sequence[float] | None, coverage: float | None = None, digits: int = 2) -> str:
    """[lo, hi] (with its coverage where given), or the reason there is none."""
    if interval is None:
        return NO_INTERVAL
    text = f"[{interval[0]:.{digits}f}, {interval[1]:.{digits}f}]"
    return f"{text} {coverage_label(coverage)}" if coverage is not None else text
