"""results/report.py's grouping by hand: records into one table per study, preset and budget, rows in
the study's order and seeds in order; and the runs a shipped study plans but a directory lacks, as
pending seeds (the quick shortcut study: 11 rows of 13 seeds, 100..112, He 2016b Table 1 on digits)."""

from pathlib import Path

from resnet_cli.results import report
from resnet_cli.results.records import SeedResult
from resnet_cli.sweep import plan as plan_mod


def seed(study, index, label, s, preset="quick", budget=1, status="completed", **more):
    return SeedResult(path=Path(f"{study}/{index:02d}-s{s}"), study=study, title=study.title(), preset=preset,
                      paper_metric=None, index=index, row=label, seed=s, paper=None, status=status,
                      budget=budget, test_error=5.0, **more)


def test_records_group_into_a_table_per_study_preset_and_budget_in_order():
    records = [seed("shortcut", 2, "b", 1), seed("shortcut", 1, "a", 3), seed("depth", 1, "x", 0),
               seed("shortcut", 1, "a", 0), seed("shortcut", 1, "a", None, status="error"),
               seed("shortcut", 1, "a", 0, budget=2), seed("shortcut", 1, "a", 2, preset="full"),
               seed("shortcut", 2, "b", 0, group="g")]
    tables = report.aggregate(records)
    assert [(t.study, t.preset, t.budget) for t in tables] == [
        ("depth", "quick", 1), ("shortcut", "full", 1), ("shortcut", "quick", 1), ("shortcut", "quick", 2)]
    quick = tables[2]
    assert [(r.index, r.row) for r in quick.rows] == [(1, "a"), (2, "b")]
    assert [r.seed for r in quick.rows[0].runs] == [0, 3, None]  # a run without a seed last
    assert [r.seed for r in quick.rows[1].runs] == [0, 1]
    assert quick.rows[1].group is None  # the row takes its first record's group
    assert (quick.title, tables[3].budget) == ("Shortcut", 2)


def test_a_row_is_its_number_and_label_together_and_takes_its_first_records_group():
    [table] = report.aggregate([seed("s", 1, "a", 0, group="g"), seed("s", 1, "a renamed", 1),
                                seed("s", 2, "a", 2), seed("s", 1, "a", 3)])
    assert [(r.index, r.row, [x.seed for x in r.runs], r.group) for r in table.rows] == [
        (1, "a", [0, 3], "g"), (1, "a renamed", [1], None), (2, "a", [2], None)]


def test_a_studys_missing_seeds_come_back_pending_as_its_plan_has_them():
    have = [seed("shortcut", 1, "original (identity)", 100), seed("shortcut", 1, "original (identity)", 101)]
    gone = report.missing(have)
    assert len(gone) == 11 * 13 - 2
    assert {r.status for r in gone} == {"pending"} and {r.study for r in gone} == {"shortcut"}
    assert [(r.index, r.seed) for r in gone[:3]] == [(1, 102), (1, 103), (1, 104)]
    assert {r.index for r in gone} == set(range(1, 12))
    first = gone[0]
    assert (first.row, first.fail_above, first.chance, first.dataset, first.preset) == (
        "original (identity)", 20.0, 90.0, "digits", "quick")
    assert (first.title, first.paper, first.group, first.budget, first.test_error) == (
        "He 2016b Table 1: shortcut variants (ResNet-110)", 6.61, None, 1, None)
    assert first.paper_metric == "CIFAR-10 test error % (He 2016b Table 1; fail = above 20%)"
    assert first.path == Path("runs/ablate/shortcut-quick/01-original-identity-s102")
    last = gone[-1]
    assert (last.index, last.seed, last.row, last.paper) == (11, 112, "dropout shortcut, p 0.5", "fail")
    grouped = report.missing([seed("activation", 1, "(a) original, 110", 0)])
    assert (grouped[0].group, grouped[-1].group, grouped[-1].row) == (
        "ResNet-110", "ResNet-164", "(e) full pre-activation, 164")


def test_nothing_is_guessed_for_runs_no_plan_of_this_version_has():
    assert report.missing([seed("shortcut", 1, "a row this version does not have", 0)]) == []
    assert report.missing([seed("not-a-shipped-study", 1, "a", 0)]) == []
    assert report.missing([seed("shortcut", 1, "original (identity)", 0, preset="no-such-preset")]) == []
    assert report.missing([seed("shortcut", 1, "original (identity)", 0, budget=2)]) == []  # a --budgets table
    budgets = report.missing([seed("shortcut", 1, "original (identity)", s, budget=b) for b in (1, 2) for s in (100, 101)])
    assert len(budgets) == 11 * 13 - 2 and {r.budget for r in budgets} == {1}  # the preset's table only
    assert report.missing([seed("runs", 1, "loose", 0)]) == []


def test_a_study_that_cannot_be_completed_does_not_stop_the_next_from_being():
    have = [seed("a-study-of-mine", 1, "a", 0), seed("depth", 1, "a row this version does not have", 0),
            seed("shortcut", 1, "original (identity)", 0, preset="no-such-preset"),
            seed("shortcut", 1, "original (identity)", 100)]
    gone = report.missing(have)
    assert len(gone) == 11 * 13 - 1 and {(r.study, r.preset) for r in gone} == {("shortcut", "quick")}
    every_row = [seed("shortcut", row.index, row.label, 100) for row in plan_mod.plan("shortcut", "quick").rows]
    assert len(report.missing(every_row)) == 11 * 12  # each row has its seed 100
