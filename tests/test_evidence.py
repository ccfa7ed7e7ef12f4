"""The statistics of the study tables (experiments/evidence.py) through `resnet report`, checked
against scipy called directly on the same numbers, hand counts and an exact permutation count."""

import itertools
import json

import numpy as np
import pytest
from rich.console import Console
from scipy import stats
from typer.testing import CliRunner

from resnet_cli.cli import app
from resnet_cli.experiments import evidence, report

from test_fidelity import _write_run

# Four rows x three seeds; the paper's figures 6 < 7 < 8 < 9 (He 2016b style error %).
ERRORS = {1: (3.0, 3.4, 2.9), 2: (4.0, 4.5, 3.9), 3: (3.5, 5.5, 4.2), 4: (6.0, 6.2, 7.0)}
PAPER = {1: 6.0, 2: 7.0, 3: 8.0, 4: 9.0}


def _study(root, errors=ERRORS, paper=PAPER):
    for index, errs in errors.items():
        for seed, err in enumerate(errs):
            _write_run(root, index, f"row {index}", seed, "completed", err, None, paper=paper[index])


def _json(args):
    r = CliRunner().invoke(app, [str(a) for a in args])
    assert r.exit_code == 0, r.output
    return [json.loads(line) for line in r.stdout.splitlines()], r


def _exact_p(x, y):
    """One-sided p of Kendall's tau by enumerating every pairing (4 rows: 24), by hand."""
    observed = stats.kendalltau(x, y).statistic
    taus = [stats.kendalltau(x, perm).statistic for perm in itertools.permutations(y)]
    return sum(t >= observed - 1e-12 for t in taus) / len(taus)


def test_report_rows_carry_the_medians_interval_and_the_study_its_tau(tmp_path):
    _study(tmp_path)
    lines, _ = _json(["report", tmp_path, "--json"])
    rows, (summary,) = [x for x in lines if x["event"] == "row"], [x for x in lines if x["event"] == "study"]
    for row in rows:
        errs = ERRORS[row["index"]]
        ci = stats.bootstrap((np.array(errs),), np.median, confidence_level=0.95, n_resamples=9999,
                             method="percentile", rng=np.random.default_rng(0)).confidence_interval
        assert row["ci95"] == pytest.approx([ci.low, ci.high], abs=1e-4)
        assert row["median"] == pytest.approx(float(np.median(errs)))
        assert row["mean"] == pytest.approx(float(np.mean(errs)), abs=1e-4)
        assert row["std"] == pytest.approx(float(np.std(errs, ddof=1)), abs=1e-4) and row["n"] == 3
    medians = [float(np.median(ERRORS[i])) for i in sorted(ERRORS)]
    papers = [PAPER[i] for i in sorted(PAPER)]
    assert summary["kendall_tau"] == pytest.approx(stats.kendalltau(medians, papers).statistic)
    assert summary["p_value"] == pytest.approx(_exact_p(medians, papers))
    # Pairs by hand: with 3 seeds a percentile interval of the mean difference excludes 0 exactly when
    # all three paired differences share a sign (an all-one-seed resample has probability 1/27 > 2.5%).
    # worse - better per seed: (1,2) +1.0 +1.1 +1.0 in order; (1,3) +0.5 +2.1 +1.3 in order;
    # (1,4), (2,4), (3,4) all positive: in order; (2,3) -0.5 +1.0 +0.3: unresolved.
    assert (summary["pairs_in_order_resolved"], summary["pairs_unresolved"], summary["pairs_reversed_resolved"]) == (5, 1, 0)
    (open_pair,) = [p for p in summary["pairs"] if p["verdict"] == "unresolved"]
    assert (open_pair["better"], open_pair["worse"], open_pair["seeds"]) == (2, 3, [0, 1, 2])
    diffs = [-0.5, 1.0, 0.3]
    # ((1.96 + 0.84) * sd / gap)^2 seeds, sd and gap of the paired differences by hand.
    assert open_pair["seeds_needed"] == int(np.ceil((2.801585 * np.std(diffs, ddof=1) / np.mean(diffs)) ** 2))


def test_a_planted_swap_of_two_rows_changes_tau_and_reverses_a_pair(tmp_path):
    _study(tmp_path / "a")
    swapped = {**ERRORS, 1: ERRORS[4], 4: ERRORS[1]}
    _study(tmp_path / "b", swapped)
    (a,) = [x for x in _json(["report", tmp_path / "a", "--json"])[0] if x["event"] == "study"]
    (b,) = [x for x in _json(["report", tmp_path / "b", "--json"])[0] if x["event"] == "study"]
    medians = [float(np.median(swapped[i])) for i in sorted(swapped)]
    assert b["kendall_tau"] == pytest.approx(stats.kendalltau(medians, list(PAPER.values())).statistic)
    assert b["kendall_tau"] < a["kendall_tau"]
    # Row 4's errors now sit on the paper's best row: each of its pairs is reversed beyond the noise.
    assert b["pairs_reversed_resolved"] >= 3


def test_fewer_than_three_seeds_give_no_interval(tmp_path):
    _study(tmp_path, {1: (3.0, 3.5), 2: (4.0, 4.2), 3: (5.0,)}, PAPER)
    lines, _ = _json(["report", tmp_path, "--json"])
    rows = [x for x in lines if x["event"] == "row"]
    assert all(r["ci95"] is None and r["ci95_reason"] == "n < 3: no interval" for r in rows)
    (summary,) = [x for x in lines if x["event"] == "study"]
    assert summary["pairs_unresolved"] == 3 and all(p["ci95"] is None for p in summary["pairs"])
    (table,) = report.aggregate(report.collect(tmp_path))
    console = Console(width=120, record=True)
    console.print(report.render(table, width=120))
    assert console.export_text().count("no interval") >= 3


