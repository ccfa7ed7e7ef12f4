"""The values `resnet lesion` reports and draws, each against an independent computation: every
lesioned net evaluated whole by `train.evaluate` (not by the study's one-pass shortcut), the
subsets counted by itertools, the units' shapes by hand from the spec, and the figure read back
from the artists matplotlib holds (Veit et al. 2016 Fig. 3: error per deleted unit, and against
the number deleted)."""

import itertools
import math
import statistics
import time

import numpy as np
import pytest
import torch
from matplotlib.ticker import MaxNLocator
from typer.testing import CliRunner

from resnet_cli import data as D
from resnet_cli import spec as S
from resnet_cli.analysis import lesion as L
from resnet_cli.analysis.trained import Trained, load_run, runtime_for
from resnet_cli.cli import app
from resnet_cli.model import build_model
from resnet_cli.training.evaluation import evaluate

from drawn import drawn_figure

CPU = torch.device("cpu")


@pytest.fixture(scope="module")
def residual14(tmp_path_factory):
    """A digits ResNet-14 (6 units, one stage of width 4), one epoch: small enough to evaluate every
    one of its 2^6 lesioned nets whole."""
    out = tmp_path_factory.mktemp("lesion-values") / "residual14"
    r = CliRunner().invoke(app, ["train", "digits/residual8", "--set", "model.depth=14", "--set", "model.widths=[4]",
                                 "--epochs", "1", "--out", str(out)])
    assert r.exit_code == 0, r.stderr
    return out


def evaluated(trained: Trained, pick) -> tuple[float, float]:
    """Test loss and error (%) of the net with these 0-based units deleted, its forward run whole."""
    with L.lesioned(trained.model, list(pick)):
        return evaluate(trained.model, trained.data, "test", runtime_for(CPU), batch_size=1000)


def test_the_study_record_is_each_lesioned_net_evaluated_whole(residual14):
    trained = load_run(residual14)
    said = []
    start = time.perf_counter()
    got = L.study(trained, max_k=None, draws=50, seed=3, log=said.append)  # 50 >= C(6, k): every subset, every k
    spent = time.perf_counter() - start
    base_loss, base_err = evaluated(trained, ())
    assert got["baseline"] == {"test_loss": pytest.approx(base_loss, rel=1e-6), "test_error": base_err}
    want_units = []
    for i in range(6):
        loss, err = evaluated(trained, (i,))
        want_units.append({"unit": i + 1, "name": f"unit{i}", "stage": 1, "in_channels": 4, "out_channels": 4,
                           "stride": 1, "downsampling": False, "deletable": True, "deletion": "branch->0",
                           "test_loss": pytest.approx(loss, rel=1e-6), "test_error": err,
                           "delta": pytest.approx(err - base_err, abs=1e-9)})
    assert got["units"] == want_units
    want_k = []
    for k in range(7):
        errs = [evaluated(trained, pick)[1] for pick in itertools.combinations(range(6), k)]
        assert len(errs) == math.comb(6, k)
        want_k.append({"k": k, "draws": len(errs), "median": pytest.approx(statistics.median(errs), abs=1e-9),
                       "min": min(errs), "max": max(errs)})
    assert got["k"] == want_k  # max_k left open: every k up to all 6 units
    assert len({row["median"] for row in got["k"]}) > 2  # deletions cost: the medians are not all one value
    assert got["undeletable"] == []
    assert (got["run"], got["label"], got["residual"], got["classes"]) == (str(residual14), "ResNet-14", True, 10)
    assert 0 < got["wall_s"] <= spent
    assert said == ["ResNet-14: 6 single deletions done"] + [
        f"ResNet-14: k={k}/6  median error {statistics.median(evaluated(trained, p)[1] for p in itertools.combinations(range(6), k)):.2f}% "
        f"over {math.comb(6, k)} draws" for k in range(1, 7)]


def plain_cifar_net() -> Trained:
    """A plain (shortcut none) CIFAR-family net of 6 units on 8x8 synthetic images, widths 2/4/4:
    units 3 and 5 open stages 2 and 3 (stride 2; unit 3 also widens), so they cannot be deleted."""
    s = S.resolve(S.validate({
        "data": {"dataset": "synthetic", "synthetic": {"image_size": 8, "train_size": 64, "test_size": 96}},
        "model": {"depth": 14, "widths": [2, 4, 4], "shortcut": {"kind": "none"}}}))
    data = D.load(s.data)
    torch.manual_seed(0)
    model = build_model(s.model, data.in_channels, data.num_classes)
    with torch.no_grad():  # BN away from its identity, so deleting a unit changes the logits
        for m in model.modules():
            if isinstance(m, torch.nn.BatchNorm2d):
                m.running_mean.uniform_(-0.5, 0.5), m.running_var.uniform_(0.5, 2)
                m.weight.uniform_(0.5, 1.5), m.bias.uniform_(-0.5, 0.5)
    return Trained(path=None, spec=s, model=model.eval(), data=data, device=CPU)


