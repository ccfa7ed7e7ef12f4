"""results/verdicts.py on hand-made rows: which pairs the paper's figures give (within a group, the
lower figure better, ties and doubly failing pairs left out), what a pair carries (its rows' indices
and group, its own family size), each claim's verdict by the sign of its difference, the family's
record, a single group's tau at the top level, and the power line's composition. verdicts.py's own
tests for `make mutation`, beside test_claims.py."""

from __future__ import annotations

import statistics

import pytest

from resnet_cli.results import power, verdicts
from resnet_cli.sweep.family import Family, Member, Note


def row(label, index, errors, paper=None, group=None, fail=False):
    values = {"error": dict(enumerate(errors)), "train_loss": {}, "train_error": {}}
    median = statistics.median(errors) if errors else None
    return {"row": label, "index": index, "group": group, "paper": paper, "median": median, "fail": fail,
            "values": values}


def test_the_papers_pairs_lower_figure_first_within_a_group():
    rows = [row("B", 0, [2.0], paper=6.0, group="g"), row("A", 1, [1.0], paper=5.0, group="g"),
            row("C", 2, [1.0], paper=4.0, group="h"),  # another group: no pair with A or B
            row("D", 3, [1.0], paper=6.0, group="g"),  # B's figure: no pair with B
            row("E", 4, [90.0], paper=7.0, group="g", fail=True), row("F", 5, [90.0], paper=8.0, group="g", fail=True),
            row("U", 6, [], paper=9.0, group="g"),  # no measured seed
            row("N", 7, [1.0], paper="-", group="g")]  # no number
    got = [(m.better, m.worse, m.metric, m.source) for m in verdicts.paper_pairs(rows)]
    src = "the paper's figures"
    # In the rows' order, each row against those after it: B's pairs first, then A's, then D's.
    assert got == [("A", "B", "test_error", src), ("B", "E", "test_error", src), ("B", "F", "test_error", src),
                   ("A", "D", "test_error", src), ("A", "E", "test_error", src), ("A", "F", "test_error", src),
                   ("D", "E", "test_error", src), ("D", "F", "test_error", src)]
    assert verdicts._number(3) and verdicts._number(2.5) and not verdicts._number(True) and not verdicts._number("6")


def test_a_pair_carries_its_rows_indices_group_source_and_its_familys_size():
    by_label = {"A": row("A", 4, [1.0] * 8, group="g"), "B": row("B", 9, [2.0] * 8, group="g")}
    member = Member("A", "B", "test_error", "Table 2")
    alone = verdicts._pair(member, by_label, 1)
    assert (alone["better_index"], alone["worse_index"], alone["group"], alone["source"]) == (4, 9, "g", "Table 2")
    assert alone["n"] == 8 and alone["can_resolve"] is True  # 2/256 <= 0.05
    assert verdicts._pair(member, by_label, 20)["can_resolve"] is False  # 2/256 > 0.05 / 20
    missing = verdicts._pair(Member("A", "Z", "test_error", "x"), by_label, 1)  # a row not in the table
    assert (missing["better_index"], missing["worse_index"], missing["n"]) == (4, None, 0)
    gone = verdicts._pair(Member("Z", "B", "test_error", "x"), by_label, 1)
    assert (gone["better_index"], gone["group"], gone["n"]) == (None, None, 0)
    no_losses = verdicts._pair(Member("A", "B", "train_loss", "x"), {k: {**v, "values": {"error": {}}}
                                                                    for k, v in by_label.items()}, 1)
    assert no_losses["n"] == 0


def claim_rows(shift_c: float):
    """A, B, C with paper figures 5 < 6 < 7, 8 seeds; B = A + 1 on every seed; C = A + shift_c."""
    base = [1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0]
    return [row("A", 0, base, paper=5.0), row("B", 1, [x + 1 for x in base], paper=6.0),
            row("C", 2, [x + shift_c for x in base], paper=7.0)]


