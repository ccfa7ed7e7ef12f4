"""`resnet gradnorm`: power iteration against an explicit Jacobian, the seed's toy gains, the
gradient highway's exact shape on identity-initialised units, the JSON schema, layer responses."""

import json

import pytest
import torch
from torch.testing import assert_close
from typer.testing import CliRunner

from resnet_cli import spec as S
from resnet_cli.training.callbacks import GradNormCallback
from resnet_cli.cli import app
from resnet_cli.errors import UserError
from resnet_cli.analysis import gradnorm as G
from resnet_cli.model import build_model

# A CIFAR-shaped net small enough for a test: ResNet-8 (3 units), widths 4/8/8, 8x8 synthetic images.
TINY_SETS = ["--depth", "8", "--batch-size", "16", "--set", "model.widths=[4, 8, 8]",
             "--set", "data.synthetic.image_size=8", "--set", "data.synthetic.train_size=64",
             "--set", "data.synthetic.test_size=16", "--device", "cpu"]


def lines(text: str) -> list[dict]:
    out = [json.loads(line) for line in text.splitlines() if line.strip()]
    assert out
    return out


# ---------------------------------------------------------------------------------------------
# Power iteration


def _explicit(f, x):
    jac = torch.autograd.functional.jacobian(f, x).reshape(x.numel(), x.numel())
    return torch.linalg.matrix_norm(jac, ord=2).item()


@pytest.mark.parametrize("residual", [False, True])
@pytest.mark.parametrize("std", [0.3, 0.8])
def test_power_iteration_matches_the_materialised_jacobian(residual, std):
    g = torch.Generator().manual_seed(1)
    x = G.toy_image(g)
    kernels = std * torch.randn(3, 2, 3, 3, dtype=torch.float64, generator=g)
    f = G.toy_stack(kernels, residual)
    assert G.spectral_norm(f, x) == pytest.approx(_explicit(f, x), rel=1e-6)


def test_power_iteration_on_a_known_spectrum():
    q1, _ = torch.linalg.qr(torch.randn(6, 6, dtype=torch.float64, generator=torch.Generator().manual_seed(0)))
    q2, _ = torch.linalg.qr(torch.randn(6, 6, dtype=torch.float64, generator=torch.Generator().manual_seed(1)))
    a = q1 @ torch.diag(torch.tensor([3.0, 2.5, 1.0, 0.5, 0.1, 1e-3], dtype=torch.float64)) @ q2
    assert G.spectral_norm(lambda v: a @ v, torch.zeros(6, dtype=torch.float64)) == pytest.approx(3.0, rel=1e-8)
    assert G.spectral_norm(lambda v: 0 * v, torch.ones(6, dtype=torch.float64)) == 0.0


def _counted(a):
    """v -> a v, counting the calls: one for the reverse pass, then one per power-iteration step."""
    calls = []

    def f(v):
        calls.append(1)
        return a @ v

    return f, calls


def _by_hand(a, v0, tol, iters):
    """The estimates ||A u_k||, u_1 = v0 / ||v0||, u_(k+1) = A^T A u_k normalised, and the step at
    which the estimate first changes by at most tol of itself (the first compared with 0)."""
    u, before = v0 / v0.norm(), 0.0
    for k in range(1, iters + 1):
        e = (a @ u).norm().item()
        if abs(e - before) <= tol * e:
            return e, k
        before, u = e, a.T @ (a @ u) / (a.T @ (a @ u)).norm()
    return before, iters


@pytest.mark.parametrize("tol,iters", [(1e-3, 500), (1e-6, 500), (0.0, 7), (1e-3, 1)])
def test_power_iteration_stops_where_the_estimate_changes_by_at_most_tol(tol, iters):
    """A 2x2 map with singular values 3 and 2.5 converges slowly (ratio (2.5/3)^2 a step): the value
    returned and the number of steps taken are those of the power iteration done by hand from the
    same start; tol 0 on an exact map (2I) stops at the second step, one step gives ||A v0||."""
    a = torch.tensor([[3.0, 0.0], [0.0, 2.5]], dtype=torch.float64)
    for m in (a, 2 * torch.eye(2, dtype=torch.float64)):
        v0 = torch.randn(2, dtype=torch.float64, generator=torch.Generator().manual_seed(5))
        want, steps = _by_hand(m, v0, tol, iters)
        f, calls = _counted(m)
        got = G.spectral_norm(f, torch.zeros(2, dtype=torch.float64), iters=iters, tol=tol,
                              generator=torch.Generator().manual_seed(5))
        assert got == pytest.approx(want, rel=1e-12) and len(calls) - 1 == steps


