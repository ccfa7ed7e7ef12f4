"""results/markdown.py on hand-made records, each output written out here in full: the study table
(a row with a spread, one with diverged seeds and the paper's "fail", one seed, none), the reading's
orders (ties, a diverged row last, groups, Kendall's tau exact and Monte Carlo) and the claims'
reading (each verdict, the exploratory pairs, singular and plural, the power line)."""

from resnet_cli.results import markdown

HEADER = ("| # | row | ours: median % | interval of the median (coverage) | mean ± std (n) | train loss | status "
          "| paper % |\n|---|---|---|---|---|---|---|---|\n")


def row(index, label, median, paper, **more):
    return {"event": "row", "index": index, "row": label, "test_error_median": median, "paper": paper, **more}


def test_the_table_shows_spread_diverged_seeds_fails_and_empty_rows():
    records = [
        row(1, "original", 6.0, 6.61, n=3, diverged=0, interval=[5.0, 7.0], coverage=0.75, test_error_mean=6.0,
            test_error_std=1.0, train_loss=0.012345, status="3 completed"),
        row(2, "dropout", 90.0, "fail", fail=True, n=3, diverged=1, interval=[80.0, 90.0], coverage=0.75,
            test_error_mean=85.0, test_error_std=5.0, train_loss=2.302585, status="2 completed, 1 diverged"),
        row(3, "1x1 conv", 7.25, None, n=1, diverged=0, interval=None, coverage=None, test_error_mean=7.25,
            test_error_std=None, train_loss=None, status="1 completed"),
        row(4, "gating", None, 12.86, n=0, train_loss=None, status="not started"),
        # an older record, from before the interval field: recomputed from its seeds' errors
        row(5, "scaling", 6.0, 12.35, n=3, test_errors=[7.0, 5.0, 6.0], test_error_mean=6.0, test_error_std=1.0,
            train_loss=0.5, status="3 completed"),
        {"event": "study", "claims": []},
    ]
    assert markdown.ablate_table(records) == HEADER + (
        "| 1 | original | 6.00 | [5.00, 7.00] 75% | 6.00 ± 1.00 (3) | 0.0123 | 3 completed | 6.61 |\n"
        "| 2 | dropout | 90.00 **fail** | [80.00, 90.00] 75% | 85.00 ± 5.00 (3, 1 diverged) | 2.3026 "
        "| 2 completed, 1 diverged | fail |\n"
        "| 3 | 1x1 conv | 7.25 | n < 3: no interval | 7.25 (1) | - | 1 completed | - |\n"
        "| 4 | gating | - | - | - | - | not started | 12.86 |\n"
        "| 5 | scaling | 6.00 | [5.00, 7.00] 75% | 6.00 ± 1.00 (3) | 0.5000 | 3 completed | 12.35 |\n")


def pair(better, worse, verdict, n, shift, interval=None, coverage=None, metric="test_error", **more):
    return {"better": better, "worse": worse, "verdict": verdict, "n": n, "shift": shift, "interval": interval,
            "coverage": coverage, "metric": metric, **more}


def test_the_claims_reading_counts_each_verdict_and_keeps_the_exploratory_pairs_apart():
    study = {
        "family": {"size": 3, "declared": True},
        "claims": [
            pair("original", "dropout", "in order", 8, 1.5, [0.5, 2.5], 0.9296875, p_holm=0.0234),
            pair("original", "1x1 conv", "unresolved", 10, 0.25, metric="train_loss", p=0.0625, p_holm=0.125,
                 mean=0.3, sd=0.2, seeds_needed={"estimate": 9, "range": [6, 40]}),
            pair("gating", "original", "reversed", 8, -2.0, [-3.0, -1.0], 0.9296875, metric="val_error",
                 p_holm=0.04),
        ],
        "exploratory": [
            pair("a", "b", "exploratory", 0, None, mean=None, sd=None),
            pair("a", "c", "exploratory", 1, 1.0, mean=1.0, sd=None),
            pair("c", "d", "exploratory", 8, 0.1, mean=0.1, sd=0.5, p=0.8125,
                 seeds_needed={"estimate": None, "more_than": 200}),
        ],
        "power": "the quick preset's 12 seeds resolve a 2-sd gap with 80% power",
    }
    assert markdown.claims_reading(study) == (
        "Its 3 declared claims, by the sign-flip test of the differences paired by seed with Holm's adjustment "
        "over them: 1 in the paper's order and resolved, 1 unresolved, 1 reversed and resolved. "
        "In the paper's order (resolved at n = 8): original < dropout (difference +1.50 [+0.50, +2.50] 92.9%, "
        "Holm p 0.0234). "
        "Unresolved at n = 10: original < 1x1 conv in train loss (difference +0.25, p 0.0625, Holm 0.125; about 9 "
        "seeds (6-40 over the sd's own uncertainty) would resolve it with 80% power). "
        "Reversed (resolved at n = 8): gating < original (difference -2.00 [-3.00, -1.00] 92.9%, Holm p 0.04). "
        "Exploratory pairs (3: raw p, not adjusted, never called resolved): a < b (no seed in common); "
        "a < c (difference +1.00, one seed: no spread); c < d (difference +0.10, p 0.812; more than 200 seeds "
        "would be needed to resolve it with 80% power). "
        "The quick preset's 12 seeds resolve a 2-sd gap with 80% power.")


