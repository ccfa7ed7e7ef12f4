"""Power of the test a study actually uses: the exact sign-flip test of paired differences, each
claim decided after Holm over the study's declared family of m claims.

The question "how many seeds?" is answered for that test, not for a t-test standing in for it:

- A claim's true paired differences are normal with mean `gap` and sd `sd`; its standardized gap is
  gap / sd. A claim is counted resolved when its exact two-sided sign-flip p is at most 5% / m and its
  mean difference lies the claimed way. 5% / m is Holm's first (strictest) step, so the figure holds
  wherever the claim falls in Holm's order (with other true claims in the family, Holm only helps):
  the power printed is a floor, not a promise of more.
- Up to evidence.EXACT_FLIPS seeds, by enumeration: for each of DRAWS simulated studies (a seeded
  standard normal z per seed), the smallest standardized gap at which δ + z is resolved is found
  exactly from all 2^n - 1 sign-flip subsets (see `_exact_thresholds`); the power at gap δ is the
  share of studies whose threshold lies below δ, so one set of draws answers every gap.
- Above that many seeds the tool's own test is a seeded Monte Carlo over 20,000 sign patterns; there
  the permutation distribution's normal limit (the sum of the differences over the root of their
  sum of squares, against a standard normal: Hoeffding 1952) stands in for enumeration.
- Seeds needed: the smallest n (from the fewest whose test can reach 5% / m at all) whose power is
  at least 80%, scanning n one at a time, since an exact test's power is not smooth in n; "more than
  MAX_N" past that.

A study's `effect` is in sd of one row's seeds (2 by default); two rows with independent noise of that
sd differ by sd x sqrt(2), so the paired differences' standardized gap is effect / sqrt(2). Pairing by
seed can only narrow the differences, so this too errs towards more seeds.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from functools import lru_cache
from typing import Any

from . import evidence

POWER = 0.80  # what "seeds needed" aims at
DRAWS = 10000  # simulated studies per (n, level): power's simulation error at 80% is 0.4 points (1,000 gave 1.3, enough to put m = 2 on the wrong side of 80% at 8 seeds)
SEED = 20160316  # the simulation's own seed (the papers' arXiv month): every figure repeats exactly
MAX_N = 200  # seeds needed past this: "more than 200"
DEFAULT_EFFECT = 2.0  # a study's `effect` when it declares none: 2 sd of one row's seeds
SD_RANGE = 0.80  # the central interval of the sd's own uncertainty that spans seeds needed's range


def _draws(n: int):
    import numpy as np

    return np.random.default_rng([SEED, n]).standard_normal((DRAWS, n))


def _exact_thresholds(n: int, level: float):
    """Per simulated study, the smallest standardized gap δ at which differences δ + z are resolved
    at `level` the claimed way (infinite where n seeds cannot reach it).

    With T = sum(d) > 0, a sign pattern flipping the set F gives sum T - 2 sum_F(d), so the two-sided
    p is 2 N / 2^n with N the number of subsets F (the empty one included) with sum_F(d) <= 0; p <=
    level iff N <= K = floor(level 2^(n-1)). For d = δ + z and F non-empty, sum_F(d) <= 0 iff δ <=
    v_F = -mean_F(z); so N <= K iff δ exceeds the K-th largest v_F. T > 0 asks δ > v_all."""
    import numpy as np

    k = math.floor(level * 2 ** (n - 1) * (1 + 1e-12))
    if k < 1:
        return np.full(DRAWS, np.inf)
    z = _draws(n)
    # float32, subsets along the rows' contiguous axis: 3x faster than float64 columns, and a
    # threshold's rounding (1e-7 relative) is far below the simulation's own error.
    masks = ((np.arange(1, 2 ** n)[:, None] >> np.arange(n)) & 1).astype(np.float32)  # every non-empty F
    sizes = masks.sum(axis=1)
    last = len(masks) - k  # the K-th largest's place in ascending order
    out = np.empty(DRAWS)
    chunk = max(1, 2 ** 22 // len(masks))
    for start in range(0, DRAWS, chunk):
        v = -(z[start:start + chunk].astype(np.float32) @ masks.T) / sizes  # (draws, subsets): v_F
        out[start:start + chunk] = np.partition(v, last, axis=1)[:, last]
    return np.maximum(out, -z.mean(axis=1))


def _normal_thresholds(n: int, level: float):
    """As `_exact_thresholds`, by the permutation distribution's normal limit: resolved iff
    sum(d) / sqrt(sum(d^2)) >= c, c the standard normal's 1 - level/2 quantile. That ratio is
    sqrt(n) times the cosine between d and (1, ..., 1), which rises with δ; the threshold is the
    larger root of n(n - c^2) δ^2 + 2 S (n - c^2) δ + S^2 - c^2 Q = 0 (S, Q: sum and sum of squares of z)."""
    import numpy as np
    from scipy import stats

    c = float(stats.norm.isf(level / 2))
    if c * c >= n:  # the ratio never exceeds sqrt(n)
        return np.full(DRAWS, np.inf)
    z = _draws(n)
    s, q = z.sum(axis=1), (z * z).sum(axis=1)
    a, b, cc = n * (n - c * c), 2 * s * (n - c * c), s * s - c * c * q
    return (-b + np.sqrt(np.maximum(b * b - 4 * a * cc, 0.0))) / (2 * a)


@lru_cache(maxsize=None)
def _thresholds(n: int, level: float):
    import numpy as np

    got = _exact_thresholds(n, level) if n <= evidence.EXACT_FLIPS else _normal_thresholds(n, level)
    return np.sort(got)


def power(n: int, gap: float, family: int = 1) -> float:
    """The chance that a claim whose paired differences have standardized mean `gap` (mean / sd) is
    resolved the claimed way at n seeds, at Holm's strictest step among `family` claims."""
    import numpy as np

    if n < 1 or evidence.smallest_p(n) > evidence.ALPHA / max(family, 1):
        return 0.0
    return float(np.searchsorted(_thresholds(n, evidence.ALPHA / max(family, 1)), gap, side="left") / DRAWS)


