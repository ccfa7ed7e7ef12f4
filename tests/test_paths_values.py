"""The numbers `resnet paths` reports (Veit et al. 2016 sec. 5, Fig. 6), each against a computation
made here: the per-length summary of a hand-made sample written out term by term, the shortest
window on shares chosen so each rule decides it, the sampled gradients against autograd on a copy
of the net (the summed cross-entropy, per-image norms at the input and at the first unit), every
sampled route against the gradients of all routes of its length, and the batches against the
seeded shuffle."""

import copy
import itertools
import math
import time

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch import nn

from resnet_cli import spec as S
from resnet_cli.analysis import paths as P
from resnet_cli.model import build_model

from drawn import drawn_figure


# --- counting -------------------------------------------------------------------------------------

def test_the_summary_of_a_hand_made_sample():
    """n = 3 routable units after one without a shortcut (fixed 1). Mean gradient of one path by k:
    3, 0.9, 0.5, 0; C(3, k) = 1, 3, 3, 1; totals 3, 2.7, 1.5, 0 of 7.2."""
    sampled = {"n": 3, "fixed": 1, "input": [[2.0, 4.0], [0.9], [0.5, 0.5, 0.5], [0.0, 0.0]],
               "unit": [[1.0], [1.0], [1.0], [1.0]], "full_input": [6.0, 8.0], "full_unit": [3.0]}
    r = P.summarise(sampled, mass=0.9)
    assert (r["n"], r["fixed"], r["mass"], r["full_grad"], r["full_unit_grad"]) == (3, 1, 0.9, 7.0, 3.0)
    ln = math.log
    want = [  # length = k + fixed; grad_std with ddof 1, 0 for one sample; ln(0) is -inf
        {"length": 1, "k": 0, "samples": 2, "log_paths": 0.0, "path_fraction": 1 / 8, "grad_mean": 3.0,
         "grad_std": math.sqrt(2.0), "grad_min": 2.0, "grad_max": 4.0, "grad_log_total": ln(3.0),
         "grad_share": 3 / 7.2},
        {"length": 2, "k": 1, "samples": 1, "log_paths": ln(3), "path_fraction": 3 / 8, "grad_mean": 0.9,
         "grad_std": 0.0, "grad_min": 0.9, "grad_max": 0.9, "grad_log_total": ln(2.7), "grad_share": 2.7 / 7.2},
        {"length": 3, "k": 2, "samples": 3, "log_paths": ln(3), "path_fraction": 3 / 8, "grad_mean": 0.5,
         "grad_std": 0.0, "grad_min": 0.5, "grad_max": 0.5, "grad_log_total": ln(1.5), "grad_share": 1.5 / 7.2},
        {"length": 4, "k": 3, "samples": 2, "log_paths": 0.0, "path_fraction": 1 / 8, "grad_mean": 0.0,
         "grad_std": 0.0, "grad_min": 0.0, "grad_max": 0.0, "grad_log_total": -math.inf, "grad_share": 0.0}]
    for row, w in zip(r["rows"], want):
        assert {k: v for k, v in row.items() if not k.startswith("unit_")} == pytest.approx(w), w["k"]
        assert row["unit_grad_mean"] == 1.0 and row["unit_grad_std"] == 0.0
    assert len(r["rows"]) == 4
    # the shortest run carrying 90% (6.48): lengths 1-3 carry all of it, no two neighbours do (5.7 at most)
    assert r["window"] == pytest.approx({"first": 1, "last": 3, "carried": 1.0, "peak": 1,
                                         "mean_length": (3 * 1 + 2.7 * 2 + 1.5 * 3) / 7.2, "paths_fraction": 7 / 8,
                                         "log_paths": ln(7)})
    # at the first unit one path of each length carries 1: shares C(3, k) / 8; three lengths carry 7/8,
    # short of 90%, so all four (lengths 1-4)
    assert [row["unit_grad_share"] for row in r["rows"]] == pytest.approx([1 / 8, 3 / 8, 3 / 8, 1 / 8])
    assert (r["unit_window"]["first"], r["unit_window"]["last"]) == (1, 4)


def test_nothing_to_carry_shares_nothing_and_spans_every_length():
    zeros = {"n": 2, "fixed": 0, "input": [[0.0], [0.0], [0.0]], "unit": [[0.0], [0.0], [0.0]],
             "full_input": [0.0], "full_unit": [0.0]}
    r = P.summarise(zeros, mass=0.9)
    assert [row["grad_share"] for row in r["rows"]] == [0.0, 0.0, 0.0]
    assert (r["window"]["first"], r["window"]["last"], r["window"]["carried"]) == (0, 2, 0.0)
    assert P.shortest_window([0.0, 0.0, 0.0], 0.9) == (0, 2, 0.0)
    assert P.logsumexp([-math.inf, -math.inf]) == -math.inf
    assert P.logsumexp([math.log(2), math.log(6)]) == pytest.approx(math.log(8))
    assert P._log(0.0) == -math.inf and P._log(math.e) == pytest.approx(1.0)


