"""The statistics of the study tables (results/evidence.py) through `resnet report`, checked
against scipy called directly on the same numbers, hand counts and an exact permutation count."""

import itertools
import json

import numpy as np
import pytest
from rich.console import Console
from scipy import stats
from typer.testing import CliRunner

from resnet_cli.cli import app
from resnet_cli.results import report
from resnet_cli.results import evidence, table as study_table

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


def _flip_p_by_hand(diffs):
    """Two-sided sign-flip p by listing every sign pattern (the definition, not evidence.py's code)."""
    obs = abs(sum(diffs))
    sums = [abs(sum(s * d for s, d in zip(signs, diffs))) for signs in itertools.product((1, -1), repeat=len(diffs))]
    return sum(x >= obs - 1e-12 for x in sums) / len(sums)


def test_report_rows_carry_the_medians_interval_and_the_study_its_tau(tmp_path):
    _study(tmp_path)
    lines, _ = _json(["report", tmp_path, "--json"])
    rows, (summary,) = [x for x in lines if x["event"] == "row"], [x for x in lines if x["event"] == "study"]
    for row in rows:
        errs = ERRORS[row["index"]]
        # Three seeds: the median's order-statistic interval is [min, max], which covers the true
        # median unless all three fall on one side of it: 1 - 2 (1/2)^3 = 75%.
        assert row["interval"] == pytest.approx([min(errs), max(errs)]) and row["coverage"] == 0.75
        assert "ci95" not in row
        assert row["median"] == pytest.approx(float(np.median(errs)))
        assert row["mean"] == pytest.approx(float(np.mean(errs)), abs=1e-4)
        assert row["std"] == pytest.approx(float(np.std(errs, ddof=1)), abs=1e-4) and row["n"] == 3
    medians = [float(np.median(ERRORS[i])) for i in sorted(ERRORS)]
    papers = [PAPER[i] for i in sorted(PAPER)]
    assert summary["kendall_tau"] == pytest.approx(stats.kendalltau(medians, papers).statistic)
    assert summary["p_value"] == pytest.approx(_exact_p(medians, papers)) and summary["p_exact"] is True
    # Pairs by hand: worse - better per seed: (1,2) +1.0 +1.1 +1.0; (1,3) +0.5 +2.1 +1.3; (1,4),
    # (2,4), (3,4) all positive; (2,3) -0.5 +1.0 +0.3. Three seeds cannot resolve anything: the
    # smallest sign-flip p is 2/8 = 0.25 (all of one sign), and Holm over six pairs makes it 1.
    assert (summary["claims_in_order"], summary["claims_unresolved"], summary["claims_reversed"]) == (0, 6, 0)
    by_pair = {(p["better_index"], p["worse_index"]): p for p in summary["claims"]}
    assert summary["family"]["declared"] is False and summary["family"]["size"] == 6  # no claims: every pair
    assert {k: p["p"] for k, p in by_pair.items()} == {(1, 2): 0.25, (1, 3): 0.25, (1, 4): 0.25, (2, 4): 0.25,
                                                       (3, 4): 0.25, (2, 3): 0.75}
    assert all(p["p_holm"] == 1.0 and p["can_resolve"] is False for p in summary["claims"])
    assert by_pair[(2, 3)]["p"] == _flip_p_by_hand([-0.5, 1.0, 0.3])
    assert "3 seeds cannot resolve any of 6 pairs with a paper figure at 5% after Holm" in summary["power"]


def test_a_planted_swap_of_two_rows_changes_tau_and_reverses_a_pair(tmp_path):
    _study(tmp_path / "a")
    swapped = {**ERRORS, 1: ERRORS[4], 4: ERRORS[1]}
    _study(tmp_path / "b", swapped)
    (a,) = [x for x in _json(["report", tmp_path / "a", "--json"])[0] if x["event"] == "study"]
    (b,) = [x for x in _json(["report", tmp_path / "b", "--json"])[0] if x["event"] == "study"]
    medians = [float(np.median(swapped[i])) for i in sorted(swapped)]
    assert b["kendall_tau"] == pytest.approx(stats.kendalltau(medians, list(PAPER.values())).statistic)
    assert b["kendall_tau"] < a["kendall_tau"]
    # Row 4's errors now sit on the paper's best row: its pairs turn against the paper's order
    # (resolving them takes more seeds than three; the seeds case is test_six_seeds_that_agree_resolve).
    assert sum(p["mean"] < 0 for p in b["claims"]) > sum(p["mean"] < 0 for p in a["claims"])