def test_the_toy_is_digit_3_with_faint_noise_and_one_seed_fixes_it():
    from sklearn.datasets import load_digits

    torch.manual_seed(123)  # the global stream: the toy must not draw from it
    x = G.toy_image(torch.Generator().manual_seed(7))
    noise = torch.randn(8, 8, dtype=torch.float64, generator=torch.Generator().manual_seed(7))
    assert x.dtype == torch.float64
    assert_close(x, torch.tensor(load_digits().images[3] / 16.0) + 0.01 * noise, rtol=0, atol=1e-15)
    first = G.toy_gains(blocks=[3], stds=[0.3], seed=2, iters=3)
    torch.manual_seed(456)
    assert G.toy_gains(blocks=[3], stds=[0.3], seed=2, iters=3) == first
    assert [(r["net"], r["blocks"], r["kernel_std"], r["seed"]) for r in first] == [
        ("plain", 3, 0.3, 2), ("residual", 3, 0.3, 2)]
    # one step's ||J v0|| for a random unit v0 lies below the largest singular value (equal only if
    # v0 were its singular vector): the toy takes the steps it is given
    full = G.toy_gains(blocks=[3], stds=[0.3], seed=2)
    one = G.toy_gains(blocks=[3], stds=[0.3], seed=2, iters=1)
    assert all(o["gain"] < f["gain"] * (1 - 1e-6) for o, f in zip(one, full))


def test_the_seed_toy_gains_land_in_the_seeds_spread():
    """The "Residual Connection" article's toy: 30 conv-ReLU-conv blocks on one digit image; it prints largest gains
    of 2.4e-39 plain vs 1.7 residual at kernel std 0.1, and 1.0e-15 vs 81 at std 0.3 (one draw).
    Over kernel draws 0..5 our residual gains span 1.43-1.80 and 42-95, both holding the seed's
    figure; plain stays below 1e-37 and 1e-9. A window that narrow fails if the shortcut is
    scaled or dropped, which a 100x window around 1.7 would not see."""
    gains = {(r["net"], r["kernel_std"]): r["gain"] for r in G.toy_gains(blocks=[30], stds=[0.1, 0.3])}
    assert gains[("plain", 0.1)] < 1e-37 and gains[("plain", 0.3)] < 1e-9
    assert 1.4 <= gains[("residual", 0.1)] <= 1.9
    assert 40 <= gains[("residual", 0.3)] <= 100


def test_jacobian_cli_json():
    res = CliRunner().invoke(app, ["gradnorm", "--jacobian", "--blocks", "5", "--json"])
    assert res.exit_code == 0, res.output
    objs = lines(res.stdout)
    assert {o["event"] for o in objs} == {"jacobian_gain"}  # --jacobian draws no figure
    assert {(o["net"], o["kernel_std"]) for o in objs} == {(n, s) for n in ("plain", "residual") for s in (0.1, 0.3)}
    assert all(o["blocks"] == 5 and o["gain"] >= 0 for o in objs)


# ---------------------------------------------------------------------------------------------
# Gradient norms per layer


