"""results/evidence.py at its edges, against hand counts: an empty row and a row of one, two or three
seeds, the exact signed-rank distribution behind the shift's interval, a paired comparison's every
field at one and two seeds, Kendall's tau below three rows, and the Monte Carlo branches drawing the
same numbers on every call (their own seed). Part of evidence.py's own tests for `make mutation`."""

from __future__ import annotations

import statistics

import pytest

from resnet_cli.results import evidence


def test_an_empty_row_has_every_field_and_no_value():
    assert evidence.describe([]) == {"median": None, "mean": None, "std": None, "n": 0, "interval": None,
                                     "coverage": None, "interval_reason": "n < 3: no interval"}
    assert evidence.describe([None, float("nan"), True]) == evidence.describe([])


def test_one_and_two_seeds_have_a_median_and_a_mean_but_no_interval():
    assert evidence.describe([4.0]) == {"median": 4.0, "mean": 4.0, "std": None, "n": 1, "interval": None,
                                        "coverage": None, "interval_reason": "n < 3: no interval"}
    two = evidence.describe([1.0, 4.0])
    assert (two["median"], two["mean"], two["n"], two["interval"]) == (2.5, 2.5, 2, None)
    assert two["std"] == pytest.approx(2.1213203435596424)  # sqrt(4.5): (1.5^2 + 1.5^2) / (2 - 1)


@pytest.mark.parametrize("n, counts", [
    # Subsets of the ranks {1..n} by their sum W+, counted by hand (2^n subsets in all).
    (1, [1, 1]),
    (2, [1, 1, 1, 1]),  # {} {1} {2} {1,2}
    (3, [1, 1, 1, 2, 1, 1, 1]),  # 3 = {3} = {1,2}
    (4, [1, 1, 1, 2, 2, 2, 2, 2, 1, 1, 1]),  # 3: {3},{1,2}; 4: {4},{1,3}; 5: {1,4},{2,3}; 6: {2,4},{1,2,3}; 7: {3,4},{1,2,4}
])
def test_the_signed_rank_distribution_is_the_hand_count_of_rank_subsets(n, counts):
    cdf = evidence._signed_rank_cdf(n)
    assert len(cdf) == n * (n + 1) // 2 + 1
    running = [sum(counts[:w + 1]) / 2 ** n for w in range(len(counts))]
    assert cdf == pytest.approx(running, abs=0) and cdf[-1] == 1.0


def test_a_pair_of_one_seed_has_its_difference_and_no_spread():
    got = evidence.paired({0: 2.0}, {0: 5.0})
    assert (got["seeds"], got["n"], got["diffs"], got["mean"], got["median"], got["sd"]) == ([0], 1, [3.0], 3.0, 3.0,
                                                                                           None)
    assert (got["p"], got["p_exact"], got["p_se"]) == (1.0, True, 0.0)  # both sign patterns as large
    assert got["can_resolve"] is False and got["resolved"] is False


def test_a_pair_of_two_seeds_has_an_sd_and_an_exact_p():
    got = evidence.paired({0: 2.0, 1: 1.0}, {0: 5.0, 1: 2.0})  # differences 3 and 1
    assert (got["n"], got["mean"], got["median"]) == (2, 2.0, 2.0)
    assert got["sd"] == pytest.approx(statistics.stdev([3.0, 1.0]))  # sqrt(2)
    assert (got["p"], got["p_exact"], got["p_se"]) == (0.5, True, 0.0)  # |+-3 +-1| >= 4: 2 of 4 patterns


def test_a_pair_with_no_common_seed_has_no_difference():
    got = evidence.paired({0: 1.0}, {1: 2.0})
    assert (got["n"], got["mean"], got["median"], got["sd"], got["p"], got["p_holm"]) == (0, None, None, None, None,
                                                                                          None)


def test_kendall_below_three_rows_says_why_and_gives_no_p():
    assert evidence.kendall([1.0, 2.0], [5.0, 6.0]) == {
        "kendall_tau": None, "p_value": None, "rows": 2,
        "reason": "2 rows with a paper figure and a median: no order to test"}


