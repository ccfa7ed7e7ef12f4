"""The landscape's numbers on surfaces whose answers are known by hand: minima counted on small
grids, the curvature of quadratics (whose finite differences are exact: f = p x^2 + q y^2 + c xy
has Hessian [[2p, c], [c, 2q]] at every point, its eigenvalues from numpy), total variation of
lines written out term by term, and the scan's grid points against the loss of the moved weights
computed here. Li et al. 2018 ("Visualizing the Loss Landscape of Neural Nets") for the method."""

import math
import time

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from resnet_cli.analysis import landscape as LS
from resnet_cli.analysis.trained import load_run
from resnet_cli.errors import UserError

from drawn import drawn_figure


# --- 1-D lines ------------------------------------------------------------------------------------

def test_a_line_counts_strict_minima_and_negative_second_differences():
    got = LS.measures([5.0, 3.0, 4.0, 2.0, 6.0])
    # interior 3, 4, 2: minima at 3 (5 > 3 < 4) and 2 (4 > 2 < 6); second differences 3, -3, 6
    assert got["local_minima"] == 2 and got["nonconvex_fraction"] == pytest.approx(1 / 3)
    assert (got["loss_min"], got["loss_max"]) == (2.0, 6.0)
    flat_bottom = LS.measures([3.0, 2.0, 2.0, 3.0])  # a plateau is no strict minimum on either side
    assert flat_bottom["local_minima"] == 0 and flat_bottom["nonconvex_fraction"] == 0.0


def test_curvature_at_float32_rounding_is_not_shape():
    # second difference -0.0008 where the loss is 100: 1e-5 of it (0.001) is rounding, not a bump
    assert LS.measures([100.0, 100.0004, 100.0])["nonconvex_fraction"] == 0.0
    assert LS.measures([1.0, 1.0004, 1.0])["nonconvex_fraction"] == 1.0  # at loss 1 the same bump is shape


def test_exploded_points_count_as_ten_times_the_worst_finite_loss():
    got = LS.measures([2.0, math.inf, 1.0, math.nan, 3.0])
    assert (got["loss_min"], got["loss_max"]) == (1.0, 30.0)
    assert got["local_minima"] == 1  # [2, 30, 1, 30, 3]: the 1
    nothing = LS.measures([math.inf, math.nan, math.inf])
    assert nothing["loss_max"] == 1e30 and nothing["local_minima"] == 0


def test_total_variation_over_range_of_the_log_loss():
    assert LS.tv_ratio(np.exp([4.0, 1.0, 2.0, 1.0, 4.0])) == pytest.approx((3 + 1 + 1 + 3) / 3)  # one bump: 8/3
    assert LS.tv_ratio(np.exp([1.0, 2.0, 3.0])) == pytest.approx(1.0)  # monotone
    assert LS.tv_ratio(np.exp([-4.0, -1.0, -2.0])) == pytest.approx((3 + 1) / 3)  # losses below 1 too
    assert LS.tv_ratio(np.exp([0.0, 0.5, 0.0])) == pytest.approx(2.0)  # a span under 1 is a span
    assert LS.tv_ratio(np.array([0.0, 1.0, 0.0])) == pytest.approx(2.0)  # a zero loss: log of 1e-12, finite
    assert LS.tv_ratio(np.array([7.0, 7.0, 7.0])) == 1.0  # flat: no range to divide by


# --- 2-D surfaces ---------------------------------------------------------------------------------

AXIS = np.arange(-2.0, 3.0)  # -2..2, spacing 1
X, Y = np.meshgrid(AXIS, AXIS)  # loss[beta index, alpha index], as scan lays it out


@pytest.mark.parametrize("p,q,c", [(3, 1, 3.0), (3, 1, 3.6), (1, 1, 1.5), (1, 1, 3.0), (0.5, 2, 1.9), (0.5, 2, 2.1)])
def test_a_quadratics_curvature_is_its_hessians_smaller_eigenvalue(p, q, c):
    loss = 50 + p * X ** 2 + q * Y ** 2 + c * X * Y
    lam_min = np.linalg.eigvalsh([[2 * p, c], [c, 2 * q]])[0]
    assert abs(lam_min) > 0.05  # each case clear of 0 by far more than the rounding tolerance
    got = LS.measures(loss)
    assert got["nonconvex_fraction"] == (1.0 if lam_min < 0 else 0.0), lam_min


