"""A degrade grid in researchers' formats (`--format csv|markdown|latex`, `--pairs`), checked on the
grid commit 52c9c0e wrote (tests/data/degrade-52c9c0e): every figure against the run records
themselves (their summary.json files), not against the code that summarised them."""

from __future__ import annotations

import csv
import io
import json
import shutil
import statistics
from pathlib import Path

import pytest
from typer.testing import CliRunner

from resnet_cli.cli import app

OLD = Path(__file__).parent / "data" / "degrade-52c9c0e"


@pytest.fixture()
def grid(in_tmp):
    shutil.copytree(OLD, in_tmp / "d")
    runs = {}
    for path in sorted((in_tmp / "d" / "runs").iterdir()):
        net, depth, seed = path.name.split("-")
        summary = json.loads((path / "summary.json").read_text())
        # The run's own record keeps errors in %; the grid reports accuracies as fractions.
        runs[(net, int(depth), int(seed.removeprefix("seed")))] = {
            "train_acc": 1 - summary["train_error"] / 100, "test_acc": 1 - summary["test_error"] / 100}
    return runs


def report(*args: str):
    return CliRunner().invoke(app, ["report", "d", *args])


def test_csv_gives_one_line_per_net_and_depth_with_the_runs_medians(grid):
    res = report("--format", "csv")
    assert res.exit_code == 0, res.stderr
    rows = list(csv.DictReader(io.StringIO(res.stdout)))
    assert [(r["study"], r["row"], r["n"], r["seeds"]) for r in rows] == [("degrade", "plain-4", "2", "0 1"),
                                                                          ("degrade", "residual-4", "2", "0 1")]
    for r in rows:
        accs = [s["train_acc"] for (net, _, _), s in grid.items() if net == r["net"]]
        assert float(r["train_acc_median"]) == pytest.approx(statistics.median(accs), rel=1e-12)
        assert float(r["train_acc_min"]) == pytest.approx(min(accs), rel=1e-12)
        assert float(r["train_error_median"]) == pytest.approx(100 * (1 - statistics.median(accs)), rel=1e-12)


def test_pairs_csv_gives_each_claim_and_the_test_error_pair_in_points(grid):
    res = report("--format", "csv", "--pairs")
    assert res.exit_code == 0, res.stderr
    lines = list(csv.DictReader(io.StringIO(res.stdout)))
    # One depth: its twins are the grid's shallowest ("comparably accurate", He 2016a), so both pairs are
    # exploratory, and the grid declares no claim.
    assert [(p["kind"], p["better"], p["worse"], p["metric"]) for p in lines] == [
        ("exploratory", "residual-4", "plain-4", "train_error"), ("exploratory", "residual-4", "plain-4", "test_error")]
    # Two seeds: the Hodges-Lehmann difference is the mean of the two paired differences (Walsh
    # averages d0, (d0 + d1) / 2, d1), plain minus residual error in points.
    for line, key in ((lines[0], "train_acc"), (lines[1], "test_acc")):
        diffs = [100 * (grid[("residual", 4, s)][key] - grid[("plain", 4, s)][key]) for s in (0, 1)]
        assert float(line["difference"]) == pytest.approx(sum(diffs) / 2, abs=1e-9)
        # The exact sign-flip p by enumeration of the four sign patterns.
        flips = [abs(a * diffs[0] + b * diffs[1]) for a in (1, -1) for b in (1, -1)]
        assert float(line["p"]) == sum(f >= abs(sum(diffs)) - 1e-9 for f in flips) / 4
    assert not lines[0]["p_holm"] and not lines[1]["p_holm"]  # an exploratory pair is never Holm-adjusted


