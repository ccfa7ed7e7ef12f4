"""results/table.py on a hand-made StudyResult, each output written out here: a row's JSON object
(rounded as documented, the seeds as counted, the diverged ones named), the study object, and the
rich tables' cells, title and caption, wide and narrow (read from the Table, not a screen)."""

from resnet_cli.results import table as T
from resnet_cli.results.study import RowResult, StudyResult


def row(index, label, evidence, *, test_errors, run_diverged, status, train_loss, fail=False, paper=6.61,
        group=None):
    return RowResult(index=index, row=label, group=group, paper=paper, evidence=evidence, values={},
                     seeds=list(range(len(test_errors))), test_errors=test_errors, run_diverged=run_diverged,
                     runs=len(test_errors), train_loss=train_loss, status=status, fail=fail, fingerprint=())


SPREAD = {"median": 6.123456, "mean": 34.3333349, "std": 48.5647321, "n": 3, "interval": [5.123456, 90.0],
          "coverage": 0.9296875}  # an exact coverage is not rounded
ONE = {"median": 4.0, "mean": 4.0, "std": None, "n": 1, "interval": None, "coverage": None,
       "interval_reason": "n < 3: no interval"}
NONE = {"median": None, "mean": None, "std": None, "n": 0, "interval": None, "coverage": None,
        "interval_reason": "n < 3: no interval"}
ROWS = [row(1, "original", SPREAD, test_errors=[6.123456, 5.123456, 90.0], run_diverged=[False, False, True],
            status="diverged 1/3", train_loss=0.12345678, group="ResNet-110"),
        row(2, "[dropout] p=0.5", ONE, test_errors=[4.0, None], run_diverged=[False, False], status="incomplete 1/2",
            train_loss=None, fail=True, paper="fail"),
        row(3, "gating", NONE, test_errors=[None], run_diverged=[False], status="running", train_loss=None, paper=None)]
PAIRS = {"family": {"declared": True, "size": 2}, "difference": "Hodges-Lehmann",
         "claims": [{"better": "original", "worse": "gating", "metric": "test_error", "n": 8, "shift": 1.5,
                     "interval": [0.5, 2.5], "coverage": 0.9296875, "p": 0.0078125, "p_holm": 0.015625,
                     "verdict": "in order"}],
         "exploratory": [{"better": "original", "worse": "[dropout] p=0.5", "metric": "train_loss", "n": 1,
                          "shift": 0.25, "interval": None, "coverage": None, "p": None, "verdict": "exploratory"}]}


def result(comparison=PAIRS, reading="The reading.", budget=1, fail_above=20.0):
    return StudyResult(study="shortcut", title="He 2016b Table 1", preset="quick", paper_metric="CIFAR-10 error %",
                       budget=budget, fail_above=fail_above, dataset="digits", rows=ROWS, comparison=comparison,
                       reading=reading)


def test_a_rows_json_rounds_to_four_places_and_names_its_diverged_seeds():
    got = T.row_json(result(), ROWS[0])
    assert got == {
        "event": "row", "study": "shortcut", "preset": "quick", "index": 1, "row": "original", "group": "ResNet-110",
        "median": 6.1235, "mean": 34.3333, "std": 48.5647, "n": 3, "interval": [5.1235, 90.0], "coverage": 0.9296875,
        "test_error_median": 6.1235, "test_error_mean": 34.3333, "test_error_std": 48.5647, "train_loss": 0.123457,
        "status": "diverged 1/3", "fail": False, "fail_above": 20.0, "paper": 6.61, "paper_metric": "CIFAR-10 error %",
        "runs": 3, "diverged": 1, "seeds": [0, 1, 2], "test_errors": [6.1235, 5.1235, 90.0], "diverged_seeds": [2],
        "dataset": "digits", "metric": "test_error"}
    # exact (what the csv writes, docs/report.md): the same numbers unrounded
    exact = T.row_json(result(), ROWS[0], exact=True)
    assert exact["median"] == ROWS[0].evidence["median"] != got["median"] and exact["n"] == 3
    empty = T.row_json(result(), ROWS[2])
    assert (empty["median"], empty["interval"], empty["interval_reason"], empty["test_errors"]) == (
        None, None, "n < 3: no interval", [None])


def test_the_study_object_follows_its_rows():
    got = T.records(result())
    assert [r["index"] for r in got[:3]] == [1, 2, 3]
    assert got[3] == {"event": "study", "study": "shortcut", "preset": "quick", **PAIRS}
    assert T.study_json(result(comparison=None)) == {"event": "study", "study": "shortcut", "preset": "quick"}


def cells(table):
    return [list(c._cells) for c in table.columns]


def test_the_wide_table_shows_each_rows_median_interval_spread_and_status():
    t = T.render(result())
    assert cells(t) == [
        ["1", "2", "3"],
        ["original", "\\[dropout] p=0.5", "gating"],
        ["6.12\n[5.12, 90.00] 92.9%", "4.00 [red]fail[/]\nno interval", "-"],
        ["34.33 ± 48.56\n3/3 (1 div.)", "4.00\n1/2", "-\n0/1"],
        ["0.1235", "-", "-"],
        ["[red]diverged 1/3[/]", "incomplete 1/2", "[yellow]running[/]"],
        ["6.61", "fail", "-"]]
    assert t.title == "He 2016b Table 1 \\[preset quick]"
    assert t.caption == (
        "ours: digits test error % at the last epoch over finished seeds (a diverged seed counts as a failed run "
        "at its dataset's chance error, 100 (1 - 1/classes)); fail = median above 20%, the paper's rule; below the "
        "median its order-statistic interval over seeds with the coverage it has (no interval: n < 3); paper: "
        "CIFAR-10 error %. The reading.")


