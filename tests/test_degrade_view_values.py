"""results/degrade_view.py on hand-made records, each line written out here: a run's progress line,
a summary's cells (median, range, interval, the published figure or range), the grid table's net
column and caption, the claims' table and the article's findings as the terminal shows them."""

from types import SimpleNamespace

from resnet_cli.results import degrade_view as DV

RUN = {"net": "plain", "depth": 20, "seed": 3, "train_loss": 0.12345, "train_acc": 0.95, "test_acc": 0.9,
       "grad_norm_first_layer": 1.5, "wall_s": 12.34, "status": "completed"}


def test_a_runs_line_names_it_and_says_how_it_was_obtained():
    assert DV.run_text(RUN, False, 3, 12) == ("[  3/12] plain     20 layers  seed 3   train loss 0.123  train acc 0.950  "
                                              "test acc 0.900  grad@1 1.50  (12.3 s)")
    diverged = {**RUN, "net": "residual", "status": "diverged", "wall_s": None, "family": "vit", "train_loss": None}
    assert DV.run_text(diverged, True) == ("residual  20 blocks  seed 3   train loss -  train acc 0.950  test acc 0.900  "
                                           "grad@1 1.50  (reused)  [red]diverged[/]")
    assert DV.run_text({**RUN, "wall_s": None}, False).endswith("(0.0 s)")


def summary(n=3, diverged=0, reference=None, **over):
    s = {"net": "plain", "depth": 20, "n": n, "diverged": diverged, "params": 272474, "reference": reference}
    for metric in ("train_loss", "train_acc", "test_acc", "grad_norm_first_layer"):
        s.update({f"{metric}_median": 0.95, f"{metric}_min": 0.94, f"{metric}_max": 0.96,
                  f"{metric}_interval": [0.945, 0.955], f"{metric}_coverage": 0.75})
    return {**s, **over}


def test_a_cell_stacks_median_range_interval_and_the_published_figure():
    ref = {"train_acc": 0.99, "train_acc_range": (0.966, 0.988), "grad_norm_first_layer_range": (0.4, 0.7)}
    s = summary(reference=ref)
    assert DV._cell(s, "train_acc", 2) == "0.95\n0.94-0.96\n0.94~0.95 75%\n[dim]pub 0.99[/]\n[dim]0.97-0.99[/]"
    assert DV._cell(s, "grad_norm_first_layer", 2) == "0.95\n0.94-0.96\n0.94~0.95 75%\n[dim]pub 0.40-0.70[/]"
    one = summary(n=1, train_loss_interval=None)
    assert DV._cell(one, "train_loss", 3) == "0.950"  # one seed: no range, no interval
    assert DV._cell(summary(train_loss_median=None, train_loss_interval=None), "train_loss", 3) == "-"


def cells(table, column):
    return list(table.columns[column]._cells)


def test_the_grid_table_puts_n_and_divergence_under_the_net_and_names_its_sources():
    article = {"source": "the article, 10 seeds"}
    t = DV.table([summary(diverged=1, reference=article), summary(n=2, reference={"source": "He 2016a Table 6"}),
                  summary(reference=article)], "digits")
    assert cells(t, 0) == ["plain\nn=3\n[red]1 div.[/]", "plain\nn=2", "plain\nn=3"]
    assert cells(t, 2) == ["0.27M"] * 3
    assert t.title == "degradation: plain vs residual (digits)"
    assert t.caption.endswith("; pub = published (He 2016a Table 6; the article, 10 seeds)")
    assert not DV.table([summary()], "digits").caption.endswith(")")  # no published figure: no pub note


CLAIMS = {"family": {"size": 4}, "power": "10 seeds resolve a 1-sd gap with 80% power",
          "claims": [{"better": "residual-56", "worse": "plain-56", "metric": "test_error", "shift": 40.0, "interval": [30.0, 50.0],
                      "coverage": 0.978515625, "n": 10, "p_holm": 0.004, "verdict": "in order"},
                     {"better": "plain-20", "worse": "plain-56", "metric": "train_error", "shift": None, "interval": None, "n": 0,
                      "p_holm": None, "verdict": "unresolved"}]}


