"""The study bar chart (`resnet ablate --figure`, `resnet report --figure`) shows every seed."""

from resnet_cli.experiments import report

from test_fidelity import _write_run


def test_study_figure_shows_every_seed(tmp_path, monkeypatch):
    """A row whose seeds are far apart (10% and 80%: median 45) must not have its worst seed, or
    the top of its error bar, cut off by the y-axis."""
    from resnet_cli import figures

    for seed, err in enumerate((10.0, 80.0)):
        _write_run(tmp_path, 1, "spread", seed, "completed", err, None)
    _write_run(tmp_path, 2, "steady", 0, "completed", 12.0, None)
    (table,) = report.aggregate(report.collect(tmp_path))
    row = table.rows[0]
    seen, real = {}, figures.save

    def save(fig, path):  # the y-axis as drawn, then the real save
        seen["top"] = fig.axes[0].get_ylim()[1]
        return real(fig, path)

    monkeypatch.setattr(figures, "save", save)
    report.figure(table, tmp_path / "fig.png")
    assert seen["top"] > 80.0 and seen["top"] > row.median() + row.std()