def test_a_plane_counts_strict_minima_against_all_eight_neighbours():
    wells = (X ** 2 - 1) ** 2 + Y ** 2  # on -2..2: wells at x = -1 and x = 1 (two interior minima)
    assert LS.measures(wells)["local_minima"] == 2
    assert LS.measures(np.full((5, 5), 4.0))["local_minima"] == 0  # a plateau has none
    diagonal = np.full((3, 3), 5.0)
    diagonal[1, 1], diagonal[2, 2] = 1.0, 0.5  # a lower diagonal neighbour: the centre is no minimum
    assert LS.measures(diagonal)["local_minima"] == 0
    for above_or_below in ((0, 1), (2, 1)):  # the neighbours straight above and below count too
        column = np.full((3, 3), 5.0)
        column[1, 1], column[above_or_below] = 1.0, 0.5
        assert LS.measures(column)["local_minima"] == 0, above_or_below


@pytest.mark.parametrize("big", [(0, 1), (1, 0)])
def test_the_rounding_tolerance_is_the_largest_loss_around_each_point(big):
    """A bump of 0.002 at the centre (curvature -0.004 across it) beside one loss of 1000 above or
    left of it: 1e-5 of 1000 is 0.01, so the bump is rounding there; without that neighbour it is shape."""
    loss = np.ones((3, 3))
    loss[1, 1] = 1.002
    assert LS.measures(loss)["nonconvex_fraction"] == 1.0
    loss[big] = 1000.0
    assert LS.measures(loss)["nonconvex_fraction"] == 0.0


def test_a_planes_total_variation_is_the_mean_over_its_rows_and_columns():
    loss = np.exp(np.array([[1.0, 2.0, 3.0], [1.0, 3.0, 1.0], [2.0, 2.0, 2.0]]))
    rows = [1.0, (2 + 2) / 2, 1.0]  # log 1, 2, 3: monotone | 1, 3, 1: a peak | 2, 2, 2: flat
    cols = [1.0, (1 + 1) / 1, (2 + 1) / 2]  # log 1, 1, 2 | 2, 3, 2 | 3, 1, 2
    assert LS.measures(loss)["tv_ratio"] == pytest.approx(np.mean(rows + cols))


def test_contour_levels_span_every_surface_together():
    def result(losses):
        n = int(round(len(losses) ** 0.5))
        return {"grid": list(range(n)), "points": [{"loss": v} for v in losses]}

    levels = LS.contour_levels([result([10.0, 100.0, 10.0, 10.0]), result([1.0, 10.0, 10.0, 1000.0])])
    assert len(levels) == 25 and levels[0] == pytest.approx(0.0) and levels[-1] == pytest.approx(3.0)
    assert np.allclose(np.diff(levels), 3.0 / 24)
    flat = LS.contour_levels([result([10.0] * 4)])
    # a flat surface still gets rising levels (matplotlib's contour refuses equal ones): 1e-6 apart in all
    assert len(flat) == 25 and flat[0] == 1.0 and np.all(np.diff(flat) > 0)
    assert flat[-1] - flat[0] == pytest.approx(1e-6, rel=1e-3)


# --- the scan -------------------------------------------------------------------------------------

def moved_loss(trained, dirs, a, b, x, y) -> float:
    """The training loss at theta* + a d1 + b d2, the weights moved here by hand."""
    model = trained.model
    saved = [p.detach().clone() for p in model.parameters()]
    with torch.no_grad():
        for i, p in enumerate(model.parameters()):
            p.add_(a * dirs[0][i] + (b * dirs[1][i] if len(dirs) > 1 else 0))
        loss = F.cross_entropy(model(x).float(), y).item()
        for p, w in zip(model.parameters(), saved):
            p.copy_(w)
    return loss