def test_the_claims_table_gives_each_claims_difference_and_verdict():
    t = DV.claims_table(CLAIMS)
    assert t.title == "He 2016a's claims, error % (Holm over 4)"
    assert [cells(t, i) for i in range(6)] == [
        ["residual-56 < plain-56", "plain-20 < plain-56"], ["test", "train"], ["+40.00 [+30.00, +50.00] 97.8%", "-"], ["10", "0"],
        ["0.004", "-"], ["[green]in order[/]", "[yellow]unresolved[/]"]]
    assert t.caption.endswith("coverage; 10 seeds resolve a 1-sd gap with 80% power")
    assert DV.claims_table(None) is None and DV.claims_table({**CLAIMS, "claims": []}) is None


def test_the_findings_say_whether_each_median_is_within_the_articles_range():
    said = []
    log = SimpleNamespace(print=said.append)
    grid = SimpleNamespace(findings=[
        {"finding": "plain-26 degrades", "measure": "median training accuracy, plain", "ours": 0.6, "article": 0.56,
         "article_range": (0.395, 0.834), "in_range": True},
        {"finding": "residual-26's step-1 gradient", "measure": "median first-conv norm, residual", "ours": 0.9,
         "article": None, "article_range": (0.4, 0.7), "in_range": False}])
    DV.findings(grid, log)
    assert said == [
        "the Residual Connection article's findings on 8x8 digits, our medians beside its figures:",
        "  plain-26 degrades: median training accuracy, plain 0.60 (article: 0.56, 10 seeds 0.395-0.834)  "
        "within the article's 10-seed range",
        "  residual-26's step-1 gradient: median first-conv norm, residual 0.90 (article: 10 seeds 0.4-0.7)  "
        "[yellow]outside the article's 10-seed range[/]"]
    said.clear()
    DV.findings(SimpleNamespace(findings=None), log)
    assert said == []


def test_the_json_records_are_the_runs_then_the_summaries_then_the_claims():
    run = {**RUN, "extra": "not printed", "iterations": 100, "params": 1000}
    grid = SimpleNamespace(records=[run], summaries=[{"net": "plain", "depth": 20}], claims={"event": "claims"})
    got = DV.json_records(grid, "row")
    assert got[0] == {k: run.get(k) for k in DV.RUN_KEYS} and "extra" not in got[0] and got[0]["event"] is None
    assert got[1:] == [{"net": "plain", "depth": 20, "event": "row"}, {"event": "claims"}]
    assert DV.json_records(SimpleNamespace(records=[], summaries=[], claims=None)) == []


def test_a_cell_keeps_its_digits_in_the_interval_and_shows_two_seeds_range():
    assert DV._cell(summary(), "train_loss", 3) == "0.950\n0.940-0.960\n0.945~0.955 75%"
    two = summary(n=2, train_acc_interval=None)
    assert DV._cell(two, "train_acc", 2) == "0.95\n0.94-0.96"  # two seeds: their range, no interval yet


def headers(table):
    return [c.header for c in table.columns]


def test_the_tables_headers_and_captions_read_whole():
    t = DV.table([summary(), summary(depth=56)], "digits")
    assert headers(t) == ["net", "depth", "params", "train\nloss", "train\nacc", "test\nacc", "grad@1"]
    assert cells(t, 1) == ["20", "56"]
    assert t.caption == ("each cell: median over seeds, min-max below, then the median's order-statistic interval "
                         "with the coverage it has (lo~hi NN%; none below 3 seeds); train = the last epoch's average; "
                         "accuracies as fractions; grad@1 = ||dE/dW|| of the first conv at step 1")
    c = DV.claims_table(CLAIMS)
    assert headers(c) == ["claim", "error", "difference", "n", "Holm p", "verdict"]
    assert c.caption == ("difference: worse minus better, Hodges-Lehmann with its exact interval and coverage; "
                         "10 seeds resolve a 1-sd gap with 80% power")


def test_degrade_names_its_summaries_summary():
    grid = SimpleNamespace(records=[], summaries=[{"net": "plain"}], claims=None)
    assert DV.json_records(grid) == [{"net": "plain", "event": "summary"}]
