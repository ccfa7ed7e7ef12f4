"""results/degrade.py by hand: He 2016a's claims about a grid, written out; a summary's order, its
error figures from the accuracies (the lowest error is the highest accuracy's), the diverged count,
the published figure (none for a vit grid); the training-error bands over the iterations every run
shares. test_degrade.py checks the intervals and the paired test on the same summaries."""

import pytest

from resnet_cli.results import degrade as D


def test_the_grids_claims_are_he2016a_sec_4_1_every_pair_along_depth_and_the_deeper_twins():
    """By hand from He 2016a sec. 4.1 for depths 20, 32, 56 (each depth pair shallower-deeper: (20, 32),
    (20, 56), (32, 56)): training error, each deeper plain net above each shallower one, each deeper
    residual net below its plain twin and below each shallower residual net; test error, the deeper
    plain nets above the shallower and the deeper residual nets below their twins. The 20-layer twins
    ("comparably accurate") are listed, not claimed."""
    family = D.he2016a_claims([56, 20, 32, 20])
    assert family.declared
    tr, te = "train_error", "test_error"
    assert [(m.better, m.worse, m.metric) for m in family.members] == [
        ("plain-20", "plain-32", tr), ("plain-20", "plain-56", tr), ("plain-32", "plain-56", tr),
        ("residual-32", "plain-32", tr), ("residual-56", "plain-56", tr),
        ("residual-32", "residual-20", tr), ("residual-56", "residual-20", tr), ("residual-56", "residual-32", tr),
        ("plain-20", "plain-32", te), ("plain-20", "plain-56", te), ("plain-32", "plain-56", te),
        ("residual-32", "plain-32", te), ("residual-56", "plain-56", te)]
    assert [m.source for m in family.members] == (
        [D.DEEP_PLAIN_WORSE] * 3 + [D.RESIDUAL_BELOW_PLAIN] * 2 + [D.DEEP_RESIDUAL_BETTER] * 3
        + [D.DEEP_PLAIN_WORSE_TEST] * 3 + [D.RESIDUAL_BELOW_PLAIN_TEST] * 2)
    assert "Fig. 4" in D.DEEP_RESIDUAL_BETTER and "degradation" in D.DEEP_PLAIN_WORSE
    assert [n.rows for n in family.listed] == [("residual-20", "plain-20")] * 2
    assert "comparably accurate" in family.listed[0].says and "converges faster" in family.listed[1].says


def run(net, depth, seed, acc, test_acc=None, status="completed", **more):
    return {"net": net, "depth": depth, "seed": seed, "status": status, "train_loss": 1.0 - acc, "train_acc": acc,
            "test_acc": acc if test_acc is None else test_acc, "grad_norm_first_layer": 2.0 * acc,
            "params": 1000 * depth + (1 if net == "residual" else 0), "dataset": "digits", **more}


REFERENCE = {("digits", "plain", 8): {"train_acc": 0.986, "source": "the article"},
             ("digits", "residual", 8): {"train_acc": 0.992, "source": "the article"}}


def test_summaries_come_by_depth_then_plain_before_residual_with_errors_from_accuracies():
    records = [run("residual", 8, 0, 0.9), run("plain", 20, 0, 0.5), run("residual", 20, 0, 0.75),
               run("plain", 8, 0, 0.8), run("plain", 8, 1, 0.6), run("plain", 8, 2, 0.7, diverged=True),
               run("residual", 8, 1, 0.95, status="diverged")]
    got = D.summarise(records, REFERENCE)
    assert [(s["net"], s["depth"]) for s in got] == [("plain", 8), ("residual", 8), ("plain", 20), ("residual", 20)]
    plain8 = got[0]
    assert (plain8["n"], plain8["diverged"], plain8["seeds"], plain8["params"]) == (3, 1, [0, 1, 2], 8000)
    assert (plain8["train_acc_median"], plain8["train_acc_min"], plain8["train_acc_max"]) == (0.7, 0.6, 0.8)
    # training error 100 (1 - acc): median 30, its lowest (20) is the highest accuracy's
    assert plain8["train_error_median"] == pytest.approx(30.0)
    assert (plain8["train_error_min"], plain8["train_error_max"]) == (pytest.approx(20.0), pytest.approx(40.0))
    assert plain8["grad_norm_first_layer_median"] == pytest.approx(1.4) and plain8["row"] == "plain-8"
    assert got[1]["diverged"] == 1  # a run's status says diverged where it has no flag
    assert plain8["reference"] == REFERENCE[("digits", "plain", 8)] and "reference" not in got[2]
    assert "paired" not in plain8 and set(got[1]["paired"]) == {"train_acc", "test_acc"}
    vit = D.summarise([{**r, "family": "vit"} for r in records], REFERENCE)
    assert not any("reference" in s for s in vit)  # the published figures are for conv nets


