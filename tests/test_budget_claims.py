"""A study's declared claims at each budget of `resnet ablate --budgets` (results/budget_claims.py):
runs whose error depends on the budget, written as the trainer would record them, decided by hand
(the exact sign-flip p of 8 agreeing seeds is 2/2^8; Holm over the whole family of 2 at every
budget), the pattern word, and the 1x runs reused by a real sweep."""

import json
from pathlib import Path

import pytest
import yaml

from resnet_cli.results import budget_claims as BC
from resnet_cli.results import report
from resnet_cli.results.records import SeedResult
from resnet_cli.sweep.family import Family, Member

from invoking import invoke

FAMILY = Family(declared=True, members=(Member("a", "b", "test_error", "s"), Member("c", "b", "test_error", "t")))
SEEDS = range(8)


def runs(errors: dict[tuple[str, int], float], budgets=(1, 2)) -> list:
    """Seed results as a sweep records them: row's error + seed / 100 at each budget, training loss
    the error / 100 (what a stub trainer whose error depends on the budget would leave)."""
    out = []
    for b in budgets:
        for i, row in enumerate(("a", "b", "c"), start=1):
            if (row, b) not in errors:
                continue
            for s in SEEDS:
                err = errors[(row, b)] + s / 100
                out.append(SeedResult(path=Path(f"r/{b}/{row}{s}"), study="st", title="St", preset="quick",
                                      paper_metric=None, index=i, row=row, seed=s, paper=None, status="completed",
                                      test_error=err, train_loss=err / 100, budget=b))
    return out


def decided(errors, budgets=(1, 2)):
    return BC.decide(report.aggregate(runs(errors, budgets)), FAMILY)


def test_a_claim_whose_better_row_catches_up_at_2x_holds_with_budget():
    # a behind b at 1x (5 against 3: reversed at every seed), ahead at 2x (1 against 3); c behind b at both.
    got = decided({("a", 1): 5.0, ("b", 1): 3.0, ("c", 1): 6.0, ("a", 2): 1.0, ("b", 2): 3.0, ("c", 2): 6.0})
    a, c = got
    p = 2 / 2 ** 8
    assert (a["at"]["1x"]["verdict"], a["at"]["2x"]["verdict"], a["pattern"]) == ("reversed", "in order",
                                                                                  "holds with budget")
    assert a["at"]["1x"]["p"] == pytest.approx(p) and a["at"]["1x"]["p_holm"] == pytest.approx(2 * p)
    assert a["at"]["2x"]["difference"] == pytest.approx(2.0) and a["at"]["1x"]["difference"] == pytest.approx(-2.0)
    # the training loss beside each verdict: the two rows' medians (error / 100 at seed 3.5 on average)
    assert a["at"]["1x"]["train_loss_better"] == pytest.approx(0.05035) and a["at"]["2x"]["train_loss_better"] == \
        pytest.approx(0.01035)
    assert a["at"]["2x"]["train_loss_worse"] == pytest.approx(0.03035)
    assert (c["at"]["1x"]["verdict"], c["at"]["2x"]["verdict"], c["pattern"]) == ("reversed", "reversed",
                                                                                  "reversed at every budget")


def test_a_claim_not_retrained_counts_with_p_1_so_holm_keeps_the_whole_family():
    # --budget-rows: only a and b at 2x. a < b is decided over m = 2 still: Holm 2 x 2/256, not 2/256.
    got = decided({("a", 1): 5.0, ("b", 1): 3.0, ("c", 1): 2.0, ("a", 2): 1.0, ("b", 2): 3.0})
    a, c = got
    assert a["at"]["2x"]["p_holm"] == pytest.approx(2 * 2 / 2 ** 8)
    assert (c["at"]["1x"]["verdict"], c["at"]["2x"]["verdict"], c["pattern"]) == ("in order", "not run", "holds")
    assert c["at"]["2x"]["p_holm"] is None and c["at"]["2x"]["n"] == 0