def test_one_undeclared_pair_is_singular_and_its_seeds_counts_are_listed():
    kept = [pair("A", "B", "in order", 8, 1.0, p_holm=0.01), pair("A", "C", "in order", 10, 2.0, p_holm=0.02)]
    study = {"family": {"size": 1, "declared": False}, "claims": kept[:1], "exploratory": []}
    assert markdown.claims_reading(study) == (
        "The 1 pair with a paper figure (no claims declared: the family), by the sign-flip test of the differences "
        "paired by seed with Holm's adjustment over them: 1 in the paper's order and resolved, 0 unresolved, "
        "0 reversed and resolved. In the paper's order (resolved at n = 8): A < B (difference +1.00, Holm p 0.01).")
    two = markdown.claims_reading({"family": {"size": 2, "declared": False}, "claims": kept, "exploratory": []})
    assert two.startswith("Its 2 pairs with a paper figure (no claims declared: the family),")
    assert "(resolved at n = 8/10): A < B (difference +1.00, Holm p 0.01); A < C (difference +2.00, Holm p 0.02)." in two
    assert markdown.claims_reading({"family": {"size": 1, "declared": True}, "claims": [], "exploratory": []}) == (
        "No declared claim has both its rows here.")
    assert markdown.claims_reading({"family": {"size": 0, "declared": False}, "claims": [], "exploratory": []}) == ""


def test_the_orders_tie_equal_medians_put_a_diverged_row_last_and_count_the_fails():
    records = [
        row(1, "A", 5.0, 6.0), row(2, "B", 5.0, 7.0), row(3, "C", 4.0, 7.0),
        row(4, "D", 90.0, "fail", fail=True), row(5, "E", None, 8.0),  # E: every seed diverged
        row(6, "F", 10.0, "fail"),  # the paper's fail that trains here
        {"event": "study", "claims": [], "family": {"size": 0, "declared": False}, "exploratory": [],
         "orders": [{"group": None, "kendall_tau": 0.333, "p_value": 0.25, "p_exact": False, "rows": 3,
                     "left_out": 1}]},
    ]
    assert markdown.ablate_order(records) == (
        "Rows with a paper figure, best first: paper 1 < 2 = 3 < 5; ours 3 < 1 = 2 < 5. Kendall's tau 0.33 "
        "(one-sided permutation p = 0.250, Monte Carlo, 3 rows, 1 failing row left out). "
        "The paper's \"fail\" rows failing here: 1 of 2. Rows the paper trains that fail here: 5.\n")


def test_each_group_reads_alone_and_a_group_of_one_has_no_order():
    records = [
        row(1, "A", 7.0, 6.0, group="CIFAR-10"), row(2, "B", 5.0, 7.0, group="CIFAR-10"),
        row(3, "C", 3.0, 5.0, group="ImageNet"), row(4, "D", 9.0, 8.0, fail=True, group="ImageNet-2"),
        {"event": "study", "claims": [], "family": {"size": 0, "declared": False}, "exploratory": [],
         "orders": [{"group": "CIFAR-10", "kendall_tau": -1.0, "p_value": 1.0, "p_exact": True, "rows": 2,
                     "left_out": 2}]},
    ]
    assert markdown.ablate_order(records) == (
        "CIFAR-10: rows with a paper figure, best first: paper 1 < 2; ours 2 < 1. Kendall's tau -1.00 "
        "(one-sided permutation p = 1.000, exact, 2 rows, 2 failing rows left out). "
        "Rows the paper trains that fail here: 4.\n")
    no_tau = records[:2] + [{**records[-1], "orders": []}]
    assert markdown.ablate_order(no_tau) == "CIFAR-10: rows with a paper figure, best first: paper 1 < 2; ours 2 < 1.\n"