def test_identity_units_pass_the_gradient_unchanged_and_scaled_ones_by_lambda():
    """With every branch zero at init (full pre-activation, zero-init of the last conv: F = 0), x_L = lambda^(L-l) x_l,
    so ||dE/dx_l|| = lambda^(L-l) ||dE/dx_L|| exactly (He 2016b eq. 4-5). Unit 0 is left out: its shared
    BN-ReLU pre-activation sits before the split, on both paths."""
    for lam in (1.0, 0.5):
        tree = {"model": {"family": "digits", "depth": 12, "unit": "full_preact", "zero_init_last_bn": True,
                          "widths": [4], "shortcut": {"kind": "scale", "shortcut_scale": lam}},
                "data": {"dataset": "digits", "train_subset": 64}, "optim": {"batch_size": 32, "iters": 1},
                "run": {"device": "cpu"}}
        r = G.measure_spec("x", S.resolve(S.validate(tree)), steps=1)
        L = r.units
        for l in range(1, L + 1):
            assert r.inputs[l] / r.inputs[L] == pytest.approx(lam ** (L - l), rel=1e-4)  # measured
        # Consistency only (the reported direct term is this product by construction): it agrees
        # with the measured ratio above.
        assert r.direct[1:] == [lam ** (L - l) for l in range(1, L + 1)]


def test_cli_json_one_object_per_spec_and_layer(in_tmp):
    res = CliRunner().invoke(app, ["gradnorm", "-v", "plain", "-v", "original", "-v", "scale:0.5",
                                   "-v", "exclusive_gate", *TINY_SETS, "--json", "--out", "g.png"])
    assert res.exit_code == 0, res.output
    objs = lines(res.stdout)
    # Every line says what it is (README: "its `event` saying what it is"); the figure is the last.
    assert objs[-1] == {"event": "figure", "path": "g.png"}
    objs = objs[:-1]
    assert {o["event"] for o in objs} == {"layer_grad_norm"}
    assert all({"spec", "layer", "index", "grad_norm"} <= set(o) for o in objs)
    assert (in_tmp / "g.png").is_file()
    for name in ("plain", "original", "scale:0.5", "exclusive_gate"):
        mine = [o for o in objs if o["spec"] == name]
        main = [o for o in mine if o["path"] == "main"]
        assert [o["index"] for o in main] == list(range(1, 9))  # depth 8: stem, 6 branch convs, fc
        assert all(o["grad_norm"] > 0 for o in main)
        inputs = [o for o in mine if o["path"] == "input"]
        assert [o["index"] for o in inputs] == [0, 1, 2, 3]  # x_0 .. x_L for 3 units
        assert inputs[-1]["relative"] == pytest.approx(1.0)
    gates = [o for o in objs if o["spec"] == "exclusive_gate" and o["path"] == "shortcut"]
    assert len(gates) == 3 and all(o["layer"].endswith("gate.conv") for o in gates)
    scaled = [o for o in objs if o["spec"] == "scale:0.5" and o["path"] == "input"]
    assert [o["direct_term"] for o in scaled] == [0.125, 0.25, 0.5, 1.0]


def test_averaging_over_steps_and_spec_files(in_tmp):
    (in_tmp / "mine.yaml").write_text("model:\n  family: digits\n  depth: 6\n  widths: [4]\ndata:\n  dataset: digits\n")
    res = CliRunner().invoke(app, ["gradnorm", "mine.yaml", "--steps", "3", "--batch-size", "16", "--json"])
    assert res.exit_code == 0, res.output
    objs = [o for o in lines(res.stdout) if o["event"] == "layer_grad_norm"]
    assert {o["spec"] for o in objs} == {"mine"}
    assert len([o for o in objs if o["path"] == "main"]) == 6


def test_variant_names():
    base = {"model": {"depth": 20}}
    assert G.variant_tree(base, "plain")["model"]["shortcut"]["kind"] == "none"
    tree = G.variant_tree(base, "full_preact+scale:0.5")
    assert tree["model"]["unit"] == "full_preact" and tree["model"]["shortcut"] == {"kind": "scale", "shortcut_scale": 0.5}
    assert G.variant_tree(base, "exclusive_gate:-3")["model"]["shortcut"]["gate_bias"] == -3.0
    assert base == {"model": {"depth": 20}}  # the base is not touched
    for bad, needle in (("resnet", "valid:"), ("original:2", "takes no value"), ("scale:x", "not a number")):
        with pytest.raises(UserError, match=needle):
            G.variant_tree(base, bad)