def test_fewer_than_three_seeds_give_no_interval(tmp_path):
    _study(tmp_path, {1: (3.0, 3.5), 2: (4.0, 4.2), 3: (5.0,)}, PAPER)
    lines, _ = _json(["report", tmp_path, "--json"])
    rows = [x for x in lines if x["event"] == "row"]
    assert all(r["interval"] is None and r["interval_reason"] == "n < 3: no interval" for r in rows)
    (summary,) = [x for x in lines if x["event"] == "study"]
    assert summary["claims_unresolved"] == 3 and not any(p["resolved"] for p in summary["claims"])
    (table,) = report.results(report.collect(tmp_path))
    console = Console(width=120, record=True)
    console.print(study_table.render(table, width=120))
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
    (table,) = report.results(report.collect(tmp_path, dup))
    assert [row.n for row in table.rows] == [3, 3, 3, 3] and len(dup) == 12


def test_at_80_columns_labels_keep_their_width(tmp_path):
    labels = {1: "original (identity)", 2: "constant scaling 0.5 / 0.5", 3: "exclusive gating, b_g -6",
              4: "1x1 conv shortcut"}
    for index, errs in ERRORS.items():
        for seed, err in enumerate(errs):
            _write_run(tmp_path, index, labels[index], seed, "completed", err, 20.0, paper=PAPER[index])
    (table,) = report.results(report.collect(tmp_path))
    console = Console(width=80, record=True)
    console.print(study_table.render(table, width=80))
    text = console.export_text()
    assert max(len(line) for line in text.splitlines()) <= 80
    # Each label is read in at most two lines of at least 16 characters: no word is cut.
    for label in labels.values():
        assert all(word in text for word in label.split())
    assert "original (identity)" in text and "1x1 conv shortcut" in text
    assert "[2.9, 3.4]" in text  # the interval abbreviated to one decimal, not the labels


def test_the_interval_is_the_medians_not_the_means(tmp_path):
    """Seven seeds with one far off: the median's order-statistic interval stays among the close
    seeds (k = 1 is the only k with 95% at n = 7: [x_(1), x_(7)] covers 1 - 2/128 = 98.4%; k = 2
    covers 1 - 2 * 8/128 = 87.5%, below 95%), so here it is the range; with ten seeds k = 2 holds
    1 - 2 * 11/1024 = 97.9% and leaves the outlier out."""
    errs = (1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0, 9.0, 40.0)
    for seed, err in enumerate(errs):
        _write_run(tmp_path, 1, "skewed", seed, "completed", err, None, paper=6.0)
    (row,) = [x for x in _json(["report", tmp_path, "--json"])[0] if x["event"] == "row"]
    assert row["interval"] == [2.0, 9.0] and row["coverage"] == pytest.approx(1 - 2 * 11 / 1024)
    lo, hi, cov = evidence.median_interval(errs[:7])
    assert (lo, hi) == (1.0, 7.0) and cov == pytest.approx(1 - 2 / 128)


# -- the tests and intervals at their stated rates ---------------------------------------------

def test_sign_flip_p_by_hand_at_four_seeds():
    # 16 sign patterns. [1, 2, 3, 4]: only all-plus and all-minus reach |10|: 2/16. [1, 2, 3, -0.5]:
    # |sum| >= 5.5 for +1+2+3(+-0.5) and the two mirrors: 4/16.
    assert evidence.signflip([1, 2, 3, 4])["p"] == 2 / 16
    assert evidence.signflip([1, 2, 3, -0.5])["p"] == 4 / 16
    assert evidence.signflip([1, 2, 3, -0.5])["p"] == _flip_p_by_hand([1, 2, 3, -0.5])
    assert evidence.smallest_p(5) == 2 / 32 > 0.05 and evidence.smallest_p(6) == 2 / 64 < 0.05


