"""A diverged seed is a failed run, counted in its row, never left out (He 2016b counts a net that
does not train as a failure): `resnet report` / `ablate` tables and `resnet degrade` count it at its
dataset's chance error, so a row is never judged on its survivors alone."""

from __future__ import annotations

import json
import math

import yaml
from rich.console import Console

from resnet_cli.results import degrade_grid
from resnet_cli.runs import degrade_records as degrade_runs
from resnet_cli.results import report
from resnet_cli.results import table as study_table
from resnet_cli.spec.datasets import chance_error
from resnet_cli import spec as spec_mod

DIGITS = {"model": {"family": "digits", "depth": 4}, "data": {"dataset": "digits"}}


def _run(root, index, label, seed, status, test_error, paper):
    d = root / f"{index:02d}-r-s{seed}"
    d.mkdir(parents=True)
    (d / "spec.yaml").write_text(yaml.safe_dump(DIGITS))
    (d / "study.json").write_text(json.dumps({
        "study": "hand", "title": "hand-made", "preset": "p", "paper_metric": "error %", "index": index,
        "row": label, "seed": seed, "paper": paper}))
    (d / "summary.json").write_text(json.dumps({"status": status, "test_error": test_error, "train_loss": 1.0}))


def test_chance_error_by_hand():
    # 10 digit classes guessed: 9 in 10 wrong; CIFAR-100: 99 in 100; synthetic with 4 classes: 3 in 4.
    assert chance_error(spec_mod.load(DIGITS).data) == 90.0
    assert chance_error(spec_mod.load({"data": {"dataset": "cifar100"}}).data) == 99.0
    four = spec_mod.load({"data": {"dataset": "synthetic", "synthetic": {"classes": 4}}}).data
    assert chance_error(four) == 75.0


def test_a_row_that_diverged_at_two_of_three_seeds_counts_them_at_chance(tmp_path):
    """Row B completed only at seed 0 (5%); seeds 1 and 2 diverged, one after a last good epoch at
    3% (a survivor's figure that must not be used). Counted at chance (90%): B's median is 90, n 3,
    and its pair with A is paired over all three seeds: differences 5-10, 90-11, 90-12."""
    for seed, err in enumerate((10.0, 11.0, 12.0)):
        _run(tmp_path, 1, "A", seed, "completed", err, 5.0)
    _run(tmp_path, 2, "B", 0, "completed", 5.0, 6.0)
    _run(tmp_path, 2, "B", 1, "diverged", 3.0, 6.0)
    _run(tmp_path, 2, "B", 2, "diverged", None, 6.0)
    (table,) = report.results(report.collect(tmp_path))
    rows = {r["row"]: r for r in (study_table.row_json(table, row) for row in table.rows)}
    b = rows["B"]
    assert b["n"] == 3 and b["diverged"] == 2 and b["diverged_seeds"] == [1, 2]
    assert b["test_error_median"] == 90.0 and b["test_errors"] == [5.0, 90.0, 90.0]
    assert b["status"] == "diverged 2/3"
    (pair,) = table.comparison["claims"]  # no claims declared: the one pair with paper figures is the family
    assert pair["seeds"] == [0, 1, 2]
    assert math.isclose(pair["mean"], ((5 - 10) + (90 - 11) + (90 - 12)) / 3)
    console = Console(width=160, record=True)
    console.print(study_table.render(table))
    text = console.export_text()
    assert "3/3 (2 div.)" in text and "chance error" in text


def test_a_diverged_degrade_run_counts_at_chance(tmp_path):
    """A degrade run that diverged after a good epoch (test error 4%) is read at chance: accuracy
    1/10, training loss ln 10 (a uniform guess over the 10 digits), and named as diverged."""
    grid = tmp_path / "g"
    for seed, (status, err) in enumerate((("completed", 20.0), ("diverged", 4.0), ("completed", 30.0))):
        d = grid / "runs" / degrade_runs.run_name("plain", 4, seed)
        d.mkdir(parents=True)
        tree = {**DIGITS, "model": {**DIGITS["model"], "shortcut": {"kind": "none"}}, "run": {"seed": seed}}
        (d / "spec.yaml").write_text(yaml.safe_dump(tree))
        (d / "summary.json").write_text(json.dumps({"status": status, "test_error": err, "train_error": err / 2,
                                                    "train_loss": 0.1}))
    recs = [degrade_runs.load_record(d, grid) for d in sorted((grid / "runs").iterdir())]
    gone = recs[1]
    assert gone["diverged"] and gone["test_acc"] == gone["train_acc"] == 0.1
    assert math.isclose(gone["train_loss"], math.log(10))
    (row,) = degrade_grid.summarise(recs)
    assert row["n"] == 3 and row["diverged"] == 1
    assert math.isclose(row["test_acc_median"], 0.7)  # accuracies 0.8, 0.1, 0.7