def seeds_for(gap: float, family: int = 1) -> int | None:
    """The fewest seeds with POWER against standardized gap `gap` (None: more than MAX_N)."""
    if not gap > 0:
        return None
    for n in range(evidence.seeds_to_resolve(family), MAX_N + 1):
        if power(n, gap, family) >= POWER:
            return n
    return None


def gap_at(n: int, family: int = 1) -> float | None:
    """The standardized gap n seeds resolve with POWER among `family` claims (None: none they can)."""
    import numpy as np

    if n < 1 or evidence.smallest_p(n) > evidence.ALPHA / max(family, 1):
        return None
    t = _thresholds(n, evidence.ALPHA / max(family, 1))
    gap = float(t[min(DRAWS - 1, math.ceil(POWER * DRAWS) - 1)])
    return gap if np.isfinite(gap) else None


def seeds_needed(diffs: Sequence[float], family: int = 1) -> dict[str, Any] | None:
    """Seeds at which a claim with these measured differences would be resolved with POWER: `estimate`
    from their mean and sd, `range` over the central SD_RANGE interval of the sd (chi-square, n - 1
    degrees of freedom: an sd from 3 seeds is itself uncertain by a factor of about 3). A figure of
    None is "more than MAX_N"; the result is None without a gap the claimed way or a spread. The
    gap is the observed one: a plan, not a promise."""
    from scipy import stats

    d = evidence.finite_values(diffs)
    if len(d) < 2:
        return None
    gap, sd = statistics.fmean(d), statistics.stdev(d)
    if gap <= 0 or sd == 0:
        return None
    df = len(d) - 1
    tail = (1 - SD_RANGE) / 2
    sd_lo = sd * math.sqrt(df / stats.chi2.ppf(1 - tail, df))
    sd_hi = sd * math.sqrt(df / stats.chi2.ppf(tail, df))
    return {"estimate": seeds_for(gap / sd, family),
            "range": [seeds_for(gap / sd_lo, family), seeds_for(gap / sd_hi, family)],
            "more_than": MAX_N}


def count_str(n: int | None) -> str:
    return f"more than {MAX_N}" if n is None else str(n)


def plan_line(n: int, family: int, effect: float = DEFAULT_EFFECT, what: str = "claims") -> str:
    """One line, before any run starts: can n seeds resolve a family of this size at all, which n
    could, and which n resolves the study's declared `effect` (in sd of one row's seeds) with POWER."""
    m = max(family, 1)
    floor = evidence.seeds_to_resolve(m)
    sized = seeds_for(effect / math.sqrt(2), m)
    sized_text = (f"{count_str(sized)} resolve a {effect:g}-sd gap with {POWER:.0%} power" if sized is not None
                  else f"more than {MAX_N} would be needed for a {effect:g}-sd gap")
    things = f"{m} {what if m != 1 else what.replace('claims', 'claim').replace('pairs', 'pair')}"
    if n < floor:
        return (f"{n} seeds cannot resolve any of {things} at 5% after Holm: the smallest exact p at n = {n} "
                f"is {evidence.smallest_p(n):.3g}; {floor} seeds whose differences all agree can; {sized_text}")
    got = power(n, effect / math.sqrt(2), m)
    line = (f"{n} seeds can resolve {things} at 5% after Holm: a {effect:g}-sd gap is resolved with "
            f"{got:.0%} power at this n (exact sign-flip test, {DRAWS} simulated studies)")
    # At the sized n the second half would repeat the first; past it, say how few would have done.
    if sized == n:
        return line + ", the n sized for it"
    if sized is not None and sized < n:
        return line + f"; {sized} would give {POWER:.0%}"
    return f"{line}; {sized_text}"
