"""results/records.py by hand: what each run counts as (its last error, chance where it diverged,
nothing while unfinished; the training loss of a diverged run at a uniform guess's, ln of the
classes), a row's status over its runs' states, and a table's fail rule and datasets."""

import math
from pathlib import Path

import pytest

from resnet_cli.results.records import RowStats, SeedResult, StudyTable, finite


def run(seed, status, test_error=None, chance=90.0, **more):
    return SeedResult(path=Path(f"r{seed}"), study="s", title="t", preset="quick", paper_metric=None, index=1,
                      row="A", seed=seed, paper=6.61, status=status, test_error=test_error, chance=chance, **more)


def test_a_run_counts_as_its_error_chance_if_diverged_and_nothing_while_unfinished():
    assert run(0, "completed", 7.5).counted() == 7.5
    assert run(0, "diverged").counted() == 90.0 and run(0, "diverged").diverged
    nan = run(0, "completed", math.nan)  # a NaN net completed: diverged, counted at chance
    assert nan.diverged and nan.counted() == 90.0
    assert not run(0, "completed", 7.5).diverged
    for status in ("interrupted", "unfinished", "running", "pending", "error"):
        assert run(0, status, 7.5).counted() is None and not run(0, status, 7.5).diverged, status


def test_a_diverged_runs_training_figures_are_a_uniform_guesss():
    # chance 90% is 10 classes: a uniform guess's cross-entropy is ln 10; chance 99% is 100 classes
    assert run(0, "diverged").counted_as("train_loss") == pytest.approx(math.log(10))
    assert run(0, "diverged", chance=99.0).counted_as("train_loss") == pytest.approx(math.log(100))
    assert run(0, "diverged").counted_as("train_error") == 90.0
    assert run(0, "diverged", chance=None).counted_as("train_loss") is None
    done = run(0, "completed", 7.5, train_loss=0.25, train_error=1.5)
    assert (done.counted_as("train_loss"), done.counted_as("train_error"), done.counted_as("error")) == (0.25, 1.5, 7.5)
    assert run(0, "completed", 7.5, train_loss=math.inf).counted_as("train_loss") is None
    assert run(0, "interrupted", 7.5, train_loss=0.25).counted_as("train_loss") is None
    assert run(0, "completed", 7.5).counted_as("train_error") is None  # a run that did not record it


@pytest.mark.parametrize("states,expected", [
    (["completed", "completed"], "completed"),
    (["completed", "error", "running"], "error"),
    (["diverged", "diverged"], "diverged"),
    (["completed", "diverged", "diverged"], "diverged 2/3"),
    (["completed", "running", "pending"], "running"),
    (["completed", "interrupted", "pending"], "incomplete 1/3"),
    (["diverged", "interrupted"], "incomplete 1/2"),
])
def test_a_rows_status_over_its_runs(states, expected):
    assert RowStats(1, "A", 6.61, [run(i, s, 5.0) for i, s in enumerate(states)]).status() == expected


def test_a_row_counts_its_seeds_and_pairs_them_by_seed():
    row = RowStats(1, "A", 6.61, [run(4, "completed", 7.0), run(2, "diverged"), run(9, "interrupted", 6.0),
                                  run(3, "completed", math.nan)])
    assert row.errors == [7.0, 90.0, 90.0] and row.n == 3 and row.diverged == 2
    assert row.values() == {4: 7.0, 2: 90.0, 9: None, 3: 90.0}
    assert row.values("train_error") == {4: None, 2: 90.0, 9: None, 3: 90.0}


def test_a_table_takes_its_first_fail_rule_and_names_its_datasets():
    rows = [RowStats(1, "A", 6.61, [run(0, "completed", 5.0, dataset="digits")]),
            RowStats(2, "B", 7.0, [run(0, "completed", 5.0, fail_above=20.0, dataset="cifar10"),
                                   run(1, "completed", 5.0, fail_above=30.0, dataset="digits")])]
    table = StudyTable("s", "t", "quick", None, rows)
    assert table.fail_above == 20.0 and table.dataset == "cifar10, digits"
    empty = StudyTable("s", "t", "quick", None, [RowStats(1, "A", None, [run(0, "pending")])])
    assert empty.fail_above is None and empty.dataset is None


def test_finite_is_a_real_number_only():
    assert finite(1) and finite(2.5) and finite(-0.0)
    assert not any(finite(x) for x in (math.nan, math.inf, -math.inf, None, "1.0"))