@pytest.mark.parametrize("shares,mass,want", [
    ([2.0, 6.0, 1.0], 0.8, (0, 1)),  # shares need not sum to 1: 80% of 9 is 7.2 (2 + 6, not 6 + 1)
    ([2.0, 3.0, 5.0], 0.8, (1, 2)),
    ([0.3, 0.5, 0.2], 0.7, (0, 1)),  # two windows of two: the one carrying 0.8, not the later 0.7
    ([0.45, 0.1, 0.45], 0.5, (0, 1)),  # two of two carrying 0.55 each: the first stays
    ([0.1, 0.2, 0.3, 0.4], 0.5, (2, 3)),
    # one share alone carries 40%; later windows of two and three (0.5, 0.4) are longer, though they
    # start later: length is hi - lo whatever lo is
    ([0.1, 0.4, 0.1, 0.2, 0.2], 0.4, (1, 1)),
])
def test_the_shortest_window_rules(shares, mass, want):
    lo, hi, carried = P.shortest_window(shares, mass)
    assert (lo, hi) == want and carried == pytest.approx(sum(shares[lo:hi + 1]))


# --- sampling -------------------------------------------------------------------------------------

def small_net(seed=0):
    """Three units of a CIFAR-family net (widths 2/4/4; units 2 and 3 downsample by option A)."""
    s = S.resolve(S.validate({"model": {"depth": 8, "widths": [2, 4, 4]}}))
    torch.manual_seed(seed)
    model = build_model(s.model, 3, 10)
    with torch.no_grad():
        for m in model.modules():
            if isinstance(m, nn.BatchNorm2d):
                m.weight.uniform_(0.5, 1.5), m.bias.uniform_(-0.3, 0.3)
    return model.eval()


def grads_here(model, x, y, through_branch=None):
    """Per-image gradient norms of the summed cross-entropy at the input and at the first unit's
    input, BN on batch statistics, on a copy of the net (the original's buffers untouched)."""
    net = copy.deepcopy(model).train()
    seen = []
    net.units[0].register_forward_pre_hook(lambda _m, args: seen.append(args[0]))
    x = x.clone().requires_grad_(True)
    with P.routed(net) as router:
        loss = F.cross_entropy(net(x), y, reduction="sum")
        router.full() if through_branch is None else router.path(through_branch)
        gx, gu = torch.autograd.grad(loss, [x, seen[0]])
    return gx.flatten(1).norm(dim=1).mean().item(), gu.flatten(1).norm(dim=1).mean().item()


def test_sampled_gradients_are_those_of_the_summed_loss_on_sampled_routes():
    model = small_net()
    gen = torch.Generator().manual_seed(1)
    batches = [(torch.randn(4, 3, 8, 8, generator=gen), torch.tensor([0, 3, 5, 9])),
               (torch.randn(4, 3, 8, 8, generator=gen), torch.tensor([1, 1, 2, 7]))]
    said = []
    got = P.sample_gradients(model, batches, 5, seed=3, log=said.append)
    assert (got["n"], got["fixed"]) == (3, 0)
    for s in range(5):
        x, y = batches[s % 2]
        full = grads_here(model, x, y)
        assert (got["full_input"][s], got["full_unit"][s]) == (pytest.approx(full[0], rel=1e-5),
                                                              pytest.approx(full[1], rel=1e-5))
    for k in range(4):
        routes = {}  # every route with exactly k branches, on each batch: (input, unit) norms
        for pick in itertools.combinations(range(3), k):
            for b, (x, y) in enumerate(batches):
                routes.setdefault(b, []).append(grads_here(model, x, y, pick))
        for s in range(5):
            sample = (got["input"][k][s], got["unit"][k][s])
            assert any(sample == pytest.approx(r, rel=1e-5) for r in routes[s % 2]), (k, s)
    # k = 0 and k = 3 have one route each: all shortcuts, all branches
    assert got["input"][3][0] == pytest.approx(grads_here(model, *batches[0], (0, 1, 2))[0], rel=1e-5)
    assert said == [f"  sample {s}/5: 4 routes" for s in range(1, 6)]  # 5 samples: a line each
    ten = []
    P.sample_gradients(model, batches[:1], 10, seed=0, log=ten.append)
    assert ten == [f"  sample {s}/10: 4 routes" for s in (2, 4, 6, 8, 10)]  # a line every fifth
    for samples, lines in ((7, range(1, 8)), (15, (3, 6, 9, 12, 15))):  # fifths that are not whole: 7 // 5 is 1
        said = []
        P.sample_gradients(model, batches[:1], samples, seed=0, log=said.append)
        assert said == [f"  sample {s}/{samples}: 4 routes" for s in lines], samples