@pytest.mark.parametrize("verdicts, word", [
    (["in order", "in order", "in order"], "holds"),
    (["unresolved", "unresolved", "in order"], "holds with budget"),
    (["reversed", "in order", "in order"], "holds with budget"),
    (["reversed", "reversed"], "reversed at every budget"),
    (["unresolved", "unresolved"], "unresolved"),
    (["in order", "unresolved"], "mixed"),
    (["unresolved", "reversed", "reversed"], "reversed with budget"),
    (["in order", "reversed"], "mixed"),
    (["in order", "not run", "not run"], "holds"),
    (["not run", "not run"], "unresolved"),
])
def test_the_pattern_of_each_sequence_of_verdicts(verdicts, word):
    assert BC.pattern(verdicts) == word


def test_flat_gives_one_line_per_claim_and_budget_and_markdown_one_per_claim():
    got = decided({("a", 1): 5.0, ("b", 1): 3.0, ("c", 1): 6.0, ("a", 2): 1.0, ("b", 2): 3.0, ("c", 2): 6.0})
    lines = BC.flat(got)
    assert [(r["better"], r["budget"], r["verdict"], r["pattern"]) for r in lines] == [
        ("a", 1, "reversed", "holds with budget"), ("a", 2, "in order", "holds with budget"),
        ("c", 1, "reversed", "reversed at every budget"), ("c", 2, "reversed", "reversed at every budget")]
    md = BC.markdown(got).splitlines()
    assert md[0] == "| claim (better < worse) | 1x | 2x | pattern |"
    assert md[2].startswith("| a < b | reversed -2.00 (Holm 0.016); loss 0.0504 / 0.0303 | in order +2.00")
    assert md[2].endswith("| **holds with budget** |")


@pytest.mark.slow  # ten short runs, three sweeps
def test_budget_rows_retrains_only_the_claims_rows_and_reuses_the_1x_runs(in_tmp):
    """A tiny study of three rows and one claim between the first two: with --budget-rows
    not-in-order a 2x budget retrains those two rows where their claim is not in order at 1x (two
    seeds resolve nothing), never the third, and never a 1x run again."""
    Path("s.yaml").write_text(yaml.safe_dump({
        "base": "digits/residual8", "seeds": [0, 1], "fail_above": 50.0,
        "spec": {"optim": {"epochs": None, "iters": 2, "milestones": None}, "data": {"train_subset": 64}},
        "rows": [{"label": "a"}, {"label": "b", "overrides": {"optim.lr": 0.5}},
                 {"label": "c", "overrides": {"optim.lr": 0.2}}],
        "claims": [{"better": "a", "worse": "b", "source": "made up"}]}), encoding="utf-8")
    early = invoke("ablate", "s.yaml", "--out", "res", "--budgets", "1,2", "--budget-rows", "not-in-order")
    assert early.exit_code == 2 and "6 of the study's 6 runs at 1x are not finished" in early.output
    assert invoke("ablate", "s.yaml", "--out", "res", "--json").exit_code == 0
    before = {p: p.stat().st_mtime_ns for p in Path("res").glob("0*/summary.json")}
    res = invoke("ablate", "s.yaml", "--out", "res", "--budgets", "1,2", "--budget-rows", "not-in-order", "--json")
    assert res.exit_code == 0, res.output
    assert "--budget-rows not-in-order: 2 of 3 rows retrained beyond 1x (a; b)" in res.stderr
    assert sorted(p.name for p in Path("res/budget-2x").iterdir()) == ["01-a-s0", "01-a-s1", "02-b-s0", "02-b-s1"]
    assert {p: p.stat().st_mtime_ns for p in Path("res").glob("0*/summary.json")} == before  # 1x: reused
    recs = [json.loads(line) for line in res.stdout.splitlines()]
    (claim,) = [r for r in recs if r["event"] == "budget_claim"]
    assert (claim["better"], claim["worse"], claim["budgets"], claim["at"]["2x"]["n"]) == ("a", "b", [1, 2], 2)
    assert claim["pattern"] == "unresolved"  # two seeds: the smallest p is 0.5
    assert {r["row"] for r in recs if r["event"] == "budget_row"} == {"a", "b", "c"}
