"""results/degrade_formats.py on hand-made degrade records, each output written out here: the grid's
Markdown table (ranges, intervals, a one-seed net, a metric with no value), the paired reading (a
claim resolved, one not with the seeds it needs, an exploratory test-accuracy pair), the article's
findings, the claims table, both CSVs read back by Python's csv module, and the LaTeX caption's
three cases. test_degrade_formats.py runs the same formats on a real tiny grid."""

import csv
import io

import pytest

from resnet_cli.results import degrade_formats as DF


def stats(metric, median, lo, hi, interval="none", coverage=None):
    out = {f"{metric}_median": median, f"{metric}_min": lo, f"{metric}_max": hi}
    if interval != "none":  # "none": a record older than the interval field
        out.update({f"{metric}_interval": interval, f"{metric}_coverage": coverage})
    return out


def summary(net, depth, n, seeds, paired=None, diverged=0, params=272474, **metrics):
    return {"event": "summary", "net": net, "depth": depth, "n": n, "diverged": diverged, "params": params,
            "seeds": seeds, "paired": paired, **metrics}


PLAIN_20 = summary("plain", 20, 3, [0, 1, 2], **stats("train_loss", 0.1234, 0.1, 0.2),
                   **stats("train_acc", 0.95, 0.94, 0.96, [0.94, 0.96], 0.75),
                   **stats("test_acc", 0.9, 0.89, 0.91, [0.89, 0.91], 0.75),
                   **stats("grad_norm_first_layer", 1.5, 1.25, 2.0),
                   **stats("train_error", 5.0, 4.0, 6.0), **stats("test_error", 10.0, 9.0, 11.0))
NOT_RESOLVED = {"mean": 0.05, "shift": 0.05, "interval": [0.02, 0.08], "coverage": 0.75, "p": 0.25, "p_holm": 0.5,
                "resolved": False, "n": 3, "can_resolve": False, "seeds_needed": {"estimate": 9, "range": [9, 9]}}
EXPLORATORY = {"mean": -0.01, "shift": -0.01, "interval": None, "coverage": None, "p": 0.75, "p_exact": True,
               "p_holm": None, "n": 3, "can_resolve": False}
RES_20 = summary("residual", 20, 1, [0], {"train_acc": NOT_RESOLVED, "test_acc": EXPLORATORY},
                 **stats("train_loss", 0.05, 0.05, 0.05), **stats("train_acc", 0.99, 0.99, 0.99, None, None),
                 **stats("test_acc", 0.91, 0.91, 0.91), **stats("grad_norm_first_layer", 0.5, 0.5, 0.5),
                 **stats("train_error", 1.0, 1.0, 1.0), **stats("test_error", 9.0, 9.0, 9.0))
RESOLVED = {"mean": 0.4, "shift": 0.4, "interval": [0.3, 0.5], "coverage": 0.978515625, "p": 0.002, "p_holm": 0.004,
            "resolved": True, "n": 10, "can_resolve": True}
RES_56 = summary("residual", 56, 10, list(range(10)), {"train_acc": RESOLVED}, params=855770,
                 **stats("train_loss", None, None, None), **stats("train_acc", None, None, None),
                 **stats("test_acc", None, None, None), **stats("grad_norm_first_layer", None, None, None),
                 **stats("train_error", 2.0, 1.5, 2.5), **stats("test_error", None, None, None))
# the family has 4 claims; one claim's nets are not in this grid
CLAIMS = {"event": "claims", "family": {"size": 4}, "power": "10 seeds resolve a 1-sd gap with 80% power",
          "claims": [
              {"better": "residual-56", "worse": "plain-20", "metric": "train_error",
               "source": "He 2016a Fig. 6: plain nets degrade",
               "shift": 40.0, "interval": [30.0, 50.0], "coverage": 0.978515625, "n": 10, "p_holm": 0.004,
               "verdict": "in order"},
              {"better": "residual-20", "worse": "plain-20", "metric": "test_error", "source": "He 2016a Table 6",
               "shift": -3.0,
               "interval": None, "n": 3, "p_holm": 0.03, "verdict": "reversed"},
              {"better": "plain-20", "worse": "plain-56", "metric": "train_error", "source": "He 2016a Fig. 6",
               "shift": None, "interval": None,
               "n": 0, "p_holm": None, "verdict": "unresolved"}]}