def test_the_monte_carlo_tests_draw_the_same_numbers_on_every_call():
    """Above 16 seeds and 8 rows the p values are Monte Carlo; their own seed makes a table the
    same on every rerun (an unseeded draw moves p by about its standard error)."""
    diffs = [0.3, -0.2, 0.5, -0.1, 0.4, 0.2, -0.3, 0.1, 0.25, -0.05, 0.15, -0.35, 0.45, 0.05, -0.15, 0.2, 0.1, -0.4]
    a, b = evidence.signflip(diffs), evidence.signflip(diffs)
    assert a["exact"] is False and a == b
    ours, paper = [3.0, 1.0, 2.0, 5.0, 4.0, 7.0, 6.0, 9.0, 8.0], list(range(9))
    assert evidence.kendall(ours, paper) == evidence.kendall(ours, paper) and not evidence.kendall(ours, paper)["p_exact"]


def test_the_shift_of_no_seeds_and_of_two_has_no_interval():
    assert evidence.shift_interval([]) == {"shift": None, "interval": None, "coverage": None}
    # Walsh averages of 3 and 1: 1, 2, 3; their median 2.
    assert evidence.shift_interval([3.0, 1.0]) == {"shift": 2.0, "interval": None, "coverage": None}


def _walsh(d):
    return sorted((d[i] + d[j]) / 2 for i in range(len(d)) for j in range(i, len(d)))


@pytest.mark.parametrize("diffs, k, below", [
    # n = 7: 3 rank subsets sum to 2 or less ({}, {1}, {2}): k = 3 holds 1 - 2 * 3/128 = 95.3%, k = 4 not
    # (5 subsets to 3). n = 10: 25 subsets sum to 8 or less (1+1+1+2+2+3+4+5+6 for sums 0..8): k = 9,
    # 1 - 2 * 25/1024 = 95.1% (Hollander and Wolfe's table: P(T+ >= 47) = .024 at n = 10).
    ([0.5, 1.2, -0.3, 2.0, 0.8, 1.5, -0.1], 3, 3 / 128),
    ([0.5, 1.2, -0.3, 2.0, 0.8, 1.5, -0.1, 0.9, 1.1, 0.4], 9, 25 / 1024),
])
def test_the_shifts_interval_is_the_walsh_averages_at_the_tables_rank(diffs, k, below):
    got, walsh = evidence.shift_interval(diffs), _walsh(diffs)
    assert got["interval"] == [walsh[k - 1], walsh[len(walsh) - k]]
    assert got["coverage"] == pytest.approx(1 - 2 * below)
    assert got["shift"] == statistics.median(walsh)


