"""Declared claims as a study's Holm family (sweep/family.py, results/verdicts.py), power for the exact
test the tables use (results/power.py) and the paired difference's interval (evidence.shift_interval),
checked against simulations of the test itself, hand counts and the papers' own numbers."""

import itertools
import json
import math
import statistics

import numpy as np
import pytest

from resnet_cli.results import evidence, power, verdicts
from resnet_cli.sweep import plan as plan_mod
from resnet_cli.sweep.family import Family, Member

from test_ablate import TINY
from invoking import invoke


def _family(pairs, metric="test_error"):
    return Family(declared=True, members=tuple(Member(b, w, metric, "test") for b, w in pairs))


def _rows(values, paper=None, groups=None, fail=None):
    """Rows for verdicts.compare from {label: {seed: error}}."""
    out = []
    for i, (label, vals) in enumerate(values.items(), start=1):
        done = [v for v in vals.values() if v is not None]
        out.append({"index": i, "row": label, "group": (groups or {}).get(label), "paper": (paper or {}).get(label),
                    "median": statistics.median(done) if done else None, "fail": (fail or {}).get(label, False),
                    "values": {"error": vals}})
    return out


def _resolved_by_the_test(diffs_per_claim):
    """What the tables do, from the test's own pieces: the sign-flip p of each claim's differences,
    Holm over the family, resolved the claimed way (positive) at 5%."""
    pairs = [{"p": evidence.signflip(d)["p"], "mean": float(np.mean(d))} for d in diffs_per_claim]
    evidence.adjust(pairs)
    return [p["resolved"] and p["mean"] > 0 for p in pairs]


# -- the family's size decides what n can resolve ----------------------------------------------

def test_seeds_that_all_agree_resolve_a_family_first_at_the_hand_counted_n():
    """The smallest two-sided sign-flip p is 2/2^n; Holm's first step asks 0.05/m. m = 10: 2/2^9 =
    0.0039 <= 0.005 < 2/2^8 = 0.0078 -> 9; m = 18: 0.0020 <= 0.0028 < 0.0039 -> 10; m = 6: 0.0078 <=
    0.0083 -> 8; m = 55: 2/2^12 = 0.00049 <= 0.00091 < 0.00098 -> 12."""
    assert [evidence.seeds_to_resolve(m) for m in (10, 18, 6, 55)] == [9, 10, 8, 12]
    line = power.plan_line(5, 10)
    assert line.startswith("5 seeds cannot resolve any of 10 claims at 5% after Holm: the smallest exact p at "
                           "n = 5 is 0.0625; 9 seeds whose differences all agree can; ")
    # Planted: the n = 8 seeds that the old docs took for "about ten pairs" cannot resolve 10 claims.
    assert power.power(8, 10.0, 10) == 0.0 and power.power(9, 10.0, 10) > 0.99


def test_the_plan_line_names_the_sized_n_once():
    """At the n a family was sized for, the line says so instead of repeating the n; short of it, it
    names the n that would do; past it, the smaller n that would already have done."""
    sized = power.seeds_for(2 / math.sqrt(2), 13)
    at = power.plan_line(sized, 13)
    assert at.endswith(", the n sized for it") and at.count(f"{sized} ") == 1
    assert power.plan_line(sized - 1, 13).endswith(f"; {sized} resolve a 2-sd gap with 80% power")
    assert power.plan_line(sized + 4, 13).endswith(f"; {sized} would give 80%")