HEAD = ("Paired by seed (sign-flip test; at every depth but the shallowest both pairs are He 2016a's claims, Holm "
        "over the grid's claims; the shallowest twins, 'comparably accurate' in He 2016a, are exploratory, raw p "
        "only; the mean difference, and the Hodges-Lehmann interval with the coverage it has)")


def test_the_grid_table_shows_each_nets_median_range_and_interval():
    text = DF.table([PLAIN_20, RES_20, {**RES_56, "paired": None, "diverged": 2}])
    lines = text.split("\n")
    assert lines[2] == ("| plain | 20 | 3 | 272,474 | 0.123 (0.100–0.200) | 0.950 (0.940–0.960) | [0.940, 0.960] 75% "
                        "| 0.900 (0.890–0.910) | [0.890, 0.910] 75% | 1.50 (1.25–2.00) |")
    assert lines[3] == ("| residual | 20 | 1 | 272,474 | 0.050 | 0.990 | n < 3: no interval | 0.910 | - | 0.50 |")
    assert lines[4] == "| residual | 56 | 10 (2 diverged) | 855,770 | - | - | - | - | - | - |"
    assert lines[6] == "Median (min–max) over seeds 0..9."
    assert lines[8].startswith(HEAD)
    gaps = DF.table([{**PLAIN_20, "seeds": [0, 2, 5]}]).split("\n")
    assert gaps[2].startswith("| plain | 20 | 3 | 272,474 | 0.123 (0.100–0.200) |")
    two = DF.table([{**PLAIN_20, "n": 2}]).split("\n")  # two seeds have a range too
    assert two[2].startswith("| plain | 20 | 2 | 272,474 | 0.123 (0.100–0.200) | 0.950 (0.940–0.960) |")
    assert gaps[4] == "Median (min–max) over seeds 0, 2, 5."


def test_the_paired_reading_says_resolved_only_after_holm():
    assert DF.pairs_text([RES_20, RES_56]) == HEAD + (
        ": ResNet-20 minus plain-20, training accuracy: +5.0 points [+2.0, +8.0] 75% (p 0.25, Holm 0.5), not "
        "resolved at n = 3; about 9 seeds would resolve it with 80% power. "
        "ResNet-20 minus plain-20, test accuracy: -1.0 points (p 0.75, exploratory) at n = 3. "
        "ResNet-56 minus plain-56, training accuracy: +40.0 points [+30.0, +50.0] 97.8% (p 0.002, Holm 0.004), "
        "resolved at n = 10.\n")
    # where no pair can resolve, the reading says how few seeds there are
    assert DF.pairs_text([RES_20]).startswith(HEAD + "; 3 seeds cannot resolve a pair at 5%: ResNet-20 minus")
    old = {**RES_20, "paired": {"train_acc": {"mean": 0.05, "p": 0.25, "ci95": [0.0, 0.1]}}}  # before Holm
    assert DF.pairs_text([old, PLAIN_20]) == ""


def test_the_articles_findings_sit_beside_ours():
    findings = [{"finding": "plain-26 degrades", "measure": "median training accuracy, plain", "ours": 0.6,
                 "article": 0.56, "article_range": [0.395, 0.834], "in_range": True},
                {"finding": "plain-26's step-1 gradient", "measure": "median first-conv norm, plain", "ours": 3.5,
                 "article_range": [1.9, 3.2]}]  # an older record: no in_range, no single figure
    text = DF.table([PLAIN_20], findings)
    assert text.endswith(
        "| the article's finding | measure | ours | article (10 seeds) | ours within its 10-seed range |\n"
        "|---|---|---|---|---|\n"
        "| plain-26 degrades | median training accuracy, plain | 0.60 | 0.56, 0.395–0.834 | yes |\n"
        "| plain-26's step-1 gradient | median first-conv norm, plain | 3.50 | 1.9–3.2 | **no** |\n")


