"""The study bar chart (`resnet ablate --figure`, `resnet report --figure`): every seed shown, the legend narrow."""

import statistics

from resnet_cli.results import report
from resnet_cli.plots import study_bars

from test_fidelity import _write_run


def test_study_figure_shows_every_seed(tmp_path, monkeypatch):
    """A row whose seeds are far apart (10% and 80%: median 45) must not have its worst seed, or
    the top of its error bar, cut off by the y-axis."""
    from resnet_cli import figures

    for seed, err in enumerate((10.0, 80.0)):
        _write_run(tmp_path, 1, "spread", seed, "completed", err, None)
    _write_run(tmp_path, 2, "steady", 0, "completed", 12.0, None)
    (table,) = report.results(report.collect(tmp_path))
    seen, real = {}, figures.save

    def save(fig, path):  # the y-axis as drawn, then the real save
        seen["top"] = fig.axes[0].get_ylim()[1]
        return real(fig, path)

    monkeypatch.setattr(figures, "save", save)
    study_bars.figure(table, tmp_path / "fig.png")
    assert seen["top"] > 80.0 and seen["top"] > 45.0 + statistics.stdev([10.0, 80.0])  # by hand: seeds 10 and 80


def test_a_long_paper_metric_is_wrapped_not_widening_the_figure(tmp_path, monkeypatch):
    """The legend sits beside the bars; a study's metric of 90 characters on one line made the
    figure about twice as wide as its bars. It is kept whole, on lines of at most 40 characters."""
    from resnet_cli import figures

    metric = "CIFAR-10 test error % (CIFAR-100 where the row says so; He 2016a Table 6, He 2016b Tables 2-3)"
    for index, (label, paper) in enumerate((("ResNet-20", 8.75), ("ResNet-56", 6.97)), start=1):
        _write_run(tmp_path, index, label, 0, "completed", 10.0, None, paper=paper, paper_metric=metric)
    (table,) = report.results(report.collect(tmp_path))
    texts, real = [], figures.save

    def save(fig, path):
        texts.extend(t.get_text() for t in fig.axes[0].get_legend().get_texts())
        return real(fig, path)

    monkeypatch.setattr(figures, "save", save)
    study_bars.figure(table, tmp_path / "fig.png")
    (paper,) = [t for t in texts if t.startswith("paper (")]
    assert paper.replace("\n", " ") == f"paper ({metric})"
    assert max(len(line) for line in paper.splitlines()) <= 40
