"""results/power.py value by value, against the test whose power it claims to give: evidence.signflip
(the exact sign-flip p the tables print) on the module's own seeded studies, closed forms where a
family is so large that only seeds that all agree can resolve (then the test resolves exactly when
every difference is positive), and the normal limit's defining ratio above 16 seeds. The statistical
checks (simulated studies through Holm, the t formula it replaced) are tests/test_claims.py's."""

import math

import numpy as np
import pytest
from scipy import stats

from resnet_cli.results import evidence, power


@pytest.fixture(autouse=True)
def _a_thousand_studies(monkeypatch):
    """These checks replay every simulated study through the exact test by hand: at 1,000 studies a
    check takes seconds (the module's own 10,000 are the same seeded stream, longer). The threshold
    cache is emptied on each side, so no other test sees the shorter stream."""
    monkeypatch.setattr(power, "DRAWS", 1000)
    power._thresholds.cache_clear()
    yield
    power._thresholds.cache_clear()


def draws(n: int) -> np.ndarray:
    """The simulated studies as the module documents them: 1,000 standard normal rows of n, seeded by
    (20160316, n), so that every figure repeats exactly."""
    return np.random.default_rng([20160316, n]).standard_normal((1000, n))


def resolved(d: np.ndarray, level: float) -> bool:
    """What a table does with one claim's differences at Holm's strictest step."""
    return evidence.signflip(d.tolist())["p"] <= level and d.mean() > 0


def ratio(d: np.ndarray) -> np.ndarray:
    """The permutation distribution's normal statistic: sum over the root of the sum of squares."""
    return d.sum(axis=-1) / np.sqrt((d * d).sum(axis=-1))


def test_the_simulated_studies_are_the_documented_seeded_normals():
    assert np.array_equal(power._draws(7), draws(7)) and np.array_equal(power._draws(12), draws(12))


@pytest.mark.parametrize("n, family", [(6, 1), (8, 3), (10, 10)])
def test_power_is_the_share_of_the_seeded_studies_the_exact_test_resolves(n, family):
    z = draws(n)
    for gap in (0.3, 0.8, 1.4):
        share = sum(resolved(gap + row, 0.05 / family) for row in z) / 1000
        assert power.power(n, gap, family) == share, (n, family, gap)


@pytest.mark.parametrize("n, level", [(6, 0.05), (9, 0.05 / 4), (12, 0.05 / 10)])
def test_each_studys_threshold_is_where_the_exact_test_starts_to_resolve_it(n, level):
    t, z = power._exact_thresholds(n, level), draws(n)
    for i in range(0, 1000, 37):
        step = 1e-4 * max(1.0, abs(t[i]))
        assert resolved(t[i] + step + z[i], level) and not resolved(t[i] - step + z[i], level), (n, i, t[i])


def test_where_only_agreeing_seeds_resolve_the_threshold_is_minus_the_smallest_draw():
    """At level 2/2^n exactly (n = 5: 0.0625) only the pattern with every difference positive reaches
    it, so δ + z is resolved iff δ > -min(z)."""
    for n in (5, 14):  # 14: the 1,000 studies take several chunks of the subsets' products
        got = power._exact_thresholds(n, 2 / 2 ** n)
        assert np.allclose(got, -draws(n).min(axis=1), rtol=1e-6, atol=1e-6), n
    assert np.isinf(power._exact_thresholds(5, 0.06)).all()  # just below it: no pattern reaches it