def test_the_seeds_a_claim_needs_show_their_spread_only_where_there_is_one():
    assert markdown.seeds_needed_str(None) == ""
    assert markdown.seeds_needed_str({"estimate": 10, "range": [10, 10]}) == (
        "about 10 seeds would resolve it with 80% power")
    assert markdown.seeds_needed_str({"estimate": 12, "range": [7, None]}) == (
        "about 12 seeds (7-more than 200 over the sd's own uncertainty) would resolve it with 80% power")


def test_rows_without_a_study_object_are_compared_as_every_pair_with_a_paper_figure():
    """Hand-made rows (no study object): the family is the one pair with paper figures, paired by
    seed. B is A plus 1 at each of 6 seeds, listed in another order: every difference is +1, the
    exact sign-flip p is 2/64, Holm over 1 leaves it: resolved in the paper's order (6.61 < 7.00)."""
    a = row(1, "A", 3.5, 6.61, seeds=[0, 1, 2, 3, 4, 5], test_errors=[1.0, 2.0, 3.0, 4.0, 5.0, 6.0], group=None)
    b = row(2, "B", 4.5, 7.0, seeds=[5, 4, 3, 2, 1, 0], test_errors=[7.0, 6.0, 5.0, 4.0, 3.0, 2.0])
    c = {**row(3, "C", None, None), "event": "config"}  # not a row
    text = markdown.ablate_order([a, b, c])
    assert text.startswith("Rows with a paper figure, best first: paper 1 < 2; ours 1 < 2.")
    assert ("The 1 pair with a paper figure (no claims declared: the family), by the sign-flip test of the "
            "differences paired by seed with Holm's adjustment over them: 1 in the paper's order and resolved, "
            "0 unresolved, 0 reversed and resolved. In the paper's order (resolved at n = 6): A < B "
            "(difference +1.00 [+1.00, +1.00] 96.8%, Holm p 0.0312).") in text


def test_cells_keep_words_and_write_numbers_to_their_digits():
    assert (markdown.fixed("fail"), markdown.fixed(None), markdown.fixed(1.25, 1)) == ("fail", "-", "1.2")
    assert (markdown.paper_cell(7.5), markdown.paper_cell("fail"), markdown.paper_cell(None)) == ("7.50", "fail", "-")


def test_the_table_skips_records_that_are_not_rows_wherever_they_come():
    config = {"event": "config", "study": "shortcut"}
    one = row(1, "original", 6.0, 6.61, n=1, interval=None, coverage=None, test_error_mean=6.0, test_error_std=None,
              train_loss=0.25, status="1 completed")
    assert markdown.ablate_table([config, one]) == HEADER + (
        "| 1 | original | 6.00 | n < 3: no interval | 6.00 (1) | 0.2500 | 1 completed | 6.61 |\n")


def test_one_declared_claim_is_singular_and_several_unresolved_or_reversed_pairs_are_listed():
    study = {"family": {"size": 1, "declared": True},
             "claims": [pair("A", "B", "unresolved", 4, 0.5, p=0.25, mean=0.5, sd=1.0)], "exploratory": []}
    assert markdown.claims_reading(study) == (
        "The 1 declared claim, by the sign-flip test of the differences paired by seed with Holm's adjustment over "
        "them: 0 in the paper's order and resolved, 1 unresolved, 0 reversed and resolved. "
        "Unresolved at n = 4: A < B (difference +0.50, p 0.25).")
    four = {"family": {"size": 4, "declared": True}, "exploratory": [], "claims": [
        pair("A", "B", "unresolved", 4, 0.5, p=0.25, mean=0.5, sd=1.0),
        pair("A", "C", "unresolved", 4, 0.75, p=0.375, mean=0.75, sd=1.0),
        pair("D", "E", "reversed", 8, -1.0, p_holm=0.03), pair("D", "F", "reversed", 8, -2.0, p_holm=0.04)]}
    assert markdown.claims_reading(four).endswith(
        "Unresolved at n = 4: A < B (difference +0.50, p 0.25); A < C (difference +0.75, p 0.375). "
        "Reversed (resolved at n = 8): D < E (difference -1.00, Holm p 0.03); D < F (difference -2.00, Holm p 0.04).")