def test_each_claims_verdict_follows_the_sign_of_its_resolved_difference():
    family = Family(declared=True, members=(Member("A", "B", "test_error", "t"), Member("A", "C", "test_error", "t")))
    got = verdicts.compare(claim_rows(-1.0), family)  # C below A on every seed: the claim A < C reversed
    verdict = {(c["better"], c["worse"]): c["verdict"] for c in got["claims"]}
    assert verdict == {("A", "B"): "in order", ("A", "C"): "reversed"}
    assert (got["claims_in_order"], got["claims_reversed"], got["claims_unresolved"]) == (1, 1, 0)
    assert all(c["seeds_needed"] == power.seeds_needed(c["diffs"], 2) for c in got["claims"])
    tied = verdicts.compare(claim_rows(0.0), family)  # C equal to A: p = 1
    assert {(c["better"], c["worse"]): c["verdict"] for c in tied["claims"]} == {("A", "B"): "in order",
                                                                                 ("A", "C"): "unresolved"}
    assert tied["claims_unresolved"] == 1
    (explore,) = got["exploratory"]  # B < C, with paper figures, outside the declared family
    assert (explore["better"], explore["worse"], explore["verdict"]) == ("B", "C", "exploratory")
    assert explore["p_holm"] is None and explore["resolved"] is False and explore["can_resolve"] is True  # alone


def test_half_a_point_at_every_seed_is_resolved_by_its_sign_not_its_size():
    family = Family(declared=True, members=(Member("A", "C", "test_error", "t"),))
    rows = claim_rows(0.5)
    assert verdicts.compare(rows, family)["claims"][0]["verdict"] == "in order"
    rows = claim_rows(-0.5)
    assert verdicts.compare(rows, family)["claims"][0]["verdict"] == "reversed"


def test_the_family_record_and_one_groups_tau_at_the_top_level():
    family = Family(declared=True, members=(Member("A", "B", "test_error", "t"),), effect=1.5, file_sha256="abc",
                    recorded=True, note="why", seeds=(0, 1), listed=(Note(("A", "C"), "says", "why not"),))
    got = verdicts.compare(claim_rows(2.0), family)
    assert got["family"] == {"declared": True, "size": 1, "effect": 1.5, "recorded": True, "file_sha256": "abc",
                             "note": "why", "seeds": [0, 1],
                             "listed": [{"rows": ["A", "C"], "says": "says", "reason": "why not"}]}
    (order,) = got["orders"]
    assert {k: got[k] for k in ("kendall_tau", "p_value", "rows", "p_exact")} == {
        k: order[k] for k in ("kendall_tau", "p_value", "rows", "p_exact")}
    assert got["kendall_tau"] == 1.0 and got["rows"] == 3 and got["reason"] is None
    two = [row("A", 0, [1.0], paper=5.0, group="g"), row("B", 1, [2.0], paper=6.0, group="g"),
           row("C", 2, [1.0], paper=5.0, group="h"), row("D", 3, [2.0], paper=6.0, group="h")]
    grouped = verdicts.compare(two, Family(declared=False))
    assert len(grouped["orders"]) == 2 and grouped["kendall_tau"] is None and grouped["reason"] is None
    short = verdicts.compare(two[:2], Family(declared=False))
    assert short["reason"] == "2 rows with a paper figure and a median: no order to test" and short["rows"] == 2


def test_the_power_line_names_the_familys_kind_and_the_gap_at_the_median_sd():
    declared = Family(declared=True, members=(Member("A", "B", "test_error", "t"), Member("A", "C", "test_error", "t")))
    got = verdicts.compare(claim_rows(3.0), declared)
    assert got["power"].startswith(power.plan_line(8, 2, declared.effect, "claims"))
    assert verdicts.compare(claim_rows(3.0), Family(declared=False))["power"].startswith(
        power.plan_line(8, 3, 2.0, "pairs with a paper figure"))