def test_power_matches_the_exact_test_simulated_through_its_own_functions():
    """He 2016b's shortcut study at its size: one claim of 18 with a true gap of 2
    row-sds (differences' sd sqrt 2 row-sds), the others null. Simulated here with evidence.signflip and
    Holm on fresh draws (not power.py's enumeration): resolved the claimed way 0.45 at n = 10 (all 10
    differences must be positive: Phi(sqrt 2)^10 = 0.441) and 0.96 at n = 16."""
    rng = np.random.default_rng(11)
    gap = 2 / math.sqrt(2)
    for n, expected in ((10, 0.441), (16, None)):
        hits = 0
        trials = 400
        for _ in range(trials):
            diffs = [rng.normal(gap, 1.0, n)] + [rng.normal(0.0, 1.0, n) for _ in range(17)]
            hits += _resolved_by_the_test(diffs)[0]
        simulated = hits / trials
        claimed = power.power(n, gap, 18)
        se = math.sqrt(claimed * (1 - claimed) / trials) + math.sqrt(claimed * (1 - claimed) / power.DRAWS)
        # Holm can only help the true claim, so the simulation may sit above the floor, not below it.
        assert simulated >= claimed - 3 * se, (n, simulated, claimed)
        assert simulated <= claimed + 3 * se + 0.03, (n, simulated, claimed)
        if expected is not None:
            assert claimed == pytest.approx(expected, abs=0.05)
    assert power.power(16, gap, 18) == pytest.approx(0.96, abs=0.03)


def test_a_two_sd_shift_in_every_claim_at_16_seeds_resolves_at_least_80_percent():
    rng = np.random.default_rng(5)
    resolved = []
    for _ in range(150):
        resolved += _resolved_by_the_test([rng.normal(2.0, math.sqrt(2), 16) for _ in range(10)])
    assert np.mean(resolved) >= 0.80
    # and the sized quick presets: 10 claims at 2 sd need no more than 16 seeds by power.py.
    assert power.seeds_for(2 / math.sqrt(2), 10) <= 16


@pytest.mark.slow
def test_ten_null_claims_at_16_seeds_are_resolved_family_wise_at_most_5_percent():
    """2,000 studies of 10 claims with no true difference, through the test's own functions."""
    rng = np.random.default_rng(2016)
    trials = 2000
    hits = sum(any(_resolved_by_the_test([rng.normal(size=16) - rng.normal(size=16) for _ in range(10)]))
               for _ in range(trials))
    assert hits / trials <= 0.05 + 2 * math.sqrt(0.05 * 0.95 / trials)


def test_seeds_needed_is_for_the_sign_flip_test_not_the_t_formula():
    """A measured gap of 1.5 sd among 18 claims: the t formula (the code this replaces) said 11;
    simulated through the sign-flip test with Holm, 11 seeds resolve it about two times in three, and
    80% takes 13 (the issue's independent check)."""
    z = np.array([-1.5, -1.0, -0.5, -0.2, 0.2, 0.5, 1.0, 1.5])
    diffs = 1.5 + z / z.std(ddof=1)  # mean 1.5, sd exactly 1
    need = power.seeds_needed(diffs.tolist(), 18)
    assert need["estimate"] in (12, 13, 14)
    assert need["range"][0] <= need["estimate"] <= need["range"][1]
    assert power.power(11, 1.5, 18) < 0.75


def test_the_gap_a_preset_resolves_is_at_80_percent_power_not_a_critical_value():
    gap = power.gap_at(12, 10)
    assert power.power(12, gap + 1e-9, 10) >= 0.80 and power.power(12, gap * 0.8, 10) < 0.80
    assert power.gap_at(8, 10) is None  # 8 seeds cannot resolve 10 claims at all


# -- the paired difference's size ----------------------------------------------------------------

def test_the_hodges_lehmann_interval_by_hand_and_its_coverage():
    # n = 3: Walsh averages of (1, 2, 4): 1, 1.5, 2.5, 2, 3, 4 -> sorted 1, 1.5, 2, 2.5, 3, 4, median
    # 2.25. The signed-rank null at n = 3 puts 1/8 on W+ = 0: k = 1 gives [1, 4] at 1 - 2/8 = 75%.
    got = evidence.shift_interval([4.0, 1.0, 2.0])
    assert got["shift"] == 2.25 and got["interval"] == [1.0, 4.0] and got["coverage"] == 0.75
    assert evidence.shift_interval([1.0, 2.0])["interval"] is None
    rng = np.random.default_rng(3)
    for n in (5, 8, 12):
        level = evidence.shift_interval(list(range(1, n + 1)))["coverage"]
        covered = 0
        for _ in range(1500):
            lo, hi = evidence.shift_interval(rng.standard_t(5, n).tolist())["interval"]  # symmetric about 0
            covered += lo <= 0.0 <= hi
        assert covered / 1500 >= level - 3 * math.sqrt(level * (1 - level) / 1500), (n, covered / 1500, level)