def test_a_narrow_table_keeps_one_decimal_and_a_live_one_no_caption():
    assert cells(T.render(result(), width=110))[2][0] == "6.12\n[5.12, 90.00] 92.9%"  # 110 columns are wide
    t = T.render(result(budget=4, fail_above=None), width=109)
    assert cells(t)[2][0] == "6.12\n[5.1, 90.0] 92.9%" and cells(t)[3][0] == "34.3±48.6\n3/3 (1 div.)"
    assert cells(t)[4][0] == "0.12"
    assert t.title == "He 2016b Table 1 \\[preset quick, 4x its length]" and "the paper's rule" not in t.caption
    assert T.render(result(), live=True).caption is None


def test_the_pairs_table_numbers_the_claims_and_not_the_exploratory_pairs():
    t = T.render_pairs(result())
    assert t.title == "He 2016b Table 1: the paper's claims (2, Holm over them) and exploratory pairs"
    assert cells(t) == [
        ["1", ""], ["original < gating", "original < \\[dropout] p=0.5"], ["test error", "train loss"], ["8", "1"],
        ["+1.50\n[+0.50, +2.50] 92.9%", "+0.25"], ["0.00781", "-"], ["0.0156", "-"],
        ["[green]in order[/]", "[dim]exploratory[/]"]]
    assert t.caption.startswith("difference: worse minus better, paired by seed (Hodges-Lehmann, with the coverage")
    narrow = T.render_pairs(result(comparison={**PAIRS, "family": {"declared": False, "size": 1}}), width=90)
    assert narrow.title == "He 2016b Table 1: pairs with a paper figure (1, Holm over them)"
    assert cells(narrow)[4][0] == "+1.5\n[+0.5, +2.5] 92.9%"
    assert T.render_pairs(result(comparison=None)) is None
    assert T.render_pairs(result(comparison={**PAIRS, "claims": [], "exploratory": []})) is None


def test_render_all_puts_the_pairs_under_the_table_where_there_are_any():
    group = T.render_all(result())
    assert [type(r).__name__ for r in group.renderables] == ["Table", "Table"]
    assert type(T.render_all(result(comparison=None))).__name__ == "Table"
    assert T.paper_str(None) == "-" and T.paper_str("fail") == "fail" and T.paper_str(6.6) == "6.60"


def columns(table):
    return [(c.header, c.justify, bool(c.no_wrap)) for c in table.columns]


def test_the_tables_columns_are_named_numbers_right_and_whole_and_their_boxes_follow_the_width():
    from rich import box

    t, pairs = T.render(result()), T.render_pairs(result())
    assert columns(t) == [("#", "right", True), ("row", "left", False), ("median %\ninterval", "right", True),
                          ("mean ± std\nn", "right", True), ("train\nloss", "right", True), ("status", "left", False),
                          ("paper", "right", True)]
    assert columns(pairs) == [("claim", "left", False), ("better < worse", "left", False), ("of", "left", False),
                              ("n", "right", True), ("difference\ninterval", "right", True), ("p", "right", True),
                              ("Holm p", "right", True), ("verdict", "left", False)]
    for table in (t, pairs):
        assert (table.box, table.header_style, table.pad_edge, table.collapse_padding) == (box.HEAVY_HEAD, "bold",
                                                                                             True, False)
    for table in (T.render(result(), width=109), T.render_pairs(result(), width=109)):
        assert (table.box, table.pad_edge, table.collapse_padding) == (box.SIMPLE_HEAD, False, True)
    assert T.render_pairs(result(), width=110).box == box.HEAVY_HEAD  # 110 columns are wide
    assert pairs.caption.endswith("positive is the paper's order. Exploratory pairs are not adjusted and never called "
                                  "resolved.")
    reversed_ = {**PAIRS, "claims": [{**PAIRS["claims"][0], "verdict": "reversed", "shift": -1.5,
                                      "interval": [-2.5, -0.5]}], "exploratory": []}
    got = cells(T.render_pairs(result(comparison=reversed_)))
    assert got[7] == ["[red]reversed[/]"] and got[4] == ["-1.50\n[-2.50, -0.50] 92.9%"]
    only_exploratory = T.render_pairs(result(comparison={**PAIRS, "claims": []}))
    assert cells(only_exploratory)[0] == [""]  # a study with exploratory pairs alone still lists them


def test_render_all_passes_the_width_to_both_tables():
    from rich import box

    group = T.render_all(result(), width=100)
    assert [t.box for t in group.renderables] == [box.SIMPLE_HEAD, box.SIMPLE_HEAD]
    table = T.render_all(result(comparison=None), width=100)
    assert table.box == box.SIMPLE_HEAD and T.row_json(result(), ROWS[0])["n"] == 3