def drawn_picks(monkeypatch, trained: Trained, **kwargs) -> tuple[dict, list[tuple[int, ...]]]:
    """study(trained, **kwargs) and the random picks it evaluated (its second errors() call)."""
    calls, real = [], L.errors
    monkeypatch.setattr(L, "errors", lambda model, data, rt, picks, **kw: calls.append(list(picks)) or
                        real(model, data, rt, picks, **kw))
    got = L.study(trained, **kwargs)
    monkeypatch.setattr(L, "errors", real)
    return got, calls[1]


def test_a_plain_net_keeps_its_downsampling_units_and_draws_among_the_rest(monkeypatch):
    trained = plain_cifar_net()
    got, picks = drawn_picks(monkeypatch, trained, max_k=2, draws=2, seed=0)
    shapes = [(2, 2, 1), (2, 2, 1), (2, 4, 2), (4, 4, 1), (4, 4, 2), (4, 4, 1)]  # in, out, stride by hand
    assert [(u["in_channels"], u["out_channels"], u["stride"]) for u in got["units"]] == shapes
    assert [u["stage"] for u in got["units"]] == [1, 1, 2, 2, 3, 3]
    assert [u["deletion"] for u in got["units"]] == ["unit->identity", "unit->identity", None, "unit->identity",
                                                     None, "unit->identity"]
    for u in (got["units"][2], got["units"][4]):
        assert (u["downsampling"], u["deletable"], u["test_loss"], u["test_error"], u["delta"]) == (
            True, False, None, None, None)
    assert got["undeletable"] == [3, 5]
    assert (got["run"], got["label"], got["residual"]) == ("None", "plain-14", False)
    # C(4, 1) = 4 and C(4, 2) = 6 exceed 2 draws: random distinct subsets of the deletable units only
    assert [len(p) for p in picks] == [1, 1, 2, 2]
    for k, group in ((1, picks[:2]), (2, picks[2:])):
        assert len(set(group)) == 2 and all(set(p) <= {0, 1, 3, 5} and list(p) == sorted(set(p)) for p in group)
        errs = [evaluated(trained, p)[1] for p in group]
        assert got["k"][k] == {"k": k, "draws": 2, "median": pytest.approx(statistics.median(errs), abs=1e-9),
                               "min": min(errs), "max": max(errs)}
    base = evaluated(trained, ())[1]
    assert got["k"][0] == {"k": 0, "draws": 1, "median": base, "min": base, "max": base}
    again = drawn_picks(monkeypatch, trained, max_k=2, draws=2, seed=0)[1]
    other = drawn_picks(monkeypatch, trained, max_k=2, draws=2, seed=1)[1]
    assert again == picks and other != picks  # the seed decides the draws, and only the seed


def test_subsets_are_every_combination_or_distinct_random_draws():
    assert L._subsets(5, 2, 10, np.random.default_rng(0)) == list(itertools.combinations(range(5), 2))  # C = draws
    assert L._subsets(4, 4, 3, np.random.default_rng(0)) == [(0, 1, 2, 3)]
    drawn = L._subsets(6, 3, 15, np.random.default_rng(7))  # 15 of the 20
    assert len(drawn) == 15 and len(set(drawn)) == 15
    assert all(len(set(p)) == 3 and list(p) == sorted(p) and set(p) <= set(range(6)) for p in drawn)
    assert L._subsets(6, 3, 15, np.random.default_rng(7)) == drawn


# --- the figure ----------------------------------------------------------------------------------

def result(label, residual, errors, downsampling, base, k_rows, classes=10):
    units = [{"unit": i + 1, "test_error": e, "downsampling": i + 1 in downsampling} for i, e in enumerate(errors)]
    return {"label": label, "residual": residual, "units": units, "baseline": {"test_error": base},
            "classes": classes, "k": [dict(zip(("k", "median", "min", "max"), row)) for row in k_rows]}


RESIDUAL = result("ResNet-8", True, [10.0, 30.0, 12.0], {2}, 8.0, [(0, 8, 8, 8), (1, 12, 10, 30), (2, 33, 20, 41)])
PLAIN = result("plain-8", False, [50.0, None, 70.0], {2}, 9.0, [(0, 9, 9, 9), (1, 60, 50, 70)], classes=4)


def drawn(monkeypatch, tmp_path, results):
    return drawn_figure(monkeypatch, lambda path: L.figure(results, path), tmp_path / "lesion.png").axes


def lines(ax, label=None):
    return [ln for ln in ax.get_lines() if label is None or ln.get_label() == label]


def same_color(a, b) -> bool:
    from matplotlib.colors import to_rgb

    return np.allclose(to_rgb(a), to_rgb(b))