def test_sampled_routes_of_k_units_have_k_distinct_branches():
    """At k = 2 of 3 units a draw with a repeated unit would be a route of length 1: none is."""
    model = small_net(seed=2)
    x, y = torch.randn(4, 3, 8, 8, generator=torch.Generator().manual_seed(5)), torch.tensor([2, 4, 6, 8])
    got = P.sample_gradients(model, [(x, y)], 8, seed=11)
    ones = [grads_here(model, x, y, (j,))[0] for j in range(3)]
    twos = [grads_here(model, x, y, pick)[0] for pick in itertools.combinations(range(3), 2)]
    for v in got["input"][2]:
        assert any(v == pytest.approx(t, rel=1e-5) for t in twos)
        assert not any(v == pytest.approx(o, rel=1e-5) for o in ones)


def test_a_net_in_routed_form_backpropagates_in_full_until_a_route_is_chosen():
    model = small_net()
    x, y = torch.randn(2, 3, 8, 8, generator=torch.Generator().manual_seed(0)), torch.tensor([1, 2])
    x1 = x.clone().requires_grad_(True)
    (plain,) = torch.autograd.grad(F.cross_entropy(model(x1), y), [x1])
    x2 = x.clone().requires_grad_(True)
    with P.routed(model):
        (taps,) = torch.autograd.grad(F.cross_entropy(model(x2), y), [x2])
    torch.testing.assert_close(taps, plain, rtol=0, atol=0)
    assert torch.count_nonzero(plain) > 0


# --- batches and the whole study ----------------------------------------------------------------

class Split:
    def __init__(self, n):
        self.x = torch.arange(n, dtype=torch.float32).view(n, 1, 1, 1).expand(n, 3, 8, 8).contiguous()
        self.y = torch.arange(n) % 10

    def __len__(self):
        return len(self.y)


def test_training_batches_run_through_a_seeded_shuffle_and_wrap_around():
    train = Split(10)
    torch.manual_seed(77)  # the global generator must not matter
    got = P.training_batches(train, 4, 4, "cpu", seed=6)
    order = torch.randperm(10, generator=torch.Generator().manual_seed(6)).tolist()
    want = [order[0:4], order[4:8], order[8:10] + order[0:2], order[2:6]]  # 10 = 4 + 4 + 2: the third wraps
    assert [b[1].tolist() for b in got] == [[i % 10 for i in w] for w in want]
    assert [b[0][:, 0, 0, 0].tolist() for b in got] == [[float(i) for i in w] for w in want]


def test_the_study_is_the_summary_of_its_own_seeded_sample(monkeypatch):
    model, train = small_net(seed=4), Split(6)  # 6 images, batch 4: one batch, wrapped
    said = []
    start = time.perf_counter()
    got = P.study(model, train, label="ResNet-8", source="run-dir", state="trained", batch_size=4, samples=3,
                  mass=0.6, seed=9, log=said.append)
    spent = time.perf_counter() - start
    batches = P.training_batches(train, 4, 1, "cpu", seed=9)
    want = P.summarise(P.sample_gradients(model, batches, 3, seed=9), mass=0.6)
    assert len(got["rows"]) == len(want["rows"]) == 4
    assert all(g == pytest.approx(w) for g, w in zip(got["rows"], want["rows"]))
    assert got["window"] == pytest.approx(want["window"])
    assert got["mass"] == 0.6 and want["window"] != P.summarise(P.sample_gradients(model, batches, 3, seed=9),
                                                                mass=0.9)["window"]
    assert {k: got[k] for k in ("label", "run", "state", "samples", "batch_size", "seed")} == {
        "label": "ResNet-8", "run": "run-dir", "state": "trained", "samples": 3, "batch_size": 4, "seed": 9}
    assert 0 < got["wall_s"] <= spent
    assert said[0] == "ResNet-8 (trained): 3 samples of every path length, batch 4"
    assert said[1:] == [f"  sample {s}/3: 4 routes" for s in (1, 2, 3)]


# --- the figure (Veit et al. 2016 Fig. 6) ----------------------------------------------------------