def test_sixteen_seeds_are_enumerated_and_seventeen_take_the_normal_limit():
    """A family of 1,000 asks 5e-5 of Holm's first step: at 16 seeds (smallest p 3.1e-5) only seeds
    that all agree reach it, so power is the share of studies whose smallest draw exceeds -gap and the
    gap resolved with 80% power is the 800th smallest -min(z). At 17 the normal limit decides."""
    z16, z17 = draws(16), draws(17)
    for gap in (2.0, 2.5):
        assert power.power(16, gap, 1000) == np.mean(gap > -z16.min(axis=1)), gap
    assert power.gap_at(16, 1000) == pytest.approx(np.sort(-z16.min(axis=1))[799], rel=1e-6)
    c = stats.norm.ppf(1 - 0.05 / 1000 / 2)
    assert power.power(17, 2.0, 1000) == np.mean(ratio(2.0 + z17) >= c)
    assert power.power(17, 2.0, 1000) != np.mean(2.0 > -z17.min(axis=1))  # not the enumeration's


def test_above_sixteen_seeds_the_threshold_is_where_the_normal_ratio_reaches_its_critical_value():
    n, level = 20, 0.05 / 3
    c = stats.norm.ppf(1 - level / 2)
    t, z = power._normal_thresholds(n, level), draws(n)
    assert np.allclose(ratio(t[:, None] + z), c, rtol=1e-9)  # the larger root: +c, not -c
    assert (ratio(t[:, None] + 1e-6 + z) > c).all() and (ratio(t[:, None] - 1e-6 + z) < c).all()
    for gap in (0.4, 0.9):
        assert power.power(n, gap, 3) == np.mean(ratio(gap + z) >= c)
    # c^2 >= n: the ratio (at most sqrt(n)) never gets there. n = 17 with 2,000 claims: c^2 = 17.7,
    # though 17 seeds that all agree reach that level exactly.
    assert stats.norm.isf(0.05 / 2000 / 2) ** 2 > 17 == evidence.seeds_to_resolve(2000)
    assert np.isinf(power._normal_thresholds(17, 0.05 / 2000)).all()
    assert power.power(17, 100.0, 2000) == 0.0 and power.gap_at(17, 2000) is None
    assert np.isfinite(power._normal_thresholds(17, 0.05 / 1000)).all()  # c^2 = 16.4


def test_too_few_seeds_have_no_power_and_no_gap():
    assert power.power(5, 50.0) == 0.0 and power.power(6, 50.0) == 1.0  # 2/2^5 > 5% >= 2/2^6
    assert power.power(0, 50.0) == 0.0 and power.gap_at(0) is None and power.gap_at(5) is None
    assert power.gap_at(6) is not None and power.seeds_for(10.0) == 6  # one claim: 6 seeds can
    assert power.power(6, 50.0, 0) == 1.0  # a family of none is a family of one


def test_the_gap_at_n_is_the_smallest_with_80_percent_power():
    for n, family in ((8, 1), (12, 10), (20, 3)):
        gap = power.gap_at(n, family)
        assert power.power(n, gap - 1e-9, family) == 0.799 and power.power(n, gap + 1e-9, family) == 0.8, (n, family)


def test_seeds_for_is_the_first_n_from_the_familys_floor_with_80_percent_power():
    # the last: the gap 199 seeds resolve with 80% power, which no fewer do (the scan's last steps)
    for gap, family in ((1.0, 1), (1.5, 10), (2.0, 18), (power.gap_at(199) + 1e-9, 1)):
        floor = evidence.seeds_to_resolve(family)
        want = next(n for n in range(floor, 201) if power.power(n, gap, family) >= 0.8)
        assert power.seeds_for(gap, family) == want > floor, (gap, family, want)
    # where the floor itself already has the power, the answer is the floor
    assert power.seeds_for(10.0, 10) == evidence.seeds_to_resolve(10) == 9
    assert power.seeds_for(0.0) is None and power.seeds_for(-1.0) is None and power.seeds_for(float("nan")) is None
    assert power.seeds_for(0.05) is None  # about 3,000 seeds: more than 200
    # 201 seeds would resolve this one with 80% power, and none of 6-200 does: the scan stops at 200
    near = power.gap_at(201) + 1e-9
    assert power.power(201, near) >= 0.8 > max(power.power(n, near) for n in range(6, 201))
    assert power.seeds_for(near) is None
    assert power.count_str(None) == "more than 200" and power.count_str(12) == "12"