def test_a_plane_scan_is_the_loss_of_the_weights_moved_along_both_directions(residual8_run):
    trained = load_run(residual8_run)
    said = []
    torch.manual_seed(123)  # the global generator must not matter: the scan's seed decides the directions
    start = time.perf_counter()
    got = LS.scan(trained, dims=2, lo=-0.4, hi=0.4, points=3, samples=150, seed=5, log=said.append)
    spent = time.perf_counter() - start
    gen = torch.Generator().manual_seed(5)
    dirs = [LS.random_direction(trained.model, gen) for _ in range(2)]
    x, y = LS.training_subset(trained, 150)
    assert [(p["alpha"], p["beta"]) for p in got["points"]] == [(a, b) for b in (-0.4, 0.0, 0.4) for a in (-0.4, 0.0, 0.4)]
    for p in got["points"]:
        assert p["loss"] == pytest.approx(moved_loss(trained, dirs, p["alpha"], p["beta"], x, y), rel=1e-5), p
    assert len({round(p["loss"], 6) for p in got["points"]}) == 9  # both directions move the loss
    assert got["measures"]["loss_max"] == max(p["loss"] for p in got["points"])
    assert (got["run"], got["label"], got["dims"], got["samples"], got["seed"]) == (
        str(residual8_run), "ResNet-8", 2, 150, 5)
    assert 0 < got["wall_s"] <= spent
    assert said == []  # 9 points: a progress line every 10
    # its measures are those of the plane (rows beta, columns alpha), not of the 9 losses in a line
    plane = np.array([p["loss"] for p in got["points"]]).reshape(3, 3)
    centre_lowest = all(plane[1, 1] < v for i, v in enumerate(plane.ravel()) if i != 4)
    assert got["measures"]["local_minima"] == int(centre_lowest)
    logs = np.log(plane)
    tv = [np.abs(np.diff(line)).sum() / (line.max() - line.min()) for line in [*logs, *logs.T]]
    assert got["measures"]["tv_ratio"] == pytest.approx(np.mean(tv))


def test_a_line_scan_logs_every_tenth_of_its_points(residual8_run):
    trained = load_run(residual8_run)
    said = []
    got = LS.scan(trained, dims=1, lo=-0.5, hi=0.5, points=25, samples=50, seed=0, log=said.append)
    assert said == [f"ResNet-8: {n}/25 points" for n in (10, 20)]
    assert all("beta" not in p for p in got["points"])
    again = LS.scan(trained, dims=1, lo=-0.5, hi=0.5, points=25, samples=50, seed=0)
    assert [p["loss"] for p in again["points"]] == [p["loss"] for p in got["points"]]
    plane = []  # a plane of 11 x 11 points: a line every tenth of its 121 (12 points), not every 10
    LS.scan(trained, dims=2, lo=-0.5, hi=0.5, points=11, samples=20, seed=0, log=plane.append)
    assert plane == [f"ResNet-8: {n}/121 points" for n in range(12, 121, 12)]


def test_a_direction_is_filter_normalised_in_its_weights_dtype():
    """Li et al. 2018, Sec. 4: each filter of the direction scaled to the norm of the weights' filter;
    biases and BN parameters left at 0. In the net's own dtype, here float64."""
    net = torch.nn.Sequential(torch.nn.Conv2d(2, 3, 3), torch.nn.BatchNorm2d(3), torch.nn.Flatten(),
                              torch.nn.Linear(3, 4)).double()
    d = LS.random_direction(net, torch.Generator().manual_seed(0))
    assert [t.dtype for t in d] == [torch.float64] * 6
    for w, t in zip(net.parameters(), d):
        if w.dim() == 1:
            assert not t.any()
        else:
            for i in range(w.shape[0]):
                assert t[i].norm().item() == pytest.approx(w[i].norm().item(), rel=1e-6)


def test_a_net_without_in_memory_data_names_its_run():
    from types import SimpleNamespace

    trained = SimpleNamespace(path="runs/folder-net", data=SimpleNamespace(train=None),
                              spec=SimpleNamespace(data=SimpleNamespace(dataset="imagefolder")))
    with pytest.raises(UserError) as err:
        LS.training_subset(trained, 10)
    assert str(err.value) == ("runs/folder-net: landscape needs in-memory data (digits, synthetic, cifar); "
                              "imagefolder image folders are not supported")


def test_a_training_subset_is_the_first_images_of_a_fixed_shuffle(residual8_run):
    trained = load_run(residual8_run)
    torch.manual_seed(99)
    x, y = LS.training_subset(trained, 40)
    order = torch.randperm(len(trained.data.train), generator=torch.Generator().manual_seed(0))[:40]
    assert torch.equal(x, trained.data.train.x[order]) and torch.equal(y, trained.data.train.y[order])