def test_kendall_needs_three_rows():
    assert evidence.kendall([1.0, 2.0], [1.0, 2.0])["kendall_tau"] is None


def _loose(root, name, seed, lr=0.1):
    d = root / name
    d.mkdir(parents=True)
    (d / "spec.yaml").write_text(json.dumps({"model": {"family": "resnet", "depth": 8}, "data": {"dataset": "digits"},
                                             "optim": {"lr": lr}, "run": {"seed": seed, "out": str(d)}}))
    (d / "summary.json").write_text(json.dumps({"status": "completed", "test_error": 2.0 + seed, "train_loss": 0.1}))


def test_the_same_spec_and_seed_counts_once_and_rows_name_what_differs(tmp_path):
    for copy in range(3):  # seed 0 gathered three times
        _loose(tmp_path, f"a{copy}", 0)
    _loose(tmp_path, "b", 1)
    _loose(tmp_path, "c", 0, lr=0.05)
    lines, r = _json(["report", tmp_path, "--json"])
    rows = {x["row"]: x for x in lines if x["event"] == "row"}
    assert sorted(rows) == ["resnet8 original identity option ? digits (optim.lr=0.05)",
                            "resnet8 original identity option ? digits (optim.lr=0.1)"]
    assert rows["resnet8 original identity option ? digits (optim.lr=0.1)"]["n"] == 2
    assert rows["resnet8 original identity option ? digits (optim.lr=0.1)"]["seeds"] == [0, 1]
    assert "2 duplicate run(s) ignored" in r.stderr


def test_a_run_written_before_a_field_existed_is_the_same_row(tmp_path):
    # Two seeds of one loose net; the older run's spec.yaml predates model.norm and
    # model.stochastic_depth (their defaults are what it ran with): one row of n = 2, not two rows.
    from resnet_cli import spec as S

    full = S.to_tree(S.load("digits/residual8"))
    for name, seed in (("new", 0), ("old", 1)):
        tree = json.loads(json.dumps(full))
        tree["run"].update(seed=seed, out=str(tmp_path / name))
        if name == "old":
            del tree["model"]["norm"], tree["model"]["stochastic_depth"]
        (tmp_path / name).mkdir()
        (tmp_path / name / "spec.yaml").write_text(json.dumps(tree))
        (tmp_path / name / "summary.json").write_text(json.dumps({"status": "completed", "test_error": 2.0 + seed}))
    lines, _ = _json(["report", tmp_path, "--json"])
    rows = [x for x in lines if x["event"] == "row"]
    assert len(rows) == 1 and rows[0]["n"] == 2 and rows[0]["seeds"] == [0, 1], rows


def test_a_study_run_gathered_twice_counts_once(tmp_path):
    _study(tmp_path / "m0")
    _study(tmp_path / "m1")
    dup = []
    (table,) = report.aggregate(report.collect(tmp_path, dup))
    assert [row.n for row in table.rows] == [3, 3, 3, 3] and len(dup) == 12


def test_at_80_columns_labels_keep_their_width(tmp_path):
    labels = {1: "original (identity)", 2: "constant scaling 0.5 / 0.5", 3: "exclusive gating, b_g -6",
              4: "1x1 conv shortcut"}
    for index, errs in ERRORS.items():
        for seed, err in enumerate(errs):
            _write_run(tmp_path, index, labels[index], seed, "completed", err, 20.0, paper=PAPER[index])
    (table,) = report.aggregate(report.collect(tmp_path))
    console = Console(width=80, record=True)
    console.print(report.render(table, width=80))
    text = console.export_text()
    assert max(len(line) for line in text.splitlines()) <= 80
    # Each label is read in at most two lines of at least 16 characters: no word is cut.
    for label in labels.values():
        assert all(word in text for word in label.split())
    assert "original (identity)" in text and "1x1 conv shortcut" in text
    assert "[2.9, 3.4]" in text  # the interval abbreviated to one decimal, not the labels


def test_the_interval_is_the_medians_not_the_means(tmp_path):
    """Seven seeds with one far off: the median's interval stays among the close seeds, the mean's
    would not (with 3 seeds both are [min, max], so this needs more)."""
    errs = (1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 40.0)
    for seed, err in enumerate(errs):
        _write_run(tmp_path, 1, "skewed", seed, "completed", err, None, paper=6.0)
    (row,) = [x for x in _json(["report", tmp_path, "--json"])[0] if x["event"] == "row"]
    ci = stats.bootstrap((np.array(errs),), np.median, n_resamples=9999, method="percentile",
                         rng=np.random.default_rng(0)).confidence_interval
    assert row["ci95"] == pytest.approx([ci.low, ci.high], abs=1e-4) and row["ci95"][1] <= 6.0


def test_an_interval_touching_zero_does_not_resolve():
    # Differences 0, 1, 2: the resample of seed 0 three times (probability 1/27 > 2.5%) has mean 0,
    # so the interval's lower end is 0 itself: not excluded.
    p = evidence.paired({0: 1.0, 1: 1.0, 2: 1.0}, {0: 1.0, 1: 2.0, 2: 3.0})
    assert p["ci95"][0] == 0.0 and p["resolved"] is False
    assert p["seeds_needed"] == 8  # ((1.96 + 0.84) * 1.0 / 1.0)^2 = 7.85