def test_markdown_and_latex_give_the_grid_and_its_claims(grid):
    md = report("--format", "markdown")
    assert md.exit_code == 0, md.stderr
    assert md.stdout.startswith("| net | depth | n | params |") and "| He 2016a's claim |" not in md.stdout  # no claim
    tex = report("--format", "latex")
    assert tex.exit_code == 0, tex.stderr
    text = tex.stdout
    assert all(rule in text for rule in (r"\toprule", r"\midrule", r"\bottomrule")) and "|" not in text.split(r"\toprule")[0]
    accs = sorted(grid[("plain", 4, s)]["train_acc"] for s in (0, 1))
    err = 100 * (1 - statistics.median(accs))
    assert f"plain & 4 & 2 & {err:.2f} ({100 * (1 - accs[1]):.2f}--{100 * (1 - accs[0]):.2f})" in text
    tests = sorted(100 * (1 - grid[("plain", 4, s)]["test_acc"]) for s in (0, 1))  # these two seeds differ
    assert f" & {statistics.median(tests):.2f} ({tests[0]:.2f}--{tests[1]:.2f}) & " in text  # lowest error first
    assert "No claim is resolved at this $n$." in text  # two seeds resolve nothing


def test_degrade_prints_the_formats_itself_and_pairs_needs_csv(in_tmp):
    args = ["degrade", "--depths", "4", "--seeds", "0", "--epochs", "1", "--set", "data.train_subset=128", "--out", "g"]
    bad = CliRunner().invoke(app, [*args, "--pairs"])
    assert bad.exit_code == 2 and "give --format csv" in bad.stderr and "Traceback" not in bad.output
    assert not (in_tmp / "g").exists()  # refused before any run
    res = CliRunner().invoke(app, [*args, "--format", "csv"])
    assert res.exit_code == 0, res.stderr
    assert [r["row"] for r in csv.DictReader(io.StringIO(res.stdout))] == ["plain-4", "residual-4"]


def test_output_writes_the_document_to_a_file_and_refuses_what_it_cannot_write(grid, in_tmp):
    printed = report("--format", "csv").stdout
    res = report("--format", "csv", "--output", "rows.csv")
    assert res.exit_code == 0 and res.stdout == "" and "wrote rows.csv" in res.stderr
    assert (in_tmp / "rows.csv").read_text() == printed
    assert [p.name for p in in_tmp.iterdir() if p.name.startswith(".")] == []  # no temporary file left
    (in_tmp / "keep.csv").write_text("kept\n")
    for args, says in ((["--format", "csv", "--output", "d"], "is a directory"),
                       (["--format", "csv", "--output", "no/such/dir/x.csv"], "no directory no/such/dir"),
                       (["--format", "json", "--output", "keep.csv"], "give --format csv, markdown or latex")):
        bad = report(*args)
        assert bad.exit_code == 2 and says in bad.stderr and "Traceback" not in bad.output, (args, bad.output)
        assert len(bad.stderr.strip().splitlines()) == 1
    assert (in_tmp / "keep.csv").read_text() == "kept\n"  # a refused write leaves the old file alone


def test_ablate_refuses_an_unwritable_output_before_any_run(in_tmp):
    res = CliRunner().invoke(app, ["ablate", "projection", "--preset", "quick", "--seeds", "0", "--out", "r",
                                   "--format", "latex", "--output", "missing/table.tex"])
    assert res.exit_code == 2 and "--output missing/table.tex: no directory missing" in res.stderr
    assert not (in_tmp / "r").exists()


def test_report_runs_lists_a_degrade_grids_run_directories(grid):
    res = report("--runs", "--format", "csv")
    assert res.exit_code == 0, res.stderr
    rows = list(csv.DictReader(io.StringIO(res.stdout)))
    assert [(r["study"], r["row"], r["seed"], r["status"]) for r in rows] == [
        ("degrade", "plain-4", "0", "completed"), ("degrade", "plain-4", "1", "completed"),
        ("degrade", "residual-4", "0", "completed"), ("degrade", "residual-4", "1", "completed")]
    for r in rows:  # each run's own figure, as its summary.json has it
        net, depth, seed = r["row"].split("-")[0], 4, int(r["seed"])
        assert float(r["test_error"]) == pytest.approx(100 * (1 - grid[(net, depth, seed)]["test_acc"]))