def test_a_depth_without_its_plain_twin_has_no_pair_and_no_claim():
    records = [run("residual", 8, s, 0.9 + s / 100) for s in range(3)] + [run("plain", 20, s, 0.5) for s in range(3)]
    got = D.summarise(records, {})
    assert all("paired" not in s for s in got)
    decided = D.claims(records)
    assert decided["claims"] == [] and decided["family"]["size"] == 0


def test_the_training_error_band_is_pointwise_over_the_iterations_all_runs_share():
    def curve(*errors):
        return [(100 * (i + 1), 0.0, e) for i, e in enumerate(errors)]

    records = [{"net": "plain", "depth": 8, "curve": curve(50.0, 30.0, 20.0)},
               {"net": "plain", "depth": 8, "curve": curve(40.0, 35.0)},  # cut off after two points
               {"net": "plain", "depth": 8, "curve": curve(60.0, 10.0, 5.0)},
               {"net": "residual", "depth": 8, "curve": []}]  # no curve: no band
    bands = D.curve_bands(records)
    assert list(bands) == [("plain", 8)]
    assert bands[("plain", 8)] == {"iters": [100, 200], "median": [50.0, 30.0], "lo": [40.0, 10.0],
                                   "hi": [60.0, 35.0], "runs": 3}


def test_a_residual_rows_pairs_carry_their_claims_verdict_or_are_exploratory():
    """Two depths, 6 seeds, every claim's differences of one sign at every seed (with some spread):
    each raw sign-flip p is 2/64 (two-sided), under 5%, but Holm over the grid's 5 claims (training
    error: plain-8 below plain-20, residual-20 below plain-20, residual-20 below residual-8; test
    error: plain-8 below plain-20, residual-20 below plain-20) makes each 5 x 2/64 = 0.156:
    unresolved, with the seeds that would resolve it. The 8-layer twins' pairs are exploratory: raw
    p alone, never called resolved. The objects say what they are (`summary`, `claims`)."""
    acc = {("plain", 8): (0.5, 1), ("plain", 20): (0.4, 2), ("residual", 8): (0.6, 3), ("residual", 20): (0.7, 5)}
    records = [run(net, depth, s, base + k * s / 1000, test_acc=0.3 if net == "residual" else None)
               for (net, depth), (base, k) in acc.items() for s in range(6)]
    decided = D.claims(records)
    assert decided["event"] == "claims" and decided["family"]["size"] == 5
    by_pair = {(c["better"], c["worse"], c["metric"]): c for c in decided["claims"]}
    assert set(by_pair) == {("plain-8", "plain-20", "train_error"), ("residual-20", "plain-20", "train_error"),
                            ("residual-20", "residual-8", "train_error"), ("plain-8", "plain-20", "test_error"),
                            ("residual-20", "plain-20", "test_error")}
    for c in by_pair.values():
        assert (c["p"], c["p_holm"], c["verdict"]) == (pytest.approx(2 / 64), pytest.approx(5 * 2 / 64), "unresolved")
    # The residual nets' test accuracy (0.3) is below plain-20's (0.4): that claim runs the other way.
    assert by_pair[("residual-20", "plain-20", "test_error")]["mean"] < 0
    assert by_pair[("residual-20", "plain-20", "test_error")]["seeds_needed"] is None
    assert by_pair[("residual-20", "plain-20", "train_error")]["seeds_needed"] is not None
    summaries = D.summarise(records, {})
    assert {r["event"] for r in summaries} == {"summary"} and {r["study"] for r in summaries} == {"degrade"}
    shallow, deep = summaries[1], summaries[3]  # the residual rows, 8 then 20
    for metric, error in (("train_acc", "train_error"), ("test_acc", "test_error")):
        pair, claim = deep["paired"][metric], by_pair[("residual-20", "plain-20", error)]
        assert (pair["p"], pair["p_holm"], pair["resolved"], pair["verdict"], pair["seeds_needed"]) == (
            pytest.approx(2 / 64), pytest.approx(5 * 2 / 64), False, "unresolved", claim["seeds_needed"])
        low = shallow["paired"][metric]
        assert (low["p"], low["p_holm"], low["resolved"], low["verdict"], low["seeds_needed"]) == (
            pytest.approx(2 / 64), None, False, "exploratory", None)


def test_a_measure_no_run_has_is_none_in_every_statistic():
    records = [run("plain", 8, s, 0.5, grad_norm_first_layer=None) for s in range(3)]
    (row,) = D.summarise(records, {})
    assert [row[f"grad_norm_first_layer_{k}"] for k in ("median", "min", "max")] == [None, None, None]