def test_the_claims_table_marks_a_reversal_and_adds_the_training_time():
    assert DF.claims_table([CLAIMS], train_wall_s=3725) == (
        "\n| He 2016a's claim | error % | source | difference (worse minus better) | n | Holm p | verdict |\n"
        "|---|---|---|---|---|---|---|\n"
        "| residual-56 < plain-20 | training | He 2016a Fig. 6 | +40.00 [+30.00, +50.00] 97.8% | 10 | 0.004 | in order |\n"
        "| residual-20 < plain-20 | test | He 2016a Table 6 | -3.00 | 3 | 0.03 | **reversed** |\n"
        "| plain-20 < plain-56 | training | He 2016a Fig. 6 | - | 0 | - | unresolved |\n"
        "\n10 seeds resolve a 1-sd gap with 80% power.\n"
        "\nTraining time, every run's own wall time summed: 1 h 2 min.\n")
    assert DF.claims_table([{**CLAIMS, "claims": []}]) == ""  # an output from before the claims


def test_the_rows_csv_carries_every_statistic_unrounded():
    got = list(csv.DictReader(io.StringIO(DF.rows_csv([PLAIN_20, RES_20, CLAIMS]))))
    assert list(got[0]) == list(DF.ROW_COLUMNS) and len(got) == 2
    plain = got[0]
    assert (plain["net"], plain["depth"], plain["seeds"], plain["params"]) == ("plain", "20", "0 1 2", "272474")
    assert (plain["train_acc_interval_lo"], plain["train_acc_interval_hi"], plain["train_acc_coverage"]) == (
        "0.94", "0.96", "0.75")
    assert (plain["train_loss_median"], plain["grad_norm_first_layer_min"]) == ("0.1234", "1.25")
    assert plain["grad_norm_first_layer_interval_lo"] == "" and plain["train_error_median"] == "5.0"
    assert got[1]["train_acc_interval_lo"] == "" and got[1]["seeds"] == "0"


def test_the_pairs_csv_turns_accuracy_into_error_points():
    got = list(csv.DictReader(io.StringIO(DF.pairs_csv([PLAIN_20, RES_20, CLAIMS]))))
    assert [(g["kind"], g["better"], g["worse"]) for g in got] == [
        ("claim", "residual-56", "plain-20"), ("claim", "residual-20", "plain-20"), ("claim", "plain-20", "plain-56"),
        ("exploratory", "residual-20", "plain-20")]
    claim, exploratory = got[0], got[3]
    assert (claim["difference"], claim["difference_lo"], claim["difference_hi"], claim["p_holm"]) == (
        "40.0", "30.0", "50.0", "0.004")
    # residual minus plain accuracy -0.01 is 1 point more test error for residual-20: -1.0 as worse minus better
    assert (exploratory["metric"], exploratory["difference"], exploratory["mean"], exploratory["p"]) == (
        "test_error", "-1.0", "-1.0", "0.75")
    assert (exploratory["difference_lo"], exploratory["p_holm"], exploratory["verdict"], exploratory["study"]) == (
        "", "", "exploratory", "degrade")


def test_the_latex_table_marks_the_worse_net_and_its_caption_names_each_verdict():
    text = DF.latex([PLAIN_20, RES_56, CLAIMS])
    body = text.split("\\midrule\n")[1].split("\\bottomrule")[0]
    assert body == ("plain$^{\\dag}$ & 20 & 3 & 5.00 (4.00--6.00) & 10.00 (9.00--11.00) & 1.50 \\\\\n"
                    "residual & 56 & 10 & 2.00 (1.50--2.50) & -- & -- \\\\\n")  # no test error: no range
    assert ("He 2016a's claims (4) are tested on training and test error paired by seed, by the exact sign-flip test with "
            "Holm's adjustment over them. $^{\\dag}$: the worse net of a claim resolved in the paper's order: "
            "residual-56 $<$ plain-20. Resolved the other way: residual-20 $>$ plain-20.}") in text
    none = DF.latex([PLAIN_20])
    assert "He 2016a's claims (0) are tested" in none and "No claim is resolved at this $n$.}" in none
    assert "\\dag" not in none and none.count("\\toprule") == none.count("\\bottomrule") == 1
    only_reversed = DF.latex([PLAIN_20, {**CLAIMS, "claims": CLAIMS["claims"][1:]}])
    assert "Resolved the other way: residual-20 $>$ plain-20.}" in only_reversed and "No claim" not in only_reversed


def test_each_format_by_name():
    records = [PLAIN_20, RES_20, CLAIMS]
    assert DF.text(records, "csv") == DF.rows_csv(records) and DF.text(records, "csv", pairs=True) == DF.pairs_csv(records)
    assert DF.text(records, "markdown") == DF.table(records) + DF.claims_table(records)
    assert DF.text(records, "latex") == DF.latex(records)
    with pytest.raises(ValueError):
        DF.text(records, "html")


