"""results/formats.py on hand-made records, each output written out here in full: the LaTeX table
of a study whose claim resolves and of one where none does, every special character's escape, the
CSV cells (none, booleans, unrounded numbers) read back by Python's csv module, several studies in
one document. test_formats.py runs the same formats on a real tiny study."""

import csv
import io

import pytest

from resnet_cli.results import formats


def row(index, label, n, median, interval=None, coverage=None, paper=None, fail=False, status="completed", **more):
    return {"event": "row", "study": "shortcut", "preset": "quick", "index": index, "row": label, "n": n,
            "runs": n, "status": status,
            "median": median, "interval": interval, "coverage": coverage, "paper": paper, "fail": fail,
            "dataset": "digits", "paper_metric": "CIFAR-10 test error (%)", **more}


RESOLVED = [
    row(1, "original", 8, 6.25, [5.5, 7.0], 0.9296875, 6.61),
    row(2, "constant scaling 0.5", 8, 12.5, [11.0, 14.25], 0.9296875, 12.35),
    # the family's size is what was declared (3), one claim's rows not being here
    {"event": "study", "study": "shortcut", "preset": "quick", "family": {"declared": True, "size": 3},
     "claims": [{"better": "original", "worse": "constant scaling 0.5", "verdict": "in order"},
                {"better": "original", "worse": "dropout", "verdict": "unresolved"}]},
]


def test_a_resolved_claim_marks_its_worse_row_and_names_itself_in_the_caption():
    assert formats.study_latex(RESOLVED) == (
        "\\begin{table}[t]\n"
        "\\centering\n"
        "\\begin{tabular}{lrlrlr}\n"
        "\\toprule\n"
        "Row & Ours: median (\\%) & Interval (coverage) & $n$ & Status & Paper \\\\\n"
        "\\midrule\n"
        "original & 6.25 & [5.50, 7.00] 92.9\\% & 8 & completed & 6.61 \\\\\n"
        "constant scaling 0.5$^{\\dag}$ & 12.50 & [11.00, 14.25] 92.9\\% & 8 & completed & 12.35 \\\\\n"
        "\\bottomrule\n"
        "\\end{tabular}\n"
        "\\caption{shortcut (preset quick, n = 8 seeds a row): our digits test error, the median over seeds "
        "at the last epoch with the order-statistic interval of the median at the coverage it has, beside "
        "the paper's figure (CIFAR-10 test error (\\%)). Rows are compared by the exact sign-flip test of the "
        "differences paired by seed, with Holm's adjustment over the declared claims (3). $^{\\dag}$: the "
        "worse row of a claim resolved in the paper's order (Holm-adjusted $p \\le 0.05$): original $<$ "
        "constant scaling 0.5.}\n"
        "\\label{tab:shortcut-quick}\n"
        "\\end{table}\n")


def test_without_a_resolved_claim_the_caption_says_so_and_empty_cells_are_dashes():
    records = [
        row(1, "ResNet-1202", 3, None),  # every seed diverged: no median, no interval; n 3, 5, 4
        row(2, "plain-56", 5, 91.0, [88.5, 92.0], 0.9375, "fail", fail=True),
        row(3, "plain-20", 4, 9.5, [9.0, 10.0], 0.875, 8.75),
        {"event": "study", "study": "depth study", "preset": "full run", "family": {"declared": False},
         "claims": [{"better": "ResNet-1202", "worse": "plain-56", "verdict": "reversed"}]},
    ]
    text = formats.study_latex(records)
    body = text.split("\\midrule\n")[1].split("\\bottomrule")[0]
    assert body == ("ResNet-1202 & -- & -- & 3 & completed & -- \\\\\n"
                    "plain-56 & 91.00 (fail) & [88.50, 92.00] 93.7\\% & 5 & completed & fail \\\\\n"
                    "plain-20 & 9.50 & [9.00, 10.00] 87.5\\% & 4 & completed & 8.75 \\\\\n")
    # rows of different n: n is per row, in its column (issue 74), not a range over the rows
    assert "(preset full run, n per row as the table gives it)" in text
    assert "Holm's adjustment over every pair of rows with a paper figure (1). No claim is resolved in the " \
           "paper's order at this n.}" in text
    assert "\\dag" not in text and "\\label{tab:depth-study-full-run}" in text


def test_a_study_with_no_finished_seed_says_so():
    text = formats.study_latex([{"event": "study", "study": "s", "preset": "p", "claims": []}])
    # no comparison at all: no boilerplate about one (issue 74: "every pair ... (0)")
    assert "(preset p, no finished seed)" in text and "sign-flip" not in text and "(0)" not in text


def test_every_latex_special_character_is_escaped_and_b_g_is_math():
    assert formats.latex_escape("\\&%$#_{}~^") == ("\\textbackslash{}\\&\\%\\$\\#\\_\\{\\}"
                                                  "\\textasciitilde{}\\textasciicircum{}")
    assert formats.latex_escape("b_g -6, sub_b_g") == "$b_g$ $-$6, sub\\_b\\_g"  # b_g alone is the paper's symbol
    # a minus where a number starts; a hyphen inside a name or a range stays one
    assert formats.latex_escape("ResNet-110, 1-6, (-7), 0.5-1") == "ResNet-110, 1-6, ($-$7), 0.5-1"
    assert formats.latex_escape(3) == "3"