def test_the_figure_draws_each_deletion_where_the_record_puts_it(monkeypatch, tmp_path):
    ax_u, ax_k = drawn(monkeypatch, tmp_path, [RESIDUAL, PLAIN])
    assert ax_u.get_position().x1 <= ax_k.get_position().x0  # side by side, per unit left of per k
    colors = []
    for r, style in ((RESIDUAL, "-"), (PLAIN, "--")):  # plain dashed, residual solid (He 2016a Fig. 6)
        (curve,) = lines(ax_u, r["label"])
        assert list(curve.get_xdata()) == [1, 2, 3]
        assert np.array_equal(curve.get_ydata(), [u["test_error"] if u["test_error"] is not None else np.nan
                                                  for u in r["units"]], equal_nan=True)
        assert (curve.get_marker(), curve.get_linestyle()) == ("o", style)
        colors.append(curve.get_color())
        base = [ln for ln in lines(ax_u) if list(ln.get_ydata()) == [r["baseline"]["test_error"]] * 2]
        assert len(base) == 1 and same_color(base[0].get_color(), curve.get_color())
        assert base[0].get_linestyle() == style and base[0].get_linewidth() < curve.get_linewidth()  # the thin line
        assert base[0].get_alpha() < 1
        (square,) = lines(ax_u, f"{r['label']}: downsampling unit")
        # an undeletable unit has no error: its square sits on the intact net's line
        assert list(square.get_xdata()) == [2] and list(square.get_ydata()) == [
            r["units"][1]["test_error"] if r["units"][1]["test_error"] is not None else r["baseline"]["test_error"]]
        assert (square.get_marker(), square.get_markerfacecolor()) == ("s", "none")  # open, the point shows
        assert same_color(square.get_markeredgecolor(), curve.get_color())
        assert square.get_markersize() > curve.get_markersize()  # around the point, not on it
        (median,) = lines(ax_k, r["label"])
        assert list(median.get_xdata()) == [row["k"] for row in r["k"]]
        assert list(median.get_ydata()) == [row["median"] for row in r["k"]]
        assert (median.get_marker(), median.get_linestyle()) == ("o", style)
        assert same_color(median.get_color(), curve.get_color())
    assert not same_color(*colors)
    bands = ax_k.collections
    assert len(bands) == 2
    for band, r in zip(bands, (RESIDUAL, PLAIN)):
        xy = {tuple(p) for p in band.get_paths()[0].vertices}
        for row in r["k"]:
            assert (row["k"], row["min"]) in xy and (row["k"], row["max"]) in xy
        assert same_color(band.get_facecolor()[0][:3], lines(ax_k, r["label"])[0].get_color())
        assert band.get_alpha() < 1  # the median stays visible through it
    for ax in (ax_u, ax_k):  # chance from the first result's classes: 100 (1 - 1/10)
        (chance,) = lines(ax, "chance")
        assert list(chance.get_ydata()) == [pytest.approx(90.0)] * 2
        assert chance.get_linestyle() == ":" and same_color(chance.get_color(), "grey")
        assert chance.get_linewidth() < lines(ax, "ResNet-8")[0].get_linewidth()
        legend = [t.get_text() for t in ax.get_legend().get_texts()]
        assert {"ResNet-8", "plain-8", "chance"} <= set(legend)
        assert ax.get_legend().get_texts()[0].get_fontsize() < ax.xaxis.label.get_fontsize()
        assert ax.get_ylabel() == "test error (%)"
        assert isinstance(ax.xaxis.get_major_locator(), MaxNLocator)
        assert all(float(t).is_integer() for t in ax.get_xticks())  # units and k are counts
    assert "ResNet-8: downsampling unit" in [t.get_text() for t in ax_u.get_legend().get_texts()]
    assert (ax_u.get_xlabel(), ax_u.get_title()) == ("deleted unit (1-based)",
                                                     "one unit deleted (thin line: nothing deleted)")
    assert (ax_k.get_xlabel(), ax_k.get_title()) == ("units deleted at random, k", "k units deleted (median, min-max)")


def test_each_results_squares_take_its_own_colour(monkeypatch, tmp_path):
    """A first net without downsampling units (a digits net) draws no squares: the next net's squares
    must still take that net's colour, not the next one free."""
    digits = result("ResNet-8 (digits)", True, [10.0, 11.0, 12.0], set(), 8.0, [(0, 8, 8, 8), (1, 11, 10, 12)])
    ax_u, _ = drawn(monkeypatch, tmp_path, [digits, RESIDUAL])
    assert lines(ax_u, "ResNet-8 (digits): downsampling unit") == []
    (square,) = lines(ax_u, "ResNet-8: downsampling unit")
    curve = lines(ax_u, "ResNet-8")[0]
    assert same_color(square.get_markeredgecolor(), curve.get_color())
    assert not same_color(curve.get_color(), lines(ax_u, "ResNet-8 (digits)")[0].get_color())


def test_one_result_draws_chance_from_its_own_classes(monkeypatch, tmp_path):
    ax_u, ax_k = drawn(monkeypatch, tmp_path, [PLAIN])  # 4 classes: chance is 75%
    for ax in (ax_u, ax_k):
        assert list(lines(ax, "chance")[0].get_ydata()) == [pytest.approx(75.0)] * 2
