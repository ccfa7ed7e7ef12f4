"""sweep/budgets.py value by value on hand-made inputs: the budget table built from per-budget study
tables (each row's median, n, verdict, and the iterations to the threshold read from hand-written
metrics files), its JSON record and its terminal table word for word, the parser's and the verdict's
edges. The commands that train such studies are tests/test_budgets.py's."""

import io
import json
from pathlib import Path
from types import SimpleNamespace

import pytest
from rich.console import Console

from resnet_cli.errors import UserError
from resnet_cli.sweep import budgets


def run(tmp: Path, name: str, curve: dict[int, float], status: str = "completed"):
    """A run directory holding only what the budget table reads: its epochs' test errors."""
    path = tmp / name
    path.mkdir()
    lines = [{"event": "epoch", "epoch": i + 1, "iter": it, "test_error": err} for i, (it, err) in enumerate(curve.items())]
    lines.insert(1, {"event": "epoch", "epoch": 0, "iter": 5, "test_error": None})  # no evaluation at this one
    (path / "metrics.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))
    return SimpleNamespace(path=path, status=status)


def row(index, label, errors, runs=()):
    return SimpleNamespace(index=index, row=label, errors=list(errors), n=len(errors), runs=list(runs))


def table(budget, rows, fail_above=20.0, study="shortcut", preset="quick"):
    return SimpleNamespace(study=study, preset=preset, budget=budget, title="He 2016b Table 1", fail_above=fail_above,
                           rows=rows)


def test_the_table_gives_each_rows_median_n_verdict_and_iterations_to_the_threshold(tmp_path):
    # Row 1 trains at 1x: median of 12, 18, 30 is 18. Its seeds' curves reach 20% at iteration 20 by
    # their median (25, 19, 19 -> 19); at 10 the median is 40. A failed seed's curve is left out.
    fast = [run(tmp_path, "a", {10: 40.0, 20: 25.0, 30: 12.0}), run(tmp_path, "b", {10: 30.0, 20: 19.0, 30: 18.0}),
            run(tmp_path, "c", {10: 50.0, 20: 19.0, 30: 30.0}), run(tmp_path, "d", {10: 0.0}, status="failed")]
    # Row 2 is above 20% at 1x (median 35) and under at 2x (median 15): slow; its 2x seeds reach it at 40.
    slow2 = [run(tmp_path, "e", {20: 60.0, 40: 15.0, 60: 14.0}), run(tmp_path, "f", {20: 50.0, 40: 19.0, 60: 16.0})]
    got = budgets.build([
        table(2, [row(2, "slow one", [14.0, 16.0], slow2), row(1, "fast one", [12.0, 30.0], fast[:2])]),
        table(1, [row(1, "fast one", [12.0, 18.0, 30.0], fast), row(2, "slow one", [30.0, 40.0])]),
        table(1, [row(1, "other study", [5.0])], study="depth"),
    ])
    assert [(t.study, t.budgets, t.threshold) for t in got] == [("shortcut", [1, 2], 20.0), ("depth", [1], 20.0)]
    fast_row, slow_row = got[0].rows  # in row order, whatever order the tables came in
    assert (fast_row.index, fast_row.row, fast_row.errors, fast_row.n) == (1, "fast one", {1: 18.0, 2: 21.0}, {1: 3, 2: 2})
    assert (fast_row.verdict, fast_row.iters_to, fast_row.budget_to) == ("trains", 20, 1)
    assert (slow_row.errors, slow_row.n, slow_row.verdict) == ({1: 35.0, 2: 15.0}, {1: 2, 2: 2}, "slow")
    assert (slow_row.iters_to, slow_row.budget_to) == (40, 2)
    assert budgets.row_json(got[0], slow_row) == {
        "event": "budget_row", "study": "shortcut", "preset": "quick", "index": 2, "row": "slow one", "budgets": [1, 2],
        "test_error_median": {"1x": 35.0, "2x": 15.0}, "n": {"1x": 2, "2x": 2}, "threshold": 20.0,
        "iters_to_threshold": 40, "budget_to_threshold": 2, "verdict": "slow"}


def test_a_row_missing_at_a_budget_is_none_and_the_threshold_can_be_given(tmp_path):
    # --threshold 10 overrides the study's 20: 15 and 14 stay above it, 1 point apart. The row absent at 2x is
    # unmeasured there (None, n 0), so its verdict is incomplete, and its JSON says None.
    got = budgets.build([table(1, [row(1, "a", [15.0]), row(2, "b", [12.0, 14.0])]),
                         table(2, [row(1, "a", [14.0])])], threshold=10.0)
    (t,) = got
    a, b = t.rows
    assert t.threshold == 10.0 and (a.verdict, b.verdict) == ("fails", "incomplete")
    assert (b.errors, b.n) == ({1: 13.0, 2: None}, {1: 2, 2: 0})
    assert budgets.row_json(t, b)["test_error_median"] == {"1x": 13.0, "2x": None}
    assert a.iters_to is None and a.budget_to is None
    # A study without a fail rule and no --threshold: no verdicts at all ("-"), every row still filled in.
    (plain,) = budgets.build([table(1, [row(1, "a", [15.0]), row(2, "b", [])], fail_above=None),
                              table(2, [row(1, "a", [9.0])], fail_above=None)])
    assert plain.threshold is None and [r.verdict for r in plain.rows] == ["-", "-"]
    assert [r.errors for r in plain.rows] == [{1: 15.0, 2: 9.0}, {1: None, 2: None}]  # b: no completed seed
    assert plain.title == "He 2016b Table 1"
    # The first table that states a rule gives it.
    (ruled,) = budgets.build([table(1, [row(1, "a", [15.0])], fail_above=None), table(2, [row(1, "a", [9.0])], 12.0)])
    assert ruled.threshold == 12.0 and ruled.rows[0].verdict == "slow"
    # a median exactly at the threshold has reached it; the JSON keeps four decimals
    curve = [run(tmp_path, "x", {10: 12.0}), run(tmp_path, "y", {10: 12.0})]
    (at,) = budgets.build([table(1, [row(1, "a", [13.123456], curve)], 13.123456)])
    assert (at.rows[0].budget_to, at.rows[0].iters_to, at.rows[0].verdict) == (1, 10, "trains")
    assert budgets.row_json(at, at.rows[0])["test_error_median"] == {"1x": 13.1235}


def test_iterations_to_the_threshold_use_the_evaluations_every_completed_seed_has(tmp_path):
    # Seed b never evaluated at 20, so 20 is not compared; at 30 the median of 22, 8 is 15 <= 16.
    a, b = run(tmp_path, "a", {10: 30.0, 20: 10.0, 30: 22.0}), run(tmp_path, "b", {10: 30.0, 30: 8.0})
    assert budgets.iters_to([a, b], 16.0) == 30
    assert budgets.iters_to([a, b], 15.0) == 30  # at or under
    assert budgets.iters_to([a, b], 14.9) is None
    assert budgets.iters_to([run(tmp_path, "c", {10: 1.0}, status="diverged")], 50.0) is None
    assert budgets._curve(a.path) == {10: 30.0, 20: 10.0, 30: 22.0}  # the record without a test error is skipped


def test_the_terminal_table_word_for_word(tmp_path):
    t = budgets.BudgetTable("shortcut", "He 2016b Table 1", "quick", 20.0, [1, 2, 4], [
        budgets.BudgetRow(1, "identity", {1: 12.5, 2: 10.0, 4: 9.0}, {}, 40, 1, "trains"),
        budgets.BudgetRow(2, "1x1 conv [b]", {1: 80.0, 2: None, 4: 70.0}, {}, None, None, "falling"),
        budgets.BudgetRow(12, "no rule", {1: 5.0, 2: 4.0, 4: 3.0}, {}, None, None, "-")])
    buf = io.StringIO()
    Console(file=buf, width=250, color_system=None).print(budgets.render(t))
    text = buf.getvalue()
    assert "He 2016b Table 1 [preset quick] at 1x, 2x, 4x the preset's length" in text
    caption = " ".join(line.strip() for line in text.splitlines()[-3:])
    assert ("median test error % over completed seeds at the last evaluation; trains: at or under 20% at 1x; slow: "
            "only at a larger budget; falling: at none, but the error fell by 2+ points with the budget; fails: at "
            "none, and it did not fall") in caption
    header = next(line for line in text.splitlines() if "row" in line and "#" in line)
    assert [c.strip() for c in header.replace("┃", "│").split("│") if c.strip()] == [
        "#", "row", "1x: test err %", "2x", "4x", "iters to ≤ 20%", "slow or fails"]
    cells = [[c.strip() for c in line.split("│") if c.strip()] for line in text.splitlines() if "identity" in line
             or "1x1 conv" in line]
    assert cells == [["1", "identity", "12.50", "10.00", "9.00", "40 (1x)", "trains"],
                     ["2", "1x1 conv [b]", "80.00", "-", "70.00", "-", "falling"]]
    last = next(line for line in text.splitlines() if "no rule" in line).split("│")
    assert last[1] == " 12 " and last[-2].strip() == "-"  # an unstyled verdict is printed as it is
    first = next(line for line in text.splitlines() if "identity" in line).split("│")
    assert first[1] == "  1 " and first[6].endswith(" 40 (1x) ") and first[6].startswith("   ")  # right-aligned
    # In colour: the verdicts in theirs, the header bold; numbers right-aligned ("-" under "80.00").
    buf = io.StringIO()
    Console(file=buf, width=250, color_system="standard", force_terminal=True).print(budgets.render(t))
    coloured = buf.getvalue()
    assert "\x1b[32mtrains\x1b[0m" in coloured and "\x1b[33mfalling\x1b[0m" in coloured
    assert "\x1b[1m #\x1b[0m" in coloured and "\x1b[1miters to ≤ 20%\x1b[0m" in coloured  # the header, bold
    lines = text.splitlines()
    col = lines[[i for i, line in enumerate(lines) if "1x1 conv" in line][0]].split("│")
    assert col[4].endswith(" - ") and col[4].strip() == "-" and len(col[4]) > 5  # right-aligned in its column
    assert col[1].endswith(" 2 ") or col[1].strip() == "2"
    for width in (70, 62):  # narrow: headers wrap, labels fold, every value and verdict whole on its row's line
        narrow = io.StringIO()
        Console(file=narrow, width=width, color_system=None).print(budgets.render(t))
        got = {}
        for line in narrow.getvalue().splitlines():
            cells = [c.strip() for c in line.split("│")[1:-1]]
            if cells and cells[0]:
                got[cells[0]] = cells
            elif cells and cells[1] and got:
                got[list(got)[-1]][1] += " " + cells[1]  # a folded label's next line
        assert max(len(line) for line in narrow.getvalue().splitlines()) <= width
        assert got["1"][2:] == ["12.50", "10.00", "9.00", "40 (1x)", "trains"], (width, narrow.getvalue())
        assert got["2"][2:] == ["80.00", "-", "70.00", "-", "falling"] and got["12"][2:] == ["5.00", "4.00", "3.00",
                                                                                            "-", "-"]
        assert [got[k][1].replace(" ", "") for k in ("1", "2", "12")] == ["identity", "1x1conv[b]", "norule"]
    t.threshold = None
    buf = io.StringIO()
    Console(file=buf, width=250, color_system=None).print(budgets.render(t))
    assert "iters to ≤ -" in buf.getvalue() and "trains: at or under - at 1x" in " ".join(buf.getvalue().split())


@pytest.mark.parametrize("text, want", [("1,2,4", [1, 2, 4]), ("4, 1", [1, 4]), ("3", [3]), ("2,,1", [1, 2])])
def test_budgets_parse_to_distinct_positive_integers_in_order(text, want):
    assert budgets.parse(text) == want


@pytest.mark.parametrize("text, words", [
    ("1,x", "--budgets 1,x: expected comma-separated positive integers, e.g. --budgets 1,2,4"),
    ("0,1", "--budgets 0,1: expected distinct positive integers, e.g. --budgets 1,2,4"),
    ("2,2", "--budgets 2,2: expected distinct positive integers, e.g. --budgets 1,2,4"),
    ("", "--budgets : expected distinct positive integers, e.g. --budgets 1,2,4")])
def test_bad_budgets_are_one_line_naming_what_would_do(text, words):
    with pytest.raises(UserError) as e:
        budgets.parse(text)
    assert str(e.value) == words


def test_verdicts_at_their_edges():
    assert budgets.verdict({1: 20.0, 2: 30.0}, 20.0) == "trains"  # at the threshold is under it
    assert budgets.verdict({1: 20.01, 2: 20.0}, 20.0) == "slow"
    assert budgets.verdict({1: 30.0, 2: 28.0}, 20.0) == "falling"  # exactly FALLING points lower
    assert budgets.verdict({1: 30.0}, 20.0) == "fails"  # one budget cannot fall
    assert budgets.verdict({1: 30.0, 2: 29.0, 4: 27.0}, 20.0) == "falling"  # the largest budget against the smallest
    assert budgets.verdict({1: None, 2: 15.0}, 20.0) == "slow"  # 2x is measured and under
    assert budgets.verdict({}, 20.0) == "incomplete"


def test_a_budget_run_lives_in_its_budgets_directory_with_its_spec_scaled():
    from resnet_cli import spec as spec_mod
    from resnet_cli.sweep.plan import PlannedRun

    spec = spec_mod.resolve(spec_mod.validate({"optim": {"iters": 100, "milestones": [50, 75]}}))
    base = PlannedRun(**{**{f: None for f in PlannedRun.__dataclass_fields__}, "path": Path("res/01-a-s0"), "spec": spec})
    two = budgets.budget_run(base, Path("res"), 2)
    assert two.path == Path("res/budget-2x/01-a-s0") and two.budget == 2
    assert two.spec.run.out == "res/budget-2x/01-a-s0"
    assert (two.spec.optim.iters, two.spec.optim.milestones) == (200, [100, 150])
    one = budgets.budget_run(base, Path("res"), 1)
    assert one.path == Path("res/01-a-s0") and one.spec.optim.iters == 100