@pytest.mark.parametrize("args,needle", [
    (["-v", "nope"], "unknown name"),
    (["--jacobian", "--responses"], "give one"),
    (["--jacobian", "-v", "plain"], "no SPEC"),
    (["--responses"], "RUN_DIR"),
    (["--responses", "no-such-dir"], "no such run directory"),
    (["--blocks", "3"], "--jacobian"),
    (["-v", "plain", "-v", "plain"], "named twice"),
])
def test_bad_input_is_one_line_exit_2(in_tmp, args, needle):
    res = CliRunner().invoke(app, ["gradnorm", *args, "--json"])
    assert res.exit_code == 2, res.output
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("resnet: error:") and needle in lines[0], res.stderr


def test_callback_logs_into_the_run_metrics(tmp_path):
    from resnet_cli.runs.writer import RunDir
    from resnet_cli.training.trainer import Trainer

    spec = S.resolve(S.validate({"model": {"family": "digits", "depth": 4, "widths": [4]},
                                 "data": {"dataset": "digits", "train_subset": 128},
                                 "optim": {"batch_size": 32, "iters": 5, "warmup_iters": 0}, "run": {"device": "cpu"}}))
    tmp_path.mkdir(exist_ok=True)
    cb = GradNormCallback(every=2)
    Trainer(spec, run_dir=RunDir(tmp_path), callbacks=[cb]).run()
    recs = [r for r in RunDir(tmp_path).metrics() if r.get("event") == "grad_norm"]
    assert [r["iter"] for r in recs] == [1, 3, 5]
    assert recs == cb.records
    assert set(recs[0]["weights"]) == {"stem.0", "units.0.branch.1", "units.0.branch.3", "fc"}
    assert len(recs[0]["inputs"]) == 2 and all(v > 0 for v in recs[0]["inputs"])


# ---------------------------------------------------------------------------------------------
# Layer responses


def test_response_points_follow_the_unit_ordering():
    def points(unit):
        m = build_model(S.resolve(S.validate({"model": {"family": "digits", "depth": 6, "unit": unit,
                                                        "widths": [4]}})).model, 1, 10)
        return [(name, type(mod).__name__) for name, _, mod in G.response_points(m)]

    # original: every conv answers through the BN right after it (He 2016a Fig. 7).
    assert points("original") == [("stem.0", "BatchNorm2d")] + [
        (f"units.{u}.branch.{c}", "BatchNorm2d") for u in (0, 1) for c in (1, 3)]
    # full pre-activation: the second conv of a branch feeds the addition directly.
    assert [kind for _, kind in points("full_preact")] == ["Conv2d", "BatchNorm2d", "Conv2d", "BatchNorm2d", "Conv2d"]


def test_response_points_count_layers_across_the_stem_and_each_branch_in_order():
    """A hand-made net: a conv-BN stem, a ViT-like branch (Linear, GELU, Linear: no BN, each layer
    answers itself), a pre-activation branch (its first conv through the next BN, its last itself)."""
    from torch import nn

    class Unit(nn.Module):
        def __init__(self, branch):
            super().__init__()
            self.branch = branch

    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.stem = nn.Sequential(nn.Conv2d(1, 2, 3), nn.BatchNorm2d(2))
            self.units = nn.ModuleList([
                Unit(nn.Sequential(nn.Linear(2, 4), nn.GELU(), nn.Linear(4, 2))),
                Unit(nn.Sequential(nn.BatchNorm2d(2), nn.ReLU(), nn.Conv2d(2, 2, 3), nn.BatchNorm2d(2), nn.ReLU(),
                                   nn.Conv2d(2, 2, 3)))])

    net = Net()
    v, p = net.units[0].branch, net.units[1].branch
    assert G.response_points(net) == [("stem.0", 1, net.stem[1]), ("units.0.branch.0", 2, v[0]),
                                      ("units.0.branch.2", 3, v[2]), ("units.1.branch.2", 4, p[3]),
                                      ("units.1.branch.5", 5, p[5])]