def test_the_power_line_from_hand_made_claims():
    claims = [{"n": 0, "sd": None}, {"n": 10, "sd": 2.0}, {"n": 12, "sd": 4.0}, {"n": 12, "sd": 0.0}]
    gap = power.gap_at(10, 3)
    assert gap is not None
    expected = (power.plan_line(10, 3, 2.0, "claims") + "; at the median sd of the differences (3 points) 10 seeds "
                f"resolve a gap of {gap * 3.0:.2g} points with 80% power")
    assert verdicts.power_line(claims, 3, 2.0, "claims") == expected  # sd 0 left out of the median
    assert verdicts.power_line([{"n": 0, "sd": None}], 3, 2.0, "claims") == ""
    assert verdicts.power_line([{"n": 5, "sd": None}], 1, 2.0, "claims") == power.plan_line(5, 1, 2.0, "claims")


@pytest.mark.parametrize("member_sd", [None])
def test_a_claim_without_an_sd_gives_the_plan_alone(member_sd):
    claims = [{"n": 9, "sd": member_sd}]
    assert verdicts.power_line(claims, 2, 2.0, "claims") == power.plan_line(9, 2, 2.0, "claims")


def test_unresolved_claims_stay_unresolved_with_their_familys_seed_count():
    """C a little below A at four seeds and a little above at four (mean below 0, p large): unresolved,
    not reversed. D a little above A at most seeds, unresolved: its seeds-needed figure is that of
    the family of 3, not of one claim alone."""
    base = [1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0]
    shift = lambda ds: [x + d for x, d in zip(base, ds)]  # noqa: E731
    rows = [row("A", 0, base, paper=5.0), row("B", 1, shift([1.0] * 8), paper=6.0),
            row("C", 2, shift([-0.3, 0.1, -0.3, 0.1, -0.3, 0.1, -0.3, 0.2]), paper=7.0),
            row("D", 3, shift([0.5, -0.2, 0.5, -0.2, 0.5, 0.3, 0.4, -0.1]), paper=8.0)]
    family = Family(declared=True, members=tuple(Member("A", w, "test_error", "t") for w in "BCD"))
    claims = {c["worse"]: c for c in verdicts.compare(rows, family)["claims"]}
    assert claims["C"]["mean"] < 0 and claims["C"]["verdict"] == "unresolved"
    d = claims["D"]
    assert d["mean"] > 0 and d["verdict"] == "unresolved"
    assert d["seeds_needed"] == power.seeds_needed(d["diffs"], 3) is not None
    assert d["seeds_needed"] != power.seeds_needed(d["diffs"], 1)


def test_an_exploratory_pair_is_its_own_family_of_one():
    """Six seeds of one sign reach 2/64 <= 0.05 alone (a family of one), not 0.05 / 2."""
    base = [1.0, 2.0, 3.0, 4.0, 5.0, 6.0]
    rows = [row("A", 0, base, paper=5.0), row("B", 1, [x + 1 for x in base], paper=6.0),
            row("C", 2, [x + 2 for x in base], paper=7.0)]
    got = verdicts.compare(rows, Family(declared=True, members=(Member("A", "B", "test_error", "t"),)))
    assert [(p["better"], p["worse"], p["can_resolve"]) for p in got["exploratory"]] == [("A", "C", True),
                                                                                          ("B", "C", True)]


@pytest.mark.parametrize("pair, text", [
    ({"shift": None}, "-"),
    ({"shift": 1.234, "interval": None}, "+1.23"),
    ({"shift": -0.5, "interval": [-1.25, 0.4], "coverage": 0.9375}, "-0.50 [-1.25, +0.40] 93.7%"),
])
def test_a_difference_as_the_tables_print_it(pair, text):
    assert verdicts.shift_str(pair) == text
    assert verdicts.shift_str({"shift": 1.0, "interval": [0.5, 1.5], "coverage": 0.96}, digits=1) == "+1.0 [+0.5, +1.5] 96%"