def test_the_latex_table_whole():
    one = {**CLAIMS, "claims": CLAIMS["claims"][:1] * 2}  # two claims resolved in order: both listed
    assert DF.latex([PLAIN_20, one]) == (
        "\\begin{table}[t]\n\\centering\n\\begin{tabular}{lrrrrr}\n\\toprule\n"
        "Net & Depth & $n$ & Train error (\\%) & Test error (\\%) & $\\|\\partial E/\\partial W_1\\|$ \\\\\n"
        "\\midrule\n"
        "plain$^{\\dag}$ & 20 & 3 & 5.00 (4.00--6.00) & 10.00 (9.00--11.00) & 1.50 \\\\\n"
        "\\bottomrule\n\\end{tabular}\n"
        "\\caption{Plain and residual twins (He et al., 2016a): the median over seeds of the last epoch's errors, "
        "min--max in parentheses, and the first convolution's gradient norm at step 1. He 2016a's claims (4) are "
        "tested on training and test error paired by seed, by the exact sign-flip test with Holm's adjustment over them. "
        "$^{\\dag}$: the worse net of a claim resolved in the paper's order: residual-56 $<$ plain-20; residual-56 "
        "$<$ plain-20.}\n\\label{tab:degrade}\n\\end{table}\n")
    two_reversed = {**CLAIMS, "claims": CLAIMS["claims"][1:2] * 2}
    assert "Resolved the other way: residual-20 $>$ plain-20; residual-20 $>$ plain-20.}" in DF.latex([two_reversed])


def test_the_grid_tables_header_and_the_findings_table_follow_it_after_one_blank_line():
    text = DF.table([PLAIN_20], [{"finding": "f", "measure": "m", "ours": 0.123, "article": 0.456,
                                  "article_range": [0.1, 0.9], "in_range": False}])
    lines = text.split("\n")
    assert lines[0] == ("| net | depth | n | params | train loss | train acc | train acc: interval of the median "
                        "(coverage) | test acc | test acc: interval (coverage) | grad norm, first conv, step 1 |")
    assert lines[4:7] == ["Median (min–max) over seeds 0..2.", "", "| the article's finding | measure | ours | "
                          "article (10 seeds) | ours within its 10-seed range |"]
    assert lines[8] == "| f | m | 0.12 | 0.46, 0.1–0.9 | **no** |"
    assert DF.text([PLAIN_20], "markdown", findings=[{"finding": "f", "measure": "m", "ours": 0.5,
                                                       "article_range": [0.1, 0.9]}]).count("| f | m | 0.50 |") == 1
    edges = [{"finding": "f", "measure": "m", "ours": v, "article_range": [0.1, 0.9]} for v in (0.1, 0.9, None)]
    assert [ln.endswith("| yes |") for ln in DF.table([PLAIN_20], edges).split("\n")[8:11]] == [True, True, False]
    late = DF.table([{**PLAIN_20, "seeds": [3, 4, 5]}]).split("\n")[4]
    assert late == "Median (min–max) over seeds 3..5."
    assert DF.table([{**PLAIN_20, "n": 1, "seeds": []}]).split("\n")[2].startswith("| plain | 20 | 1 | 272,474 | 0.123 |")


def test_every_pairs_csv_field_by_hand():
    got = list(csv.DictReader(io.StringIO(DF.pairs_csv([RES_20, CLAIMS]))))
    claim, exploratory = got[0], got[3]
    assert {k: claim[k] for k in ("study", "kind", "metric", "n", "coverage", "verdict")} == {
        "study": "degrade", "kind": "claim", "metric": "train_error", "n": "10", "coverage": "0.978515625", "verdict": "in order"}
    assert {k: exploratory[k] for k in ("study", "n", "coverage", "p_exact", "difference_hi", "source")} == {
        "study": "degrade", "n": "3", "coverage": "", "p_exact": "true", "difference_hi": "", "source": ""}
    ranged = {**RES_20, "paired": {"test_acc": {**EXPLORATORY, "interval": [-0.02, 0.005], "coverage": 0.75}}}
    (row,) = list(csv.DictReader(io.StringIO(DF.pairs_csv([ranged]))))
    assert (row["difference_lo"], row["difference_hi"], row["coverage"]) == ("-2.0", "0.5", "0.75")
