"""resnet_cli/results/study.py on hand-made run records: every field of a row's and a study's result
against a hand count (medians, the training loss over the completed seeds only, the paper's fail rule
at its boundary), what reaches the claims' test (row labels, groups, paper figures, medians, the fail
rule), the sentence under the table, word for word, and the live table's reuse of unchanged rows.
These are study.py's own tests (`make mutation` scores the module against them)."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from resnet_cli.results import study
from resnet_cli.results.records import RowStats, SeedResult, StudyTable
from resnet_cli.sweep.family import Family, Member


def run(row: str, index: int, seed, status: str = "completed", error=None, loss=None, train_error=None,
        fail_above=None, group=None, paper=None, dataset="digits") -> SeedResult:
    return SeedResult(path=Path(f"{index:02d}-{row}-s{seed}"), study="s", title="S", preset="quick",
                      paper_metric="test error", index=index, row=row, seed=seed, paper=paper, status=status,
                      fail_above=fail_above, test_error=error, train_loss=loss, train_error=train_error,
                      dataset=dataset, group=group, chance=90.0)


def row_of(label: str, index: int, errors, paper=None, group=None, fail_above=None, offset=0.0) -> RowStats:
    runs = [run(label, index, seed, error=e + offset, loss=e / 10, train_error=e / 2, fail_above=fail_above,
                group=group, paper=paper) for seed, e in enumerate(errors)]
    return RowStats(index=index, row=label, paper=paper, runs=runs, group=group)


# -- one row -------------------------------------------------------------------------------------

def mixed_row() -> RowStats:
    """Three completed seeds, one diverged (counted at the digits' chance error, 90), one running."""
    runs = [run("r", 3, 0, error=3.0, loss=0.5, train_error=1.5), run("r", 3, 1, error=1.0, loss=0.3, train_error=0.5),
            run("r", 3, 2, error=2.0, loss=0.4, train_error=1.0),
            run("r", 3, 5, status="diverged", error=float("nan"), loss=9.0, train_error=80.0),
            run("r", 3, 7, status="running", error=None, loss=0.1, train_error=0.2)]
    return RowStats(index=3, row="r", paper=4.5, runs=runs, group="basic")


def test_a_row_counts_a_diverged_seed_at_chance_and_takes_the_training_loss_of_completed_seeds_only():
    r = study.row_result(mixed_row(), fail_above=20.0)
    assert (r.index, r.row, r.group, r.paper, r.runs) == (3, "r", "basic", 4.5, 5)
    assert r.seeds == [0, 1, 2, 5, 7]
    assert r.test_errors == [3.0, 1.0, 2.0, 90.0, None]
    assert r.run_diverged == [False, False, False, True, False]
    assert (r.n, r.median, r.errors) == (4, 2.5, [3.0, 1.0, 2.0, 90.0])  # median of 1, 2, 3, 90
    assert r.std == pytest.approx(statistics_std([3.0, 1.0, 2.0, 90.0]))
    assert (r.diverged, r.diverged_seeds) == (1, [5])
    assert (r.completed_errors, r.diverged_errors) == ([3.0, 1.0, 2.0], [90.0])
    # The running seed's 0.1 and the diverged seed's 9.0 are not training losses of the row.
    assert r.train_loss == 0.4
    assert r.status == "running" and r.fail is False
    assert r.values["error"] == {0: 3.0, 1: 1.0, 2: 2.0, 5: 90.0, 7: None}
    assert r.values["train_loss"] == {0: 0.5, 1: 0.3, 2: 0.4, 5: pytest.approx(math.log(10.0)), 7: None}
    assert r.values["train_error"] == {0: 1.5, 1: 0.5, 2: 1.0, 5: 90.0, 7: None}


def statistics_std(values: list[float]) -> float:
    mean = sum(values) / len(values)
    return math.sqrt(sum((v - mean) ** 2 for v in values) / (len(values) - 1))


def test_a_completed_seed_without_a_finite_training_loss_is_left_out_of_the_median():
    row = RowStats(index=0, row="r", paper=None, runs=[run("r", 0, 0, error=1.0, loss=0.2),
                                                       run("r", 0, 1, error=2.0, loss=float("nan")),
                                                       run("r", 0, 2, error=3.0, loss=None)])
    assert study.row_result(row, None).train_loss == 0.2
    nothing = RowStats(index=0, row="r", paper=None, runs=[run("r", 0, 0, status="running", loss=0.2)])
    assert study.row_result(nothing, None).train_loss is None


@pytest.mark.parametrize("fail_above, fail", [(2.4, True), (2.5, False), (None, None)])
def test_the_papers_fail_rule_is_the_median_strictly_above_its_threshold(fail_above, fail):
    """He 2016b's fail: test error above the threshold (median 2.5 here: 2.5 itself is not a fail)."""
    assert study.row_result(mixed_row(), fail_above).fail is fail


def test_a_row_without_a_median_has_no_fail_verdict():
    row = RowStats(index=0, row="r", paper=None, runs=[run("r", 0, 0, status="running")])
    assert study.row_result(row, 20.0).fail is None and study.row_result(row, 20.0).median is None


# -- the study -----------------------------------------------------------------------------------

SEEDS8 = [1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0]


def three_rows(fail_above=None, group_c=None) -> list[RowStats]:
    """Paper 5 < 6 < 7; ours: B is A + 10 on every seed, C is A + 20 (median 24.5)."""
    return [row_of("A", 0, SEEDS8, paper=5.0, fail_above=fail_above),
            row_of("B", 1, SEEDS8, paper=6.0, fail_above=fail_above, offset=10.0),
            row_of("C", 2, SEEDS8, paper=7.0, fail_above=fail_above, offset=20.0, group=group_c)]


def table(rows, family=None) -> StudyTable:
    return StudyTable(study="s", title="S", preset="quick", paper_metric="test error", rows=rows, budget=2,
                      family=family)


def test_a_declared_claim_reaches_the_test_with_its_rows_labels_indices_and_seeds():
    """A < B declared: every one of 8 seeds 10 points apart, so the exact sign-flip p is 2/256 (one
    family member, so Holm leaves it); A < C and B < C, with paper figures, are exploratory."""
    declared = Family(declared=True, members=(Member("A", "B", "test_error", "Table 1"),))
    res = study.compute(table(three_rows(), declared))
    c = res.comparison
    assert c["family"]["declared"] is True and c["family"]["size"] == 1
    (claim,) = c["claims"]
    assert (claim["better"], claim["worse"], claim["better_index"], claim["worse_index"]) == ("A", "B", 0, 1)
    assert claim["n"] == 8 and claim["p_holm"] == pytest.approx(2 / 256) and claim["verdict"] == "in order"
    assert (c["claims_in_order"], c["claims_unresolved"], c["claims_reversed"]) == (1, 0, 0)
    assert sorted((p["better"], p["worse"]) for p in c["exploratory"]) == [("A", "C"), ("B", "C")]
    # Kendall's tau on the medians 4.5 < 14.5 < 24.5 against 5 < 6 < 7: 1, and 1 of the 6 orders
    # of three values is at least as concordant (exact p 1/6).
    (order,) = c["orders"]
    assert (order["kendall_tau"], order["rows"], order["left_out"]) == (1.0, 3, 0)
    assert order["p_value"] == pytest.approx(1 / 6)
    assert [r.median for r in res.rows] == [4.5, 14.5, 24.5]
    assert res.reading.startswith("1 declared claim: 1 in the paper's order and resolved, 0 unresolved, 0 reversed")


def test_without_declared_claims_every_pair_with_a_paper_figure_is_the_family():
    c = study.compute(table(three_rows())).comparison
    assert c["family"]["declared"] is False and c["family"]["size"] == 3
    assert sorted((p["better"], p["worse"]) for p in c["claims"]) == [("A", "B"), ("A", "C"), ("B", "C")]
    assert c["exploratory"] == []
    assert study.compare(study.compute(table(three_rows())).rows)["family"]["declared"] is False


def test_a_failing_row_is_left_out_of_kendalls_tau_and_groups_are_ranked_apart():
    """fail_above 20: C (median 24.5) fails and leaves the order; with C in a group of its own the
    study has two orders, each too short to test."""
    c = study.compute(table(three_rows(fail_above=20.0))).comparison
    (order,) = c["orders"]
    assert (order["left_out"], order["left_out_rows"], order["rows"]) == (1, ["C"], 2)
    res = study.compute(table(three_rows(group_c="wide")))
    assert [(o["group"], o["rows"]) for o in res.comparison["orders"]] == [(None, 2), ("wide", 1)]
    assert [r.group for r in res.rows] == [None, None, "wide"]


def test_the_study_result_carries_the_tables_own_fields_and_its_fail_rule():
    res = study.compute(table(three_rows(fail_above=20.0)))
    assert (res.study, res.title, res.preset, res.paper_metric, res.budget, res.fail_above, res.dataset) == (
        "s", "S", "quick", "test error", 2, 20.0, "digits")
    assert [r.fail for r in res.rows] == [False, False, True]
    assert res.comparison is not None and res.reading == study.reading(res.comparison)


def test_a_live_table_computes_rows_only_and_reuses_those_whose_runs_did_not_change():
    rows = three_rows(fail_above=20.0)
    first = study.compute(table(rows), live=True)
    assert first.comparison is None and first.reading is None
    rows[1].runs[0].test_error = 99.0  # B's seed 0 finishes again with another error
    again = study.compute(table(rows), live=True, previous=first)
    assert again.rows[0] is first.rows[0] and again.rows[2] is first.rows[2]
    assert again.rows[1] is not first.rows[1] and again.rows[1].test_errors[0] == 99.0
    final = study.compute(table(rows), previous=again)
    assert final.rows[0] is first.rows[0] and final.comparison is not None


# -- the sentence under the table ----------------------------------------------------------------

def comparison(**kw) -> dict:
    base = {"claims": [], "family": {"declared": True, "size": 0}, "claims_in_order": 0, "claims_unresolved": 0,
            "claims_reversed": 0, "exploratory": [], "orders": [], "power": None}
    return {**base, **kw}


RESOLVED_TAIL = ("(sign-flip test of the differences paired by seed, Holm-adjusted p <= 0.05 over the family)")


@pytest.mark.parametrize("kw, expected", [
    ({}, "no declared claim has both its rows in this table"),
    ({"family": {"declared": False, "size": 0}}, None),
    ({"family": {"declared": True, "size": 1}, "claims": [{"can_resolve": False}]},
     "1 declared claim, none resolvable at this n"),
    ({"family": {"declared": True, "size": 3}, "claims": [{"can_resolve": False}] * 2 + [{"can_resolve": True}],
      "claims_in_order": 2, "claims_unresolved": 1, "claims_reversed": 0},
     f"3 declared claims: 2 in the paper's order and resolved, 1 unresolved, 0 reversed and resolved {RESOLVED_TAIL}"),
    ({"family": {"declared": False, "size": 1}, "claims": [{"can_resolve": True}], "claims_reversed": 1},
     "1 pair with a paper figure (no claims declared: the family): 0 in the paper's order and resolved, "
     f"0 unresolved, 1 reversed and resolved {RESOLVED_TAIL}"),
    ({"family": {"declared": False, "size": 2}, "claims": [{"can_resolve": False}] * 2},
     "2 pairs with a paper figure (no claims declared: the family), none resolvable at this n"),
    ({"exploratory": [{}, {}], "power": "8 seeds can resolve 1 claim"},
     "no declared claim has both its rows in this table; 2 exploratory pairs (raw p only, never called "
     "resolved); 8 seeds can resolve 1 claim"),
])
def test_the_reading_of_the_claims(kw, expected):
    assert study.reading(comparison(**kw)) == expected


@pytest.mark.parametrize("order, expected", [
    ({"group": None, "kendall_tau": 0.6, "p_value": 0.0833, "rows": 5, "left_out": 0},
     "Kendall's tau 0.60 against the paper's figures (one-sided permutation p 0.083, exact, 5 rows)"),
    ({"group": "bottleneck", "kendall_tau": -0.333, "p_value": 0.51, "rows": 12, "left_out": 1, "p_exact": False},
     "bottleneck: Kendall's tau -0.33 against the paper's figures (one-sided permutation p 0.510, Monte Carlo, "
     "12 rows, 1 failing row left out)"),
    ({"group": "basic", "kendall_tau": None, "reason": "2 rows with a paper figure and a median: no order to test",
      "left_out": 2},
     "basic: 2 rows with a paper figure and a median: no order to test, 2 failing rows left out"),
    ({"group": None, "kendall_tau": 1.0, "p_value": 1 / 6, "rows": 3, "left_out": 0, "p_exact": True},
     "Kendall's tau 1.00 against the paper's figures (one-sided permutation p 0.167, exact, 3 rows)"),
])
def test_the_reading_of_each_groups_order(order, expected):
    assert study.reading(comparison(family={"declared": False, "size": 0}, orders=[order])) == expected


def test_the_reading_joins_its_parts_in_order():
    orders = [{"group": "a", "kendall_tau": None, "reason": "all values tied: no order", "left_out": 0},
              {"group": "b", "kendall_tau": None, "reason": "all values tied: no order", "left_out": 0}]
    got = study.reading(comparison(family={"declared": True, "size": 1}, claims=[{"can_resolve": False}],
                                   exploratory=[{}], orders=orders, power="P."))
    assert got == ("1 declared claim, none resolvable at this n; 1 exploratory pair (raw p only, never called "
                   "resolved); a: all values tied: no order; b: all values tied: no order; P.")