def summary(label, state, n, fixed, means, mins, maxs, shares, window, mass=0.9):
    rows = [{"length": k + fixed, "path_fraction": math.comb(n, k) / 2 ** n, "grad_mean": m, "grad_min": lo,
             "grad_max": hi, "grad_share": sh} for k, (m, lo, hi, sh) in enumerate(zip(means, mins, maxs, shares))]
    return {"label": label, "state": state, "rows": rows, "window": {"first": window[0], "last": window[1]},
            "mass": mass}


def test_the_figure_draws_each_nets_three_panels_from_its_rows(monkeypatch, tmp_path):
    from matplotlib.colors import to_rgb

    trained = summary("ResNet-8", "trained", 3, 0, [1.0, 0.5, 0.2, 0.1], [0.8, 0.0, 0.1, 0.05], [1.2, 0.7, 0.3, 0.2],
                      [0.3, 0.45, 0.2, 0.05], (0, 2), mass=0.8)
    init = summary("ResNet-8", "init", 3, 0, [2.0, 1.0, 0.4, 0.3], [1.5, 0.9, 0.3, 0.2], [2.5, 1.1, 0.5, 0.4],
                   [0.1, 0.4, 0.3, 0.2], (1, 3))
    plain = summary("plain-8 (2 fixed)", "trained", 2, 2, [0.9, 0.3, 0.1], [0.8, 0.2, 0.05], [1.0, 0.4, 0.2],
                    [0.5, 0.4, 0.1], (2, 3))
    fig = drawn_figure(monkeypatch, lambda path: P.figure([trained, init, plain], path), tmp_path / "p.png")
    ax_n, ax_g, ax_t = fig.axes
    assert ax_n.get_position().x1 <= ax_g.get_position().x0 and ax_g.get_position().x1 <= ax_t.get_position().x0
    colours = {"ResNet-8": "C0", "plain-8 (2 fixed)": "C1"}  # one colour a net, at init and trained
    for i, r in enumerate((trained, init, plain)):
        label, style = f"{r['label']}, {r['state']}", "--" if r["state"] == "init" else "-"
        lengths = [row["length"] for row in r["rows"]]
        for ax, key in ((ax_n, "path_fraction"), (ax_g, "grad_mean"), (ax_t, "grad_share")):
            (line,) = [ln for ln in ax.get_lines() if ln.get_label() == label]
            assert list(line.get_xdata()) == lengths and list(line.get_ydata()) == [row[key] for row in r["rows"]]
            assert line.get_linestyle() == style, (label, key)
            assert np.allclose(to_rgb(line.get_color()), to_rgb(colours[r["label"]])), (label, key)
            if ax is not ax_n:
                assert line.get_marker() == "o"
        band = ax_g.collections[i]  # the min-max band, a zero minimum floored for the log axis
        xy = band.get_paths()[0].vertices

        def has(x, y, xy=xy):
            return any(math.isclose(a, x, abs_tol=1e-9) and math.isclose(b, y, rel_tol=1e-9) for a, b in xy)

        for row in r["rows"]:
            assert has(row["length"], max(row["grad_min"], 1e-300)) and has(row["length"], row["grad_max"])
        assert np.allclose(band.get_facecolor()[0][:3], to_rgb(colours[r["label"]])) and band.get_alpha() < 1
        span = ax_t.patches[i]  # the shaded window: lengths first..last, half a unit either side
        assert (span.get_x(), span.get_x() + span.get_width()) == (r["window"]["first"] - 0.5,
                                                                   r["window"]["last"] + 0.5)
        assert np.allclose(span.get_facecolor()[:3], to_rgb(colours[r["label"]])) and span.get_alpha() < 0.15
    assert ax_g.get_yscale() == "log" and ax_n.get_yscale() == ax_t.get_yscale() == "linear"
    assert [ax.get_title() for ax in (ax_n, ax_g, ax_t)] == [
        "(a) distribution of path length", "(b) gradient of one path", "(c) total gradient per length (shaded: 80%)"]
    assert [ax.get_ylabel() for ax in (ax_n, ax_g, ax_t)] == [
        "share of all paths", "gradient norm at the input", "share of the total gradient"]
    assert [ax.get_xlabel() for ax in (ax_n, ax_g, ax_t)] == [
        "path length (units through their branch)", "path length", "path length"]
    for ax in (ax_n, ax_g, ax_t):
        texts = ax.get_legend().get_texts()
        assert [t.get_text() for t in texts] == ["ResNet-8, trained", "ResNet-8, init", "plain-8 (2 fixed), trained"]
        assert texts[0].get_fontsize() < ax.xaxis.label.get_fontsize()