def test_pairs_pair_by_seed_whatever_order_the_seeds_come_in_and_skip_a_missing_seed():
    better = {3: 1.0, 0: 2.0, 2: 5.0, 1: 4.0}
    worse = {0: 2.5, 1: 4.1, 2: 7.0}  # seed 3 missing
    got = evidence.paired(better, worse)
    assert got["seeds"] == [0, 1, 2] and got["diffs"] == pytest.approx([0.5, 0.1, 2.0])
    # Planted: pairing by position would give 2.5 - 1.0, 4.1 - 2.0, 7.0 - 5.0.
    assert got["mean"] == pytest.approx((0.5 + 0.1 + 2.0) / 3)


# -- the family decides; everything else is exploratory -----------------------------------------

E8 = (0.0, 0.5, -0.5, 0.2, -0.2, 0.3, -0.3, 0.1)


def test_claims_are_the_family_and_other_pairs_are_exploratory():
    """Three rows at 8 seeds, one claim (b < c). Alone in its family the claim's p 2/256 is its Holm
    p and resolves; the pair a < b, with a paper figure but no claim, is exploratory: its raw p is
    printed, it is never adjusted, resolved or counted. Planted: with every pair as the family (the
    old rule) the same claim's Holm p is 3 x 2/256."""
    vals = {"a": {s: 1 + e for s, e in enumerate(E8)}, "b": {s: 2 + e / 2 for s, e in enumerate(E8)},
            "c": {s: 4 + e / 3 for s, e in enumerate(E8)}}
    rows = _rows(vals, paper={"a": 1.0, "b": 2.0, "c": 3.0})
    got = verdicts.compare(rows, _family([("b", "c")]))
    (claim,) = got["claims"]
    assert claim["p"] == claim["p_holm"] == 2 / 256 and claim["verdict"] == "in order"
    assert (got["claims_in_order"], got["claims_unresolved"], got["claims_reversed"]) == (1, 0, 0)
    assert sorted((p["better"], p["worse"]) for p in got["exploratory"]) == [("a", "b"), ("a", "c")]
    assert all(p["verdict"] == "exploratory" and p["p_holm"] is None and not p["resolved"] for p in got["exploratory"])
    every = verdicts.compare(rows, Family(declared=False))
    assert {(p["better"], p["worse"]): p["p_holm"] for p in every["claims"]}[("b", "c")] == pytest.approx(3 * 2 / 256)


def test_a_claim_on_training_error_pairs_the_training_figures():
    vals = {"id": {s: 5.0 for s in range(8)}, "conv": {s: 5.0 for s in range(8)}}
    rows = _rows(vals)
    for r, train in zip(rows, (1.0, 3.0)):
        r["values"]["train_error"] = {s: train + E8[s] / 10 for s in range(8)}
    got = verdicts.compare(rows, _family([("id", "conv")], metric="train_error"))
    (claim,) = got["claims"]
    assert claim["metric"] == "train_error" and claim["mean"] == pytest.approx(2.0) and claim["verdict"] == "in order"