@pytest.mark.parametrize("kwargs,words", [({"dims": 3}, "--dims 3: give 1 (a line) or 2 (a plane)"),
                                          ({"points": 2}, "--points 2: at least 3 grid points are needed"),
                                          ({"lo": 0.5, "hi": 0.5}, "--range 0.5 0.5: the first value must be below")])
def test_a_bad_grid_names_itself(residual8_run, kwargs, words):
    with pytest.raises(UserError, match=words.replace("(", r"\(").replace(")", r"\)")):
        LS.scan(load_run(residual8_run), **{"dims": 1, "lo": -1.0, "hi": 1.0, "points": 5, "samples": 10, "seed": 0,
                                            **kwargs})


# --- the figure -----------------------------------------------------------------------------------

def drawn(monkeypatch, tmp_path, results):
    return drawn_figure(monkeypatch, lambda path: LS.figure(results, path), tmp_path / "land.png")


def line_result(label, residual, losses, accs, minima, tv):
    alphas = np.linspace(-1, 1, len(losses)).tolist()
    return {"dims": 1, "label": label, "residual": residual, "grid": alphas,
            "points": [{"alpha": a, "loss": v, "accuracy": c} for a, v, c in zip(alphas, losses, accs)],
            "measures": {"local_minima": minima, "tv_ratio": tv, "nonconvex_fraction": 0.0}}


def test_the_line_figure_draws_loss_bold_and_accuracy_thin_per_net(monkeypatch, tmp_path):
    from matplotlib.colors import to_rgb

    res = line_result("ResNet-26", True, [3.0, 0.5, 2.0], [40.0, 90.0, 60.0], 1, 1.25)
    plain = line_result("plain-26", False, [9.0, 4.0, 7.0, 5.0, 8.0], [10.0, 30.0, 20.0, 25.0, 15.0], 2, 3.5)
    fig = drawn(monkeypatch, tmp_path, [res, plain])
    ax, acc_ax = fig.axes
    assert ax.get_yscale() == "log" and acc_ax.get_ylim() == (0.0, 100.0)
    for i, (r, style) in enumerate(((res, "-"), (plain, "--"))):  # plain dashed, residual solid (He 2016a Fig. 6)
        m = r["measures"]
        (loss,) = [ln for ln in ax.get_lines() if ln.get_label().startswith(r["label"])]
        (acc,) = [ln for ln in acc_ax.get_lines() if ln.get_label().startswith(r["label"])]
        assert loss.get_label() == f"{r['label']} loss (minima {m['local_minima']}, TV/range {m['tv_ratio']:.2f})"
        assert acc.get_label() == f"{r['label']} accuracy"
        assert list(loss.get_xdata()) == list(acc.get_xdata()) == [p["alpha"] for p in r["points"]]
        assert list(loss.get_ydata()) == [p["loss"] for p in r["points"]]
        assert list(acc.get_ydata()) == [p["accuracy"] for p in r["points"]]
        assert loss.get_linestyle() == acc.get_linestyle() == style
        assert np.allclose(to_rgb(loss.get_color()), to_rgb(f"C{i}")) and np.allclose(to_rgb(acc.get_color()),
                                                                                      to_rgb(f"C{i}"))
        assert loss.get_linewidth() > 1.5 > acc.get_linewidth() and acc.get_alpha() < 1  # bold loss, faint accuracy
    legend = [t.get_text() for t in ax.get_legend().get_texts()]
    assert len(legend) == 4 and "ResNet-26 accuracy" in legend and legend[0].startswith("ResNet-26 loss")
    assert ax.get_legend().get_texts()[0].get_fontsize() < ax.xaxis.label.get_fontsize()
    assert (ax.get_xlabel(), ax.get_ylabel(), acc_ax.get_ylabel()) == (
        "step along filter-normalised direction d1", "training loss (log)", "training accuracy (%)")
    assert ax.get_title() == "loss (bold) and accuracy (thin) around the trained weights"


def plane_result(label, losses, minima, tv, nonconvex):
    grid = [-1.0, 0.0, 1.0]
    return {"dims": 2, "label": label, "residual": True, "grid": grid,
            "points": [{"alpha": a, "beta": b, "loss": v} for (b, a), v in zip([(b, a) for b in grid for a in grid],
                                                                               losses)],
            "measures": {"local_minima": minima, "tv_ratio": tv, "nonconvex_fraction": nonconvex}}