def test_holm_by_hand():
    # sorted 0.01, 0.03, 0.04, 0.2 times 4, 3, 2, 1: 0.04, 0.09, 0.08 -> 0.09 (monotone), 0.2.
    assert evidence.holm([0.01, 0.04, 0.03, 0.2]) == pytest.approx([0.04, 0.09, 0.09, 0.2])
    assert evidence.holm([0.5, None, 0.6]) == [1.0, None, 1.0]  # 0.5 * 2 = 1; 0.6 * 1 kept at 1 (monotone)


def test_kendall_p_is_exact_by_hand_at_four_rows():
    # 24 orders of our four values against the paper's 1 < 2 < 3 < 4. In order: only the identity
    # has tau 1 (1/24). One adjacent swap (S = 4): the identity and the 3 adjacent swaps reach it (4/24).
    assert evidence.kendall([1, 2, 3, 4], [1, 2, 3, 4])["p_value"] == pytest.approx(1 / 24)
    assert evidence.kendall([2, 1, 3, 4], [1, 2, 3, 4])["p_value"] == pytest.approx(4 / 24)
    assert evidence.kendall([2, 1, 3, 4], [1, 2, 3, 4])["p_value"] == pytest.approx(_exact_p([2, 1, 3, 4], [1, 2, 3, 4]))
    big = evidence.kendall(list(range(10)), list(range(10)))
    assert big["p_exact"] is False and big["p_value"] < 0.001  # 10! orders: Monte Carlo, said so


def _null_family_false_positive(n, pairs=10, trials=200, rng=None, rule=None):
    """Share of trials in which any of `pairs` null pairs (two rows from one normal) is resolved."""
    hits = 0
    for _ in range(trials):
        diffs = [rng.normal(size=n) - rng.normal(size=n) for _ in range(pairs)]
        hits += rule(diffs)
    return hits / trials


def _ours(diffs):
    return any(p is not None and p <= 0.05 for p in evidence.holm([evidence.signflip(d)["p"] for d in diffs]))


def _old_bootstrap_rule(diffs):
    """The rule these tables used before: a 95% percentile-bootstrap interval of the mean difference
    that excludes 0, each pair on its own."""
    for d in diffs:
        ci = stats.bootstrap((d,), np.mean, n_resamples=999, method="percentile",
                             rng=np.random.default_rng(0)).confidence_interval
        if ci.low > 0 or ci.high < 0:
            return True
    return False


@pytest.mark.parametrize("n", [3, 5, 8, 10])
def test_null_pairs_after_holm_are_resolved_at_most_five_percent_of_the_time(n):
    rate = _null_family_false_positive(n, rng=np.random.default_rng(n), rule=_ours)
    assert rate <= 0.05 + 2 * np.sqrt(0.05 * 0.95 / 200)


def test_the_old_bootstrap_rule_fails_the_same_check():
    """Planted: the percentile-bootstrap rule, uncorrected, resolves a null pair in most families."""
    rate = _null_family_false_positive(3, trials=60, rng=np.random.default_rng(3), rule=_old_bootstrap_rule)
    assert rate > 0.05 + 2 * np.sqrt(0.05 * 0.95 / 60)


@pytest.mark.parametrize("n", [3, 5, 8, 10])
def test_the_median_interval_covers_at_least_its_printed_level(n):
    rng = np.random.default_rng(100 + n)
    trials = 2000
    level = evidence.median_interval(range(n))[2]
    covered = 0
    for _ in range(trials):
        lo, hi, _cov = evidence.median_interval(rng.normal(size=n).tolist())
        covered += lo <= 0.0 <= hi  # the true median of N(0, 1)
    assert covered / trials >= level - 3 * np.sqrt(level * (1 - level) / trials)
    assert evidence.coverage_label(level) != "95%" or level >= 0.95  # the label never promises more