def test_the_shifts_interval_at_fifty_seeds_against_a_polynomial_count():
    """At n = 50 the interval's rank is past a third of the 1,275 Walsh averages; the signed-rank
    counts here come from multiplying out prod (1 + x^r), r = 1..50, not from evidence.py's table."""
    import numpy as np

    n = 50
    poly = np.array([1], dtype=object)
    for r in range(1, n + 1):
        term = np.zeros(r + 1, dtype=object)
        term[0] = term[r] = 1
        poly = np.convolve(poly, term)
    cdf = np.cumsum(poly) / 2 ** n
    k = max(k for k in range(1, 1276 // 2 + 1) if 1 - 2 * cdf[k - 1] >= 0.95)
    diffs = [((7 * i) % 23) / 4 - 2.0 for i in range(n)]
    got, walsh = evidence.shift_interval(diffs), _walsh(diffs)
    assert k > 1275 // 3 and got["interval"] == [walsh[k - 1], walsh[1275 - k]]
    assert got["coverage"] == pytest.approx(float(1 - 2 * cdf[k - 1]))


def test_kendall_with_every_value_tied_has_no_order():
    assert evidence.kendall([2.0, 2.0, 2.0], [1.0, 2.0, 3.0]) == {
        "kendall_tau": None, "p_value": None, "rows": 3, "reason": "all values tied: no order"}


def test_kendall_at_eight_rows_counts_every_order_and_above_draws_them():
    """8 rows in the paper's order: exactly 1 of the 8! = 40,320 orders is as concordant. 9 rows: the
    20,000 seeded draws (almost surely) miss the one order, so p is (0 + 1) / (20,000 + 1)."""
    eight = evidence.kendall(list(range(8)), list(range(8)))
    assert eight["p_exact"] is True and eight["p_value"] == 1 / 40320
    nine = evidence.kendall(list(range(9)), list(range(9)))
    assert nine["p_exact"] is False and nine["p_value"] == 1 / 20001


def test_kendall_with_ties_on_both_sides_against_every_order_by_scipy():
    """Ties in our medians and in the paper's figures: the exact p is the share of the 720 orders of
    ours whose tau-b (scipy's) is at least the observed one."""
    import itertools

    from scipy import stats

    # (The order of ours is one whose S = 9 has orders at S = 8: a pair tied on one side only counts 0.)
    ours, paper = [1.0, 1.0, 3.0, 2.0, 3.0, 4.0], [1.0, 2.0, 2.0, 3.0, 4.0, 4.0]
    observed = stats.kendalltau(ours, paper).statistic
    orders = list(itertools.permutations(ours))
    hits = sum(stats.kendalltau(o, paper).statistic >= observed - 1e-12 for o in orders)
    got = evidence.kendall(ours, paper)
    assert got["kendall_tau"] == pytest.approx(observed) and got["p_value"] == pytest.approx(hits / len(orders))


def test_the_medians_interval_at_forty_seeds_against_binomial_counts():
    """At n = 40 the median's interval is [x_(k), x_(41-k)] for the largest k with
    1 - 2 P(Bin(40, 1/2) <= k - 1) >= 95%, counted here with math.comb: k = 14 (96.2%), past a third."""
    import math

    def cdf(k):
        return sum(math.comb(40, i) for i in range(k + 1)) / 2 ** 40

    k = max(k for k in range(1, 21) if 1 - 2 * cdf(k - 1) >= 0.95)
    values = [((11 * i) % 37) * 0.5 for i in range(40)]
    lo, hi, coverage = evidence.median_interval(values)
    x = sorted(values)
    assert k == 14 and (lo, hi) == (x[k - 1], x[40 - k]) and coverage == pytest.approx(1 - 2 * cdf(k - 1))


def test_one_pair_alone_needs_six_seeds_to_be_resolvable():
    """Six seeds of one sign give p = 2/64 <= 0.05; five give 2/32."""
    assert evidence.seeds_to_resolve() == 6 and evidence.seeds_to_resolve(1) == 6
    assert evidence.seeds_to_resolve(11) == 9  # 2/512 <= 0.05/11; 2/256 is not


def test_the_sign_flip_of_no_seeds_and_of_sixteen():
    """No differences: no p. Sixteen of one sign: the exact count, 2 of the 65,536 patterns."""
    assert evidence.signflip([]) == {"p": None, "exact": True, "p_se": 0.0}
    assert evidence.signflip([0.5] * 16) == {"p": 2 / 65536, "exact": True, "p_se": 0.0}


def test_differences_that_cancel_give_p_one_exact_and_drawn():
    """A mean difference of 0: every sign pattern's sum is at least as far from 0 (p = 1, not the
    share of patterns strictly farther, 1/2 for +1 and -1)."""
    assert evidence.signflip([1.0, -1.0])["p"] == 1.0
    drawn = evidence.signflip([1.0, -1.0] * 9)  # 18 seeds: Monte Carlo
    assert drawn["exact"] is False and drawn["p"] == 1.0


def test_a_drawn_p_counts_the_observed_pattern_once():
    """20 seeds of one sign: among 20,000 draws the two patterns as extreme (all + or all -, 2 in
    2^20) almost surely never come up, so p = (0 + 1) / (20,000 + 1) and its standard error is
    sqrt(p (1 - p) / 20,000)."""
    got = evidence.signflip([0.25] * 20)
    p = 1 / 20001
    assert got == {"p": p, "exact": False, "p_se": pytest.approx((p * (1 - p) / 20000) ** 0.5)}


def test_a_pair_whose_every_seed_differs_by_one_point_is_resolved():
    got = evidence.paired({s: 1.0 for s in range(8)}, {s: 2.0 for s in range(8)})
    assert (got["mean"], got["p"], got["p_holm"], got["resolved"]) == (1.0, 2 / 256, 2 / 256, True)
