"""Signal-propagation statistics at init (Brock, De and Smith 2021) against hand computations, and
`resnet gradnorm --signal` end to end."""

import json

import pytest
import torch
from typer.testing import CliRunner

from resnet_cli import spec as S
from resnet_cli.cli import app
from resnet_cli.analysis.gradnorm import signal as sig
from resnet_cli.model import build_model


def test_channel_stats_by_hand():
    torch.manual_seed(0)
    x = torch.randn(5, 3, 4, 2) * torch.tensor([1.0, 2.0, 0.5])[None, :, None, None] + torch.tensor([0.0, 1.0, -3.0])[None, :, None, None]
    means, variances = [], []
    for c in range(3):
        values = [float(x[n, c, h, w]) for n in range(5) for h in range(4) for w in range(2)]
        m = sum(values) / len(values)
        means.append(m * m)
        variances.append(sum((v - m) ** 2 for v in values) / len(values))
    sq_mean, var = sig.channel_stats(x)
    assert sq_mean == pytest.approx(sum(means) / 3, rel=1e-5)
    assert var == pytest.approx(sum(variances) / 3, rel=1e-5)


def net(**model):
    s = S.load({"model": {"depth": 14, "widths": [4, 8, 8], **model}})
    torch.manual_seed(0)
    return build_model(s.model, 3, 10)


def test_units_read_the_units_outputs_and_branches():
    model = net()
    x = torch.randn(32, 3, 8, 8)
    result = sig.measure("BN", model, x)
    assert [u["unit"] for u in result.units] == list(range(1, 7))
    with torch.no_grad():  # the same forward pass, unit by unit, by hand
        h = model.stem(x)
        for unit, row in zip(model.units, result.units):
            fx = unit.branch(unit.shared_pre(h))
            h = unit(h)
            assert (row["sq_mean"], row["var"]) == pytest.approx(sig.channel_stats(h), rel=1e-5)
            assert row["branch_var"] == pytest.approx(sig.channel_stats(fx)[1], rel=1e-5)
            # the original unit's branch ends in BN with batch statistics and gamma 1: variance 1 (less eps)
            assert row["branch_var"] == pytest.approx(1.0, abs=1e-3)


@pytest.mark.parametrize("model", [{"norm": "fixup"}, {"norm": "none", "shortcut": {"kind": "skipinit"}},
                                   {"norm": "none", "shortcut": {"kind": "rezero"}}])
def test_zero_initialised_branches_add_nothing(model):
    result = sig.measure("x", net(**model), torch.randn(32, 3, 8, 8))
    assert all(u["branch_var"] == 0.0 for u in result.units)
    assert all(u["var"] > 0 for u in result.units)


def test_an_unnormalised_he_net_grows_unit_by_unit():
    result = sig.measure("none", net(norm="none"), torch.randn(32, 3, 8, 8))
    var = [u["var"] for u in result.units]
    assert var[1] > var[0] and var[3] > var[2] and var[5] > var[4]  # within each stage of two units


def test_gradnorm_signal_command(tmp_path):
    fig = tmp_path / "signal.png"
    res = CliRunner().invoke(app, ["gradnorm", "--signal", "--depth", "8", "--json", "--out", str(fig)])
    assert res.exit_code == 0, res.output
    rows = [json.loads(line) for line in res.stdout.splitlines()]
    assert rows[-1] == {"event": "figure", "path": str(fig)}
    rows = rows[:-1]
    assert {r["event"] for r in rows} == {"signal_unit"}
    assert [r["spec"] for r in rows] == [n for n in sig.NETS for _ in range(3)]
    assert all(r["branch_var"] == 0 for r in rows if r["spec"] in ("Fixup", "SkipInit", "ReZero"))
    assert fig.stat().st_size > 0


def test_the_figure_draws_each_nets_positive_points_and_names_the_nets_at_zero(monkeypatch, tmp_path):
    """Brock et al. Fig. 1's three panels read back from matplotlib: a log axis cannot draw 0, so a
    net's zero points are left out and a net at 0 everywhere is named on the panel instead."""
    from matplotlib.colors import to_rgb

    from drawn import drawn_figure

    bn = sig.NetSignal("BN", [{"unit": 1, "sq_mean": 0.5, "var": 1.0, "branch_var": 0.25},
                              {"unit": 2, "sq_mean": 0.0, "var": 1.1, "branch_var": 0.5}])
    skipinit = sig.NetSignal("SkipInit", [{"unit": 1, "sq_mean": 0.2, "var": 2.0, "branch_var": 0.0},
                                          {"unit": 2, "sq_mean": 0.3, "var": 4.0, "branch_var": 0.0}])
    fig = drawn_figure(monkeypatch, lambda path: sig.figure([skipinit, bn], path), tmp_path / "s.png")
    panels = fig.axes
    assert [ax.get_title() for ax in panels] == ["average channel squared mean", "average channel variance",
                                                 "residual branch variance"]
    assert all(ax.get_yscale() == "log" and ax.get_xlabel() == "residual unit l" for ax in panels)
    drawn = [{ln.get_label(): (list(ln.get_xdata()), list(ln.get_ydata())) for ln in ax.get_lines()} for ax in panels]
    assert drawn == [{"BN": ([1], [0.5]), "SkipInit": ([1, 2], [0.2, 0.3])},
                     {"BN": ([1, 2], [1.0, 1.1]), "SkipInit": ([1, 2], [2.0, 4.0])},
                     {"BN": ([1, 2], [0.25, 0.5])}]
    assert [[t.get_text() for t in ax.texts] for ax in panels] == [[], [], ["0 at every unit: SkipInit"]]
    # one colour a net in every panel: BN keeps the second colour where SkipInit, the first, draws nothing
    for ax in panels:
        (line,) = [ln for ln in ax.get_lines() if ln.get_label() == "BN"]
        assert to_rgb(line.get_color()) == to_rgb("C1")
    assert fig._suptitle.get_text().startswith("signal propagation at initialisation (Brock, De and Smith 2021)")


def test_a_plain_unit_adds_its_whole_branch_and_no_hook_stays_behind():
    """A plain unit (no shortcut) has nothing to subtract: what it adds is its branch's output, read
    here by hand unit by unit. The hooks go when the measurement ends."""
    model = net(shortcut={"kind": "none"})
    x = torch.randn(32, 3, 8, 8)
    result = sig.measure("plain", model, x)
    with torch.no_grad():
        h = model.stem(x)
        for unit, row in zip(model.units, result.units):
            fx = unit.branch(unit.shared_pre(h))
            h = unit(h)
            assert row["branch_var"] == pytest.approx(sig.channel_stats(fx)[1], rel=1e-5)
    assert all(not u._forward_hooks and not u.combine._forward_hooks for u in model.units)