def test_seeds_needed_scales_the_measured_gap_by_the_sds_80_percent_interval():
    diffs = [1.0, 2.0, 3.0, 4.0, float("nan")]  # the NaN (a diverged seed) is left out: n = 4
    sd = np.std([1.0, 2.0, 3.0, 4.0], ddof=1)
    lo_q, hi_q = stats.chi2.interval(0.80, 3)
    sd_lo, sd_hi = sd * math.sqrt(3 / hi_q), sd * math.sqrt(3 / lo_q)
    got = power.seeds_needed(diffs, 4)
    assert got == {"estimate": power.seeds_for(2.5 / sd, 4),
                   "range": [power.seeds_for(2.5 / sd_lo, 4), power.seeds_for(2.5 / sd_hi, 4)], "more_than": 200}
    assert got["range"][0] <= got["estimate"] < got["range"][1]
    for nothing in ([1.0], [1.0, float("nan")], [2.0, 2.0, 2.0], [-1.0, -2.0, 0.5], [1.0, -1.0]):
        assert power.seeds_needed(nothing) is None, nothing
    # two seeds are enough to plan from; a gap under one point is still a gap; one claim by default
    wide = [1.0, 2.0, 3.0, 10.0]  # mean 4, sd 4.08: standardized gap 0.98
    assert power.seeds_needed(wide)["estimate"] == power.seeds_for(4.0 / np.std(wide, ddof=1), 1) > 6
    assert power.seeds_needed([1.0, 2.0]) is not None and power.seeds_needed([0.2, 0.4, 0.9]) is not None


def test_the_plan_line_word_for_word():
    s10 = power.seeds_for(2 / math.sqrt(2), 10)
    assert power.plan_line(5, 10) == (
        "5 seeds cannot resolve any of 10 claims at 5% after Holm: the smallest exact p at n = 5 is 0.0625; "
        f"9 seeds whose differences all agree can; {s10} resolve a 2-sd gap with 80% power")
    assert power.plan_line(3, 1, 0.05, "pairs") == (
        "3 seeds cannot resolve any of 1 pair at 5% after Holm: the smallest exact p at n = 3 is 0.25; "
        "6 seeds whose differences all agree can; more than 200 would be needed for a 0.05-sd gap")
    s1 = power.seeds_for(3 / math.sqrt(2), 1)
    p9 = power.power(9, 3 / math.sqrt(2), 1)
    assert s1 < 9 and power.plan_line(9, 1, 3.0, "pairs") == (
        f"9 seeds can resolve 1 pair at 5% after Holm: a 3-sd gap is resolved with {p9:.0%} power at this n "
        f"(exact sign-flip test, 1000 simulated studies); {s1} would give 80%")
    s4 = power.seeds_for(2.5 / math.sqrt(2), 4)
    assert s4 > 8 == evidence.seeds_to_resolve(4) and power.plan_line(8, 4, 2.5) == (
        f"8 seeds can resolve 4 claims at 5% after Holm: a 2.5-sd gap is resolved with "
        f"{power.power(8, 2.5 / math.sqrt(2), 4):.0%} power at this n (exact sign-flip test, 1000 simulated "
        f"studies); {s4} resolve a 2.5-sd gap with 80% power")
    assert power.plan_line(s4, 4, 2.5).endswith(
        f"a 2.5-sd gap is resolved with {power.power(s4, 2.5 / math.sqrt(2), 4):.0%} power at this n (exact sign-flip "
        "test, 1000 simulated studies), the n sized for it")
    assert power.plan_line(8, 1, 0.05, "claims").endswith("; more than 200 would be needed for a 0.05-sd gap")
    assert power.plan_line(8, 1, 0.05, "claims").startswith("8 seeds can resolve 1 claim at 5% after Holm")