def test_kendall_per_group_by_hand_with_failing_rows_left_out():
    """The activation study's shape: two nets of five units. Net 110: ours in the paper's order
    except the top two swapped: one discordant pair of 10, tau (9 - 1) / 10 = 0.8; one-sided p: the
    orders of 5 with at most one inversion, 1 + 4 of 120. Net 164: one unit fails (left out), the
    other four in the paper's order, tau 1, p 1/24. Pooled over both nets (the planted bug) the tau
    is another number."""
    paper110 = {"a110": 6.61, "b110": 8.17, "c110": 7.84, "d110": 6.71, "e110": 6.37}
    paper164 = {"a164": 5.93, "b164": 6.50, "c164": 6.14, "d164": 5.91, "e164": 5.46}
    ours = {"a110": 2.0, "b110": 5.0, "c110": 4.0, "d110": 3.0, "e110": 2.5,  # e and a swapped
            "a164": 3.0, "b164": 90.0, "c164": 4.0, "d164": 2.5, "e164": 2.0}
    vals = {k: {s: v for s in range(3)} for k, v in ours.items()}
    groups = {k: ("110" if k.endswith("110") else "164") for k in ours}
    rows = _rows(vals, paper={**paper110, **paper164}, groups=groups, fail={"b164": True})
    got = verdicts.compare(rows, _family([("e110", "a110")]))
    by = {o["group"]: o for o in got["orders"]}
    assert by["110"]["kendall_tau"] == pytest.approx(0.8) and by["110"]["p_value"] == pytest.approx(5 / 120)
    assert by["110"]["left_out"] == 0
    assert by["164"]["kendall_tau"] == pytest.approx(1.0) and by["164"]["p_value"] == pytest.approx(1 / 24)
    assert by["164"]["left_out"] == 1 and by["164"]["left_out_rows"] == ["b164"]
    assert got["kendall_tau"] is None  # never pooled across groups
    pooled = evidence.kendall([ours[k] for k in ours if k != "b164"], [{**paper110, **paper164}[k] for k in ours if k != "b164"])
    assert pooled["kendall_tau"] != pytest.approx(0.8)


# -- through the command line --------------------------------------------------------------------

CLAIMS = """
claims:
  - {better: identity, worse: plain, source: "made up: identity below plain"}
"""


def test_a_claim_to_a_missing_label_is_one_line_exit_2_and_nothing_written(in_tmp):
    (in_tmp / "s.yaml").write_text(TINY + "claims:\n  - {better: identity, worse: plian, source: typo}\n")
    r = invoke("ablate", in_tmp / "s.yaml", "--out", "res")
    assert r.exit_code == 2
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and "no row 'plian'" in lines[0] and "identity; plain" in lines[0], r.stderr
    assert "Traceback" not in r.output and not (in_tmp / "res").exists()
    (in_tmp / "m.yaml").write_text(TINY + "claims:\n  - {better: identity, worse: plain, metric: val_error, source: x}\n")
    r = invoke("ablate", in_tmp / "m.yaml", "--out", "res")
    assert r.exit_code == 2 and "the study reports test_error" in r.stderr and not (in_tmp / "res").exists()


def test_the_recorded_family_decides_after_the_study_file_changes(in_tmp):
    path = in_tmp / "s.yaml"
    path.write_text(TINY + CLAIMS)
    r = invoke("ablate", path, "--out", "res", "--json")
    assert r.exit_code == 0, r.stderr
    recorded = json.loads((in_tmp / "res" / "claims.json").read_text())
    assert recorded["size"] == 1 and recorded["claims"][0]["worse"] == "plain" and len(recorded["file_sha256"]) == 64
    study = [json.loads(x) for x in r.stdout.splitlines()][-1]
    assert study["family"]["declared"] is True and study["family"]["size"] == 1
    assert [(c["better"], c["worse"]) for c in study["claims"]] == [("identity", "plain")]
    assert "interval" in study["claims"][0] and "shift" in study["claims"][0]
    # Edited after looking: the claim turned around. The report still decides by the recorded one,
    # and says in one line that the file differs.
    path.write_text(TINY + "claims:\n  - {better: plain, worse: identity, source: edited}\n")
    rep = invoke("report", "res", "--json")
    assert rep.exit_code == 0, rep.stderr
    again = [json.loads(x) for x in rep.stdout.splitlines()][-1]
    assert [(c["better"], c["worse"]) for c in again["claims"]] == [("identity", "plain")]
    notes = [line for line in rep.stderr.splitlines() if "differ from those recorded" in line]
    assert len(notes) == 1
    # A rerun of the sweep keeps the recorded family too (never rewritten).
    r2 = invoke("ablate", path, "--out", "res", "--json")
    assert r2.exit_code == 0 and "differ from those recorded" in r2.stderr
    assert json.loads((in_tmp / "res" / "claims.json").read_text()) == recorded