def test_six_seeds_that_agree_resolve_and_three_never_do(tmp_path):
    better = {s: 3.0 + 0.1 * s for s in range(6)}
    worse = {s: 4.0 + 0.15 * s for s in range(6)}
    six = evidence.paired(better, worse)
    assert six["p"] == 2 / 64 and six["resolved"] is True and six["can_resolve"] is True
    three = evidence.paired({s: better[s] for s in range(3)}, {s: worse[s] for s in range(3)})
    assert three["p"] == 2 / 8 and three["resolved"] is False and three["can_resolve"] is False
    # The difference's size: differences 1 + 0.05 s, s = 0..5. Hodges-Lehmann: the median of the 21
    # Walsh averages 1 + 0.025 (i + j), i <= j, which is 1 + 0.025 * 5 = 1.125 (i + j = 5 is the
    # median of the 21 sums). At n = 6 the signed-rank null puts 1/64 on W+ = 0 and on 1, 2/64 on 2
    # (cumulative 1, 2, 4 of 64), so k = 1 is the widest interval with coverage 1 - 2/64 = 96.9% and
    # k = 2 has 1 - 4/64 = 93.75% < 95%: [min, max] of the Walsh averages = [1.0, 1.25].
    assert six["shift"] == pytest.approx(1.125)
    assert six["interval"] == pytest.approx([1.0, 1.25]) and six["coverage"] == pytest.approx(62 / 64)


def test_a_two_row_study_at_three_seeds_claims_nothing(tmp_path):
    _study(tmp_path, {1: ERRORS[1], 2: ERRORS[4]}, PAPER)
    lines, _ = _json(["report", tmp_path, "--json"])
    (summary,) = [x for x in lines if x["event"] == "study"]
    (pair,) = summary["claims"]
    assert pair["p"] == 0.25 and pair["p_holm"] == 0.25 and pair["resolved"] is False
    (table,) = report.results(report.collect(tmp_path))
    console = Console(width=160, record=True)
    console.print(study_table.render_all(table, width=160))
    text = console.export_text()
    words = " ".join(text.split())
    assert "in order" not in words and "reversed" not in words and "unresolved" in words  # the verdict column
    assert "95%" not in text and "75%" in text
    assert "3 seeds cannot resolve any of 1 pair with a paper figure" in " ".join(text.split())


def test_report_pairs_the_activation_study_within_each_net(tmp_path):
    """He 2016b Table 2 orders the units of one net at a time: the study's rows carry `group`, and
    `resnet report` pairs a 110-layer row only with 110-layer rows."""
    rows = {1: ("(a) original, 110", 6.61), 2: ("(e) full pre-activation, 110", 6.37),
            3: ("(a) original, 164", 5.93), 4: ("(e) full pre-activation, 164", 5.46)}
    for index, (label, paper) in rows.items():
        for seed, err in enumerate(ERRORS[index]):
            _write_run(tmp_path, index, label, seed, "completed", err, None, paper=paper)
            run = tmp_path / f"{index:02d}-r-s{seed}" / "study.json"
            run.write_text(json.dumps({**json.loads(run.read_text()), "group": "ResNet-" + label[-3:]}))
    lines, _ = _json(["report", tmp_path, "--json"])
    (summary,) = [x for x in lines if x["event"] == "study"]
    assert sorted((p["better_index"], p["worse_index"]) for p in summary["claims"]) == [(2, 1), (4, 3)]
    assert {p["group"] for p in summary["claims"]} == {"ResNet-110", "ResNet-164"}
    assert {r["group"] for r in lines if r["event"] == "row"} == {"ResNet-110", "ResNet-164"}


def test_tau_ranks_the_rows_medians_not_their_means(tmp_path):
    """Row 2 has one outlier seed: its median (2.1) is the best, its mean (6.37) the worst. By
    medians one pair of six is discordant with the paper's 1 < 2 < 3 < 4 (tau 4/6 = 0.667); by means
    two are (tau 2/6 = 0.333)."""
    errors = {1: (3.0, 3.0, 3.1), 2: (2.0, 2.1, 15.0), 3: (3.9, 4.0, 4.1), 4: (4.9, 5.0, 5.1)}
    _study(tmp_path, errors, PAPER)
    (summary,) = [x for x in _json(["report", tmp_path, "--json"])[0] if x["event"] == "study"]
    medians = [float(np.median(errors[i])) for i in sorted(errors)]
    means = [float(np.mean(errors[i])) for i in sorted(errors)]
    papers = [PAPER[i] for i in sorted(PAPER)]
    assert summary["kendall_tau"] == pytest.approx(stats.kendalltau(medians, papers).statistic) == pytest.approx(4 / 6)
    assert stats.kendalltau(means, papers).statistic == pytest.approx(2 / 6)