def test_csv_cells_are_empty_for_none_words_for_booleans_and_numbers_unrounded():
    text = formats.write_csv(("a", "b", "c", "d"), [{"a": None, "b": True, "c": 0.1 + 0.2, "d": "x,y"},
                                                    {"a": 0, "b": False, "c": 2}])
    assert text == 'a,b,c,d\n,true,0.30000000000000004,"x,y"\n0,false,2,\n'
    assert list(csv.reader(io.StringIO(text)))[1] == ["", "true", "0.30000000000000004", "x,y"]


def test_the_row_csv_splits_the_interval_and_skips_the_study_object():
    got = list(csv.DictReader(io.StringIO(formats.row_csv(RESOLVED))))
    assert [(g["row"], g["interval_lo"], g["interval_hi"], g["coverage"]) for g in got] == [
        ("original", "5.5", "7.0", "0.9296875"), ("constant scaling 0.5", "11.0", "14.25", "0.9296875")]
    bare = list(csv.DictReader(io.StringIO(formats.row_csv([row(1, "r", 0, None)]))))
    assert (bare[0]["interval_lo"], bare[0]["interval_hi"], bare[0]["median"]) == ("", "", "")


def study_with_pairs(name):
    claim = {"better": "a", "worse": "b", "shift": 1.5, "interval": [0.5, 2.5], "p": 0.01, "p_holm": 0.02,
             "verdict": "in order"}
    extra = {"better": "a", "worse": "c", "shift": -0.25, "interval": None, "p": 0.6, "verdict": "unresolved"}
    return [row(1, "a", 8, 1.0), {"event": "study", "study": name, "preset": "quick", "claims": [claim],
                                  "exploratory": [extra]}]


def test_several_studies_share_one_csv_header_and_their_pairs_come_claims_first():
    two = [study_with_pairs("first"), study_with_pairs("second")]
    rows = list(csv.reader(io.StringIO(formats.studies_text(two, "csv"))))
    assert rows[0] == list(formats.ROW_COLUMNS) and len(rows) == 3  # one header, a row of each study
    pairs = list(csv.DictReader(io.StringIO(formats.studies_text(two, "csv", pairs=True))))
    assert [(p["study"], p["kind"], p["worse"], p["difference"], p["difference_lo"], p["difference_hi"])
            for p in pairs] == [("first", "claim", "b", "1.5", "0.5", "2.5"), ("first", "exploratory", "c", "-0.25", "", ""),
                                ("second", "claim", "b", "1.5", "0.5", "2.5"),
                                ("second", "exploratory", "c", "-0.25", "", "")]
    assert pairs[0]["p_holm"] == "0.02" and pairs[1]["p_holm"] == "" and pairs[0]["preset"] == "quick"
    latex = formats.studies_text([RESOLVED, RESOLVED], "latex")
    assert latex == formats.study_latex(RESOLVED) + "\n" + formats.study_latex(RESOLVED)
    with pytest.raises(ValueError):
        formats.studies_text(two, "yaml")


def test_rows_without_a_study_object_are_named_by_their_first_row():
    rows = [row(1, "original", 8, 6.25, [5.5, 7.0], 0.9296875, 6.61, study="Shortcut v2"),
            row(2, "dropout", 8, 9.0, paper_metric="another metric", study="Shortcut v2")]
    text = formats.study_latex(rows)
    assert "\\caption{Shortcut v2 (preset quick, n = 8 seeds a row): our digits test error" in text
    assert "beside the paper's figure (CIFAR-10 test error (\\%))." in text  # the first row's metric
    assert "sign-flip" not in text and "(0)" not in text  # nothing compared: no sentence about it
    assert "\\label{tab:Shortcut-v2-quick}" in text
    bare = formats.study_latex([{"event": "study", "claims": []}])
    assert "\\caption{ (preset , no finished seed): our  test error" in bare and "figure ()" not in bare
    assert "\\label{tab:study}" in bare


def test_a_family_without_its_size_counts_its_claims_and_every_resolved_claim_is_listed():
    study = {"event": "study", "study": "s", "preset": "p", "family": {"declared": True},
             "claims": [{"better": "a", "worse": "b", "verdict": "in order"},
                        {"better": "a", "worse": "c", "verdict": "in order"}]}
    text = formats.study_latex([row(1, "b", 8, 1.0), row(2, "c", 8, 2.0), study])
    assert "with Holm's adjustment over the declared claims (2)." in text
    assert "resolved in the paper's order (Holm-adjusted $p \\le 0.05$): a $<$ b; a $<$ c.}" in text


def test_markdown_of_several_studies_is_each_studys_block_in_turn():
    from resnet_cli.results import markdown

    def pending(name):
        return [{"event": "row", "index": 1, "row": name, "n": 0, "test_error_median": None, "paper": None,
                 "train_loss": None, "status": "pending"},
                {"event": "study", "study": name, "claims": [], "exploratory": [], "orders": [],
                 "family": {"size": 0, "declared": False}}]

    two = [pending("first"), pending("second")]
    assert formats.studies_text(two, "markdown") == "\n".join(markdown.study(list(r)) for r in two)
    with pytest.raises(ValueError, match="yaml"):
        formats.studies_text(two, "yaml")