def test_shipped_quick_presets_plan_the_seeds_their_families_need():
    """`resnet ablate STUDY --preset quick --list` plans at least the seeds power.py computes for its
    declared family at its declared effect; the paper presets' 5 seeds cannot resolve theirs."""
    for name in ("shortcut", "projection", "zero-init", "normalisation", "activation", "activation-modern",
                 "depth", "gate-bias"):
        quick = plan_mod.plan(name, "quick")
        assert quick.family.declared and quick.family.size >= 1
        need = power.seeds_for(quick.family.effect / math.sqrt(2), quick.family.size)
        assert len(quick.seeds) >= need, (name, len(quick.seeds), need)
    r = invoke("ablate", "shortcut", "--preset", "paper", "--list")
    assert r.exit_code == 0
    assert "5 seeds cannot resolve any of 15 claims at 5% after Holm" in r.stderr


def test_every_shipped_claim_names_rows_of_its_study():
    from resnet_cli.sweep import study_file

    for name in study_file.shipped():
        for preset in ("paper", "quick"):
            plan = plan_mod.plan(name, preset)  # a bad label would raise
            labels = {row.label for row in plan.rows}
            assert all({m.better, m.worse} <= labels for m in plan.family.members)


def test_a_degrade_grid_declares_he_2016a_claims_in_training_and_test_error():
    """For depths 8 and 26, by hand from He 2016a sec. 4.1: training error, plain-26 above plain-8,
    residual-26 below plain-26 and below residual-8; test error, plain-26 above plain-8 and
    residual-26 below plain-26. Five claims on error % paired by seed; the 8-layer twins are
    "comparably accurate" (listed)."""
    from resnet_cli.results import degrade

    fam = degrade.he2016a_claims([26, 8])
    assert [(m.better, m.worse, m.metric) for m in fam.members] == [
        ("plain-8", "plain-26", "train_error"), ("residual-26", "plain-26", "train_error"),
        ("residual-26", "residual-8", "train_error"), ("plain-8", "plain-26", "test_error"),
        ("residual-26", "plain-26", "test_error")]

    def rec(net, depth, seed, acc):
        return {"net": net, "depth": depth, "seed": seed, "train_acc": acc, "test_acc": acc - 0.01}

    # plain-26 trains and tests worse than plain-8 at every one of 10 seeds: p 2/1024 each, Holm over 2.
    recs = [rec("plain", 8, s, 0.99) for s in range(10)] + [rec("plain", 26, s, 0.5 + s / 100) for s in range(10)]
    got = degrade.claims(recs)
    # the residual twins are absent (--nets plain): their claims drop out
    assert [(c["better"], c["worse"], c["metric"]) for c in got["claims"]] == [
        ("plain-8", "plain-26", "train_error"), ("plain-8", "plain-26", "test_error")]
    for claim in got["claims"]:
        assert claim["p"] == 2 / 1024 and claim["p_holm"] == 4 / 1024 and claim["verdict"] == "in order"


# -- the Monte Carlo branches and the edges, against independent computations ----------------------

def test_sign_flip_edges_and_its_monte_carlo_branch_against_enumeration():
    assert evidence.signflip([])["p"] is None
    assert evidence.signflip([2.5])["p"] == 1.0 and evidence.signflip([2.5])["exact"] is True  # +-2.5: both reach
    # 20 seeds: the tool draws 20,000 sign patterns; the exact p enumerates all 2^20 here (sums of
    # the two halves' 2^10 subsets), and the Monte Carlo p must sit within 4 of its standard errors.
    rng = np.random.default_rng(4)
    d = rng.normal(0.45, 1.0, 20)
    half = [np.array([sum(s * x for s, x in zip(signs, part)) for signs in itertools.product((1, -1), repeat=10)])
            for part in (d[:10], d[10:])]
    sums = np.abs(half[0][:, None] + half[1][None, :]).ravel()
    exact = float(np.mean(sums >= abs(d.sum()) * (1 - 1e-12)))
    got = evidence.signflip(d.tolist())
    assert got["exact"] is False and 0.001 < exact < 0.5
    assert abs(got["p"] - exact) <= 4 * got["p_se"] and got["p_se"] == pytest.approx(
        math.sqrt(got["p"] * (1 - got["p"]) / evidence.RESAMPLES))