def test_responses_of_a_trained_run(in_tmp):
    from resnet_cli.training.session import open_run

    spec = S.load(None, sets=["model.family=digits", "model.depth=6", "model.widths=[4]", "data.dataset=digits",
                               "data.train_subset=128", "optim.iters=4", "optim.batch_size=32", "run.device=cpu",
                               "run.out=r6"])
    with open_run(spec) as session:
        session.train()
    res = CliRunner().invoke(app, ["gradnorm", "--responses", "r6", "--json"])
    assert res.exit_code == 0, res.output
    objs = lines(res.stdout)
    assert objs[-1] == {"event": "figure", "path": "r6/responses.png"}
    objs = objs[:-1]
    assert {o["event"] for o in objs} == {"layer_response"}
    assert [o["index"] for o in objs] == [1, 2, 3, 4, 5]  # the 5 convs of a 6-layer net
    assert all({"spec", "layer", "index", "std"} <= set(o) and o["std"] > 0 for o in objs)
    assert (in_tmp / "r6" / "responses.png").is_file()


@pytest.mark.parametrize("kind,layers", [("identity", 8), ("exclusive_gate", 11)])
def test_summary_median_is_the_true_median_over_every_weight_layer(kind, layers):
    """"dW med" over all weight layers, gates included (docs/gradnorm.md's table counts them): for
    the 8 layers of ResNet-8 the mean of the two middle norms, for 8 + 3 gates the middle one."""
    import statistics

    tree = {"model": {"family": "digits", "depth": 8, "widths": [4], "shortcut": {"kind": kind}},
            "data": {"dataset": "digits", "train_subset": 64}, "optim": {"batch_size": 32, "iters": 1},
            "run": {"device": "cpu"}}
    r = G.measure_spec("x", S.resolve(S.validate(tree)), steps=1)
    norms = [layer["grad_norm"] for layer in r.layers]
    assert len(norms) == layers
    s = G.summary_row(r)
    assert s["weight_layers"] == layers
    assert s["median_layer"] == pytest.approx(statistics.median(norms), rel=1e-12)
    assert (s["min_layer"], s["max_layer"]) == (min(norms), max(norms))


def test_the_responses_figure_draws_each_nets_stds_in_order_and_sorted(monkeypatch, tmp_path):
    """He 2016a Fig. 7 read back from matplotlib: top, each layer's std in the net's order; bottom,
    the same stds from the largest down; plain dashed, residual solid, a net's name where it has one."""
    from drawn import drawn_figure

    plain = {"label": "plain-8", "shortcut": "none", "layers": [{"std": s} for s in (0.5, 2.0, 1.0)]}
    res = {"label": "ResNet-8", "name": "ResNet-8 (seed 1)", "shortcut": "identity",
           "layers": [{"std": s} for s in (0.25, 0.75)]}
    fig = drawn_figure(monkeypatch, lambda path: G.responses_figure([plain, res], path), tmp_path / "r.png")
    top, bottom = fig.axes
    assert [(ln.get_label(), list(ln.get_xdata()), list(ln.get_ydata()), ln.get_linestyle()) for ln in top.get_lines()] == [
        ("plain-8", [1, 2, 3], [0.5, 2.0, 1.0], "--"), ("ResNet-8 (seed 1)", [1, 2], [0.25, 0.75], "-")]
    assert [(list(ln.get_xdata()), list(ln.get_ydata()), ln.get_linestyle()) for ln in bottom.get_lines()] == [
        ([1, 2, 3], [2.0, 1.0, 0.5], "--"), ([1, 2], [0.75, 0.25], "-")]
    assert (top.get_xlabel(), bottom.get_xlabel()) == ("layer index (original order)", "layer index (sorted by magnitude)")
    assert top.get_title() == "layer responses after BN" and top.get_ylabel() == bottom.get_ylabel() == "std"
    assert [ln.get_color() for ln in top.get_lines() + bottom.get_lines()] == ["C0", "C1", "C0", "C1"]
    assert [ln.get_label() for ln in bottom.get_lines()] == ["plain-8", "ResNet-8 (seed 1)"]
    assert [t.get_text() for t in top.get_legend().get_texts()] == ["plain-8", "ResNet-8 (seed 1)"]