def test_a_tau_with_nothing_left_out_and_an_older_order_without_its_method_reads_exact():
    records = [row(1, "A", 5.0, 6.0), row(2, "B", 6.0, 7.0), row(3, "C", 7.0, 8.0),
               {"event": "study", "claims": [], "family": {"size": 0, "declared": False}, "exploratory": [],
                "orders": [{"group": None, "kendall_tau": 1.0, "p_value": 0.167, "rows": 3, "left_out": 0}]}]
    assert markdown.ablate_order(records) == (
        "Rows with a paper figure, best first: paper 1 < 2 < 3; ours 1 < 2 < 3. Kendall's tau 1.00 "
        "(one-sided permutation p = 0.167, exact, 3 rows).\n")


def test_a_group_of_one_read_first_does_not_end_the_orders():
    records = [row(1, "A", 3.0, 5.0, group="ImageNet"), row(2, "B", 7.0, 6.0, group="CIFAR-10"),
               row(3, "C", 5.0, 7.0, group="CIFAR-10"),
               {"event": "study", "claims": [], "family": {"size": 0, "declared": False}, "exploratory": [],
                "orders": []}]
    assert markdown.ablate_order(records) == "CIFAR-10: rows with a paper figure, best first: paper 2 < 3; ours 3 < 2.\n"


def test_the_paper_trains_rows_that_fail_here_listed_or_none():
    study = {"event": "study", "claims": [], "family": {"size": 0, "declared": False}, "exploratory": [],
             "orders": []}
    fails_only_where_the_paper_fails = [row(1, "A", 5.0, 6.0), row(2, "B", 90.0, "fail", fail=True), study]
    assert markdown.ablate_order(fails_only_where_the_paper_fails) == (
        "The paper's \"fail\" rows failing here: 1 of 1. Rows the paper trains that fail here: none.\n")
    two_fail = [row(1, "A", 50.0, 6.0, fail=True), row(2, "B", None, 7.0), row(3, "C", 5.0, 8.0), study]
    assert markdown.ablate_order(two_fail) == (
        "Rows with a paper figure, best first: paper 1 < 2 < 3; ours 3 < 1 < 2. "
        "Rows the paper trains that fail here: 1, 2.\n")


def test_a_single_row_has_no_reading_and_the_study_block_is_table_blank_line_reading():
    one = row(1, "A", 5.0, 6.0, n=1, interval=None, coverage=None, test_error_mean=5.0, test_error_std=None,
              train_loss=0.5, status="1 completed")
    assert markdown.ablate_order([one]) == ""
    two = [one, row(2, "B", 4.0, 7.0, n=1, interval=None, coverage=None, test_error_mean=4.0, test_error_std=None,
                    train_loss=0.5, status="1 completed"),
           {"event": "study", "claims": [], "family": {"size": 0, "declared": False}, "exploratory": [],
            "orders": []}]
    assert markdown.study(two) == HEADER + (
        "| 1 | A | 5.00 | n < 3: no interval | 5.00 (1) | 0.5000 | 1 completed | 6.00 |\n"
        "| 2 | B | 4.00 | n < 3: no interval | 4.00 (1) | 0.5000 | 1 completed | 7.00 |\n"
        "\n"
        "Rows with a paper figure, best first: paper 1 < 2; ours 2 < 1.\n")


def test_rows_without_a_study_object_keep_their_groups_and_leave_failing_rows_out_of_tau():
    """Hand-made rows in one group, the fourth failing (the paper's rule): the tau is over the three
    that train, 1.0, and its exact p is 1/6 (six orders of three rows, one as good as the paper's).
    A study record older than the claims field is read the same way."""
    errors = {1: [5.0, 6.0, 7.0], 2: [6.0, 7.0, 8.0], 3: [7.0, 8.0, 9.0], 4: [30.0, 31.0, 32.0]}
    rows = [row(i, label, errors[i][1], paper, group="CIFAR-10", seeds=[0, 1, 2], test_errors=errors[i],
                **({"fail": True} if i == 4 else {}))
            for i, label, paper in ((1, "A", 6.0), (2, "B", 7.0), (3, "C", 8.0), (4, "D", 9.0))]
    text = markdown.ablate_order(rows)
    assert text.startswith(
        "CIFAR-10: rows with a paper figure, best first: paper 1 < 2 < 3 < 4; ours 1 < 2 < 3 < 4. Kendall's tau 1.00 "
        "(one-sided permutation p = 0.167, exact, 3 rows, 1 failing row left out). ")
    assert markdown.ablate_order(rows + [{"event": "study", "rows": 4}]) == text