def test_kendall_monte_carlo_branch_against_scipys_exact_p():
    from scipy import stats

    ours = [1, 3, 2, 4, 6, 5, 7, 9, 8, 10]  # 10 rows: past the 8 that are enumerated
    got = evidence.kendall(ours, list(range(1, 11)))
    want = stats.kendalltau(ours, list(range(1, 11)), alternative="greater", method="exact")
    assert got["p_exact"] is False and got["kendall_tau"] == pytest.approx(want.statistic)
    se = math.sqrt(want.pvalue * (1 - want.pvalue) / evidence.RESAMPLES) + 1 / evidence.RESAMPLES
    assert abs(got["p_value"] - want.pvalue) <= 4 * se
    assert evidence.kendall([1.0, 2.0], [1.0, 2.0])["kendall_tau"] is None  # fewer than 3 rows: no order
    assert evidence.kendall([1.0, 1.0, 1.0], [1.0, 2.0, 3.0])["reason"] == "all values tied: no order"


def test_the_shift_interval_is_where_the_signed_rank_test_does_not_reject():
    """The exact interval at coverage c holds the shifts the Wilcoxon signed-rank test (scipy, exact)
    does not reject at 1 - c: its ends are the first shifts it rejects, just beyond them."""
    from scipy import stats

    d = [0.8, -0.3, 1.9, 1.1, 0.4, 2.6, -0.9, 1.4, 0.2, 1.7, 0.9, 1.2]
    got = evidence.shift_interval(d)
    lo, hi = got["interval"]
    alpha = 1 - got["coverage"]
    assert got["coverage"] >= 0.95 and got["shift"] == pytest.approx(
        float(np.median([(a + b) / 2 for i, a in enumerate(d) for b in d[i:]])))

    def p(c):
        return stats.wilcoxon([x - c for x in d], alternative="two-sided", method="exact").pvalue

    assert p((lo + hi) / 2) > alpha and p(lo + 1e-9) > alpha and p(hi - 1e-9) > alpha
    assert p(lo - 1e-6) <= alpha + 1e-12 and p(hi + 1e-6) <= alpha + 1e-12


def test_a_rows_statistics_at_their_edges_by_hand():
    """None, NaN and booleans are not values; n = 9 takes k = 2: 1 - 2 (1 + 9) / 2^9 = 0.9609 holds 95%,
    k = 3 (1 - 2 x 46 / 512 = 0.82) does not; labels are floored so none promises more."""
    got = evidence.describe([3.0, None, float("nan"), True, 1.0])
    assert (got["n"], got["median"], got["interval"], got["interval_reason"]) == (2, 2.0, None, "n < 3: no interval")
    assert got["std"] == pytest.approx(math.sqrt(2))
    assert evidence.median_interval([5, 1, 3, 2, 4, 6, 7, 8, 9]) == (2.0, 8.0, pytest.approx(1 - 20 / 512))
    assert evidence.median_interval([1.0, 2.0]) is None
    assert [evidence.coverage_label(c) for c in (None, 0.9375, 0.99609375, 0.75)] == ["-", "93.7%", "99.6%", "75%"]
    assert evidence.interval_str(None) == "n < 3: no interval"
    assert evidence.interval_str([1, 2.345], 0.75) == "[1.00, 2.35] 75%" and evidence.interval_str([1, 2], None, 1) == "[1.0, 2.0]"
    assert evidence.smallest_p(0) == 1.0 and evidence.seeds_to_resolve(0) == evidence.seeds_to_resolve(1) == 6