def test_the_plane_figure_shares_its_levels_and_colour_bar(monkeypatch, tmp_path):
    a = plane_result("ResNet-56", [10.0, 5, 10, 5, 1, 5, 10, 5, 10], 1, 1.5, 0.0)
    # log10 loss 1.5 + alpha / 2 + beta: a tilted plane, 0 to 3 (no saddle for contouring to resolve)
    b = plane_result("plain-56", [10 ** (1.5 + al / 2 + be) for be in (-1, 0, 1) for al in (-1, 0, 1)], 3, 4.25, 0.444)
    import matplotlib

    # a user's matplotlibrc may name another default colour map: panels and bar still share viridis
    monkeypatch.setitem(matplotlib.rcParams, "image.cmap", "plasma")
    fig = drawn(monkeypatch, tmp_path, [a, b])
    panels, bars = fig.axes[:2], fig.axes[2:]
    from matplotlib.collections import QuadMesh

    (colours,) = [c for c in bars[0].collections if isinstance(c, QuadMesh)]  # the bar's colour strip
    assert colours.get_cmap().name == "viridis"
    assert len(bars) == 1 and bars[0].get_ylabel() == "log10 training loss"
    assert bars[0].get_ylim() == (0.0, 3.0)  # the bar spans the levels: its colours are the panels'
    levels = np.linspace(0.0, 3.0, 25)  # log10 of 1 to 1000, both panels together
    assert panels[0].get_position().x1 <= panels[1].get_position().x0
    for ax, r in zip(panels, (a, b)):
        m = r["measures"]
        assert ax.get_title() == (f"{r['label']}: log10 loss\nminima {m['local_minima']}, TV/range "
                                  f"{m['tv_ratio']:.2f}, non-convex {100 * m['nonconvex_fraction']:.0f}%")
        (cs,) = [c for c in ax.collections if hasattr(c, "levels")]
        assert np.allclose(cs.levels, levels)  # the same levels in every panel: one colour, one loss
        assert (cs.norm.vmin, cs.norm.vmax) == (0.0, 3.0) and cs.get_cmap().name == "viridis"
        labelled = [t.get_text() for t in ax.texts]  # every fourth level labelled, to one decimal
        assert labelled and set(labelled) <= {f"{v:.1f}" for v in levels[::4]}, labelled
        (centre,) = ax.get_lines()
        assert (list(centre.get_xdata()), list(centre.get_ydata()), centre.get_marker()) == ([0], [0], "+")
        assert (ax.get_xlabel(), ax.get_ylabel(), ax.get_aspect()) == ("d1", "d2", 1.0)
    assert "non-convex 44%" in panels[1].get_title()
    # each panel is its own surface, rows beta and columns alpha: on b's tilted plane the level 2.5 is
    # the line alpha / 2 + beta = 1, from (0, 1) to (1, 0.5); its transpose would reach beta = 0
    (cs,) = [c for c in panels[1].collections if hasattr(c, "levels")]
    at = int(np.argmin(abs(cs.levels - 2.5)))
    points = np.concatenate([seg for seg in cs.allsegs[at] if len(seg)])
    assert len(points) >= 2 and np.all(points[:, 1] >= 0.5 - 0.1) and np.all(points[:, 0] >= -0.1)


def test_the_plane_figure_labels_every_fourth_level_to_one_decimal(monkeypatch, tmp_path):
    # log10 loss 1.45 (2 + alpha + beta) / 2 on the 3 x 3 grid: 0 to 2.9, so the levels are not round
    tilted = plane_result("ResNet-20", [10 ** (1.45 * (2 + al + be) / 2) for be in (-1, 0, 1) for al in (-1, 0, 1)],
                          0, 1.0, 0.0)
    (ax, _bar) = drawn(monkeypatch, tmp_path, [tilted]).axes
    labelled = {t.get_text() for t in ax.texts}
    every_fourth = {f"{v:.1f}" for v in np.linspace(0.0, 2.9, 25)[::4]}  # 0.0, 0.5, 1.0, 1.4, 1.9, 2.4, 2.9
    assert len(labelled) >= 3 and labelled <= every_fourth, labelled
