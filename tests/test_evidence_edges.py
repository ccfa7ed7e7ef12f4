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
