"""`resnet paths` (Veit et al. 2016 sec. 5): the restricted backward is the gradient of one path,
the forward is untouched, paths add up to the full gradient, path counts stay finite at 333 units,
and the command works on run directories and nets at initialisation."""

import itertools
import json
import math

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from resnet_cli import spec as S
from resnet_cli.errors import UserError
from resnet_cli.analysis import paths as P
from resnet_cli.model import build_model
from resnet_cli.model.nets import ResNet
from resnet_cli.model.shortcuts import IdentityShortcut, ScaledShortcut, ZeroPadSkip
from resnet_cli.model.units import ResidualUnit

from invoking import invoke


def cifar_model(kind="identity", unit="original", downsample="A", seed=0):
    """Three units, widths 2-4-4: units 2 and 3 downsample (stride 2, wider)."""
    s = S.resolve(S.validate({"model": {"depth": 8, "widths": [2, 4, 4], "unit": unit, "downsample": downsample,
                                        "shortcut": {"kind": kind, "gate_bias": -1.0}}}))
    torch.manual_seed(seed)
    model = build_model(s.model, 3, 10)
    with torch.no_grad():  # BN away from its (1, 0) init, so scale and shift matter
        for m in model.modules():
            if isinstance(m, nn.BatchNorm2d):
                m.weight.uniform_(0.5, 1.5)
                m.bias.uniform_(-0.3, 0.3)
    return model.train()


def conv(cin, cout, stride=1, k=3):
    return nn.Conv2d(cin, cout, k, stride=stride, padding=k // 2, bias=False)


def linear_net(seed=0):
    """No ReLU, no BN: every unit is y = s * skip(x) + F(x) with F two convs, so a path's gradient
    does not depend on where the other units are evaluated. Unit 3 downsamples by option A, unit 4
    by a 1x1 projection; unit 2 scales its shortcut (He 2016b Table 1)."""
    torch.manual_seed(seed)
    units = [
        ResidualUnit(nn.Identity(), nn.Identity(), nn.Sequential(conv(2, 2), conv(2, 2)), IdentityShortcut(),
                     nn.Identity(), 2, 2, 1),
        ResidualUnit(nn.Identity(), nn.Identity(), nn.Sequential(conv(2, 2), conv(2, 2)), ScaledShortcut(0.5, 1.0),
                     nn.Identity(), 2, 2, 1),
        ResidualUnit(nn.Identity(), ZeroPadSkip(2, 3, 2), nn.Sequential(conv(2, 3, 2), conv(3, 3)),
                     IdentityShortcut(), nn.Identity(), 2, 3, 2),
        ResidualUnit(nn.Identity(), conv(3, 4, 2, k=1), nn.Sequential(conv(3, 4, 2), conv(4, 4)),
                     IdentityShortcut(), nn.Identity(), 3, 4, 2),
    ]
    return ResNet(conv(3, 2), units, nn.Identity(), 5)


def routed_grad(model, x, loss_fn, through_branch):
    """Gradient of loss_fn(model(x)) at x with the route restricted (None: the full backward)."""
    x = x.clone().requires_grad_(True)
    with P.routed(model) as router:
        out = model(x)
        if through_branch is None:
            router.full()
        else:
            router.path(through_branch)
        (g,) = torch.autograd.grad(loss_fn(out), [x])
    return g


def path_net_forward(model, x, through_branch):
    """The oracle the issue names: a net whose units are replaced by their branch alone (for the
    chosen units) or their shortcut alone (for the others), scaled as the unit scales them."""
    h = model.stem(x)
    for i, u in enumerate(model.units):
        if i in through_branch:
            h = u.combine(h, torch.zeros_like(u.branch(h)), u.branch(h))
        else:
            h = u.combine(h, u.skip(h), torch.zeros_like(u.branch(h)))
    return model.fc(model.pool(model.head_act(h)).flatten(1))


READOUT = torch.linspace(-1, 1, 5)


def linear_loss(out):
    return (out * READOUT).sum()  # a linear readout: the loss's own gradient is the same in both nets


@pytest.mark.parametrize("through_branch", [(), (0,), (2,), (1, 3), (0, 1, 2, 3)])
def test_restricted_backward_is_the_single_path_gradient(through_branch):
    model = linear_net()
    x = torch.randn(2, 3, 8, 8)
    got = routed_grad(model, x, linear_loss, list(through_branch))
    xp = x.clone().requires_grad_(True)
    (want,) = torch.autograd.grad(linear_loss(path_net_forward(model, xp, set(through_branch))), [xp])
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-7)
    assert got.abs().sum() > 0


def test_all_subsets_add_up_to_the_full_gradient_linear_net():
    model = linear_net(seed=1)
    x = torch.randn(2, 3, 8, 8)
    total = sum(routed_grad(model, x, linear_loss, list(s))
                for k in range(5) for s in itertools.combinations(range(4), k))
    xp = x.clone().requires_grad_(True)
    (full,) = torch.autograd.grad(linear_loss(model(xp)), [xp])  # the net as built, no taps
    torch.testing.assert_close(total, full, rtol=1e-5, atol=1e-7)


def cross_entropy(y):
    return lambda out: F.cross_entropy(out, y, reduction="sum")


CASES = [("identity", "original", "A"), ("identity", "full_preact", "B"), ("scale", "bn_after_add", "C"),
         ("conv1x1", "relu_preact", "A"), ("dropout", "full_preact", "A")]


@pytest.mark.parametrize("kind,unit,downsample", CASES, ids=["-".join(c) for c in CASES])
def test_all_subsets_add_up_to_the_full_gradient_with_relu_and_bn(kind, unit, downsample):
    """The chain rule is linear: with ReLU after the addition and BN on batch statistics the 2^n
    routed gradients still add up to the ordinary one (the forward is fixed, only routes differ)."""
    model = cifar_model(kind, unit, downsample)
    x, y = torch.randn(4, 3, 8, 8), torch.tensor([0, 3, 5, 9])
    x.requires_grad_(True)
    with P.routed(model) as router, torch.random.fork_rng():
        out = model(x)
        loss = cross_entropy(y)(out)
        router.full()
        (full,) = torch.autograd.grad(loss, [x], retain_graph=True)
        total = torch.zeros_like(x)
        for k in range(4):
            for s in itertools.combinations(range(3), k):
                router.path(list(s))
                total += torch.autograd.grad(loss, [x], retain_graph=True)[0]
    torch.testing.assert_close(total, full, rtol=1e-4, atol=1e-6)


def jacobian(fn, at):
    return torch.autograd.functional.jacobian(fn, at).reshape(-1, at.numel())  # (outputs, inputs)


@pytest.mark.parametrize("unit,downsample", [("original", "A"), ("full_preact", "B"), ("bn_after_add", "A")])
@pytest.mark.parametrize("through_branch", [(), (1,), (0, 2)])
def test_route_is_the_product_of_unit_jacobians(unit, downsample, through_branch):
    """Independent of the taps: the route's gradient at the first unit's input is the loss gradient
    at the last unit times, unit by unit, the Jacobian of post(combine(skip(pre(h)), F fixed)) or
    of post(combine(skip fixed, F(pre(h)))) at the full forward's values (Veit et al. sec. 5)."""
    model = cifar_model("identity", unit, downsample, seed=2)
    x, y = torch.randn(2, 3, 8, 8), torch.tensor([1, 7])
    with torch.no_grad():
        inputs = [model.stem(x)]
        for u in model.units:
            inputs.append(u(inputs[-1]))
    last = inputs[-1].clone().requires_grad_(True)
    head = model.fc(model.pool(model.head_act(last)).flatten(1))
    (vec,) = torch.autograd.grad(cross_entropy(y)(head), [last])
    vec = vec.reshape(1, -1)
    for i in reversed(range(3)):
        u, h0 = model.units[i], inputs[i]
        with torch.no_grad():
            x0 = u.shared_pre(h0)
            skip0, fx0 = u.skip(x0), u.branch(x0)
        if i in through_branch:
            fn = lambda h, u=u, x0=x0, skip0=skip0: u.post(u.combine(x0, skip0, u.branch(u.shared_pre(h))))  # noqa: E731
        else:
            fn = lambda h, u=u, x0=x0, fx0=fx0: u.post(u.combine(x0, u.skip(u.shared_pre(h)), fx0))  # noqa: E731
        vec = vec @ jacobian(fn, h0)  # (1, numel of h0)
    want = vec.reshape(inputs[0].shape)
    first = inputs[0].clone().requires_grad_(True)
    with P.routed(model) as router:
        out = model.fc(model.pool(model.head_act(model.units[2](model.units[1](model.units[0](first))))).flatten(1))
        router.path(list(through_branch))
        (got,) = torch.autograd.grad(cross_entropy(y)(out), [first])
    torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-6)


ALL_KINDS = [("identity", "original", "A"), ("scale", "full_preact", "B"), ("exclusive_gate", "original", "B"),
             ("highway", "full_preact", "A"), ("shortcut_gate", "relu_preact", "A"), ("conv1x1", "original", "A"),
             ("dropout", "full_preact", "A"), ("none", "original", "A")]


@pytest.mark.parametrize("kind,unit,downsample", ALL_KINDS, ids=["-".join(c) for c in ALL_KINDS])
def test_forward_is_unchanged_and_modules_come_back(kind, unit, downsample):
    model = cifar_model(kind, unit, downsample).eval()
    x = torch.randn(2, 3, 8, 8)
    keys = list(model.state_dict())
    modules = [(u.skip, u.branch, getattr(u.combine, "gate", None)) for u in model.units]
    with torch.no_grad():
        want = model(x)
        with P.routed(model) as router:
            assert router.n == (0 if kind == "none" else 3)
            for route in ([], [1], [0, 1, 2]):
                router.path(route)
                torch.testing.assert_close(model(x), want, rtol=0, atol=0)
    assert list(model.state_dict()) == keys
    assert modules == [(u.skip, u.branch, getattr(u.combine, "gate", None)) for u in model.units]


@pytest.mark.parametrize("kind", ["exclusive_gate", "highway", "shortcut_gate"])
def test_gated_routes_add_up_to_the_gradient_with_the_gate_value_held(kind):
    """For gated shortcuts the derivative of g(x) itself is on no path: the routes add up to the
    gradient of the same net with g(x) held at its value (detached)."""
    model = cifar_model(kind, "original", "B", seed=3)
    x, y = torch.randn(4, 3, 8, 8, requires_grad=True), torch.tensor([2, 4, 6, 8])
    with P.routed(model) as router:
        loss = cross_entropy(y)(model(x))
        total = torch.zeros_like(x)
        for k in range(4):
            for s in itertools.combinations(range(3), k):
                router.path(list(s))
                total += torch.autograd.grad(loss, [x], retain_graph=True)[0]

    class Held(nn.Module):
        def __init__(self, gate):
            super().__init__()
            self.inner = gate

        def forward(self, h):
            return self.inner(h).detach()

    gates = [u.combine.gate for u in model.units]
    for u, g in zip(model.units, gates):
        u.combine.gate = Held(g)
    (held,) = torch.autograd.grad(cross_entropy(y)(model(x)), [x])
    torch.testing.assert_close(total, held, rtol=1e-4, atol=1e-6)


def test_no_branch_route_of_an_identity_preact_net_is_the_direct_term():
    """He 2016b eq. 5: with identity shortcuts and nothing after the addition, the route through no
    branch carries dE/dx_L unchanged down to x_l (the '1' of 1 + d/dx sum F). Measured from unit 2:
    the first unit applies its BN-ReLU before the split (the authors' code), which every path shares."""
    s = S.resolve(S.validate({"model": {"family": "digits", "depth": 10, "widths": [3], "unit": "full_preact"}}))
    torch.manual_seed(0)
    model = build_model(s.model, 1, 10).train()
    x, y = torch.randn(4, 1, 8, 8), torch.tensor([0, 1, 2, 3])
    with torch.no_grad():
        h = model.units[0](model.stem(x))
    first = h.clone().requires_grad_(True)
    with P.routed(model) as router:
        last = first
        for u in model.units[1:]:
            last = u(last)
        loss = cross_entropy(y)(model.fc(model.pool(model.head_act(last)).flatten(1)))
        router.path([])
        got, at_last = torch.autograd.grad(loss, [first, last])
    torch.testing.assert_close(got, at_last, rtol=0, atol=0)


def test_log_binomial_at_333_units_and_beyond():
    n = 333  # ResNet-1001 (bottleneck, He 2016b): 333 units
    for k in range(n + 1):
        assert P.log_binomial(n, k) == pytest.approx(math.log(math.comb(n, k)), rel=1e-12, abs=1e-9)
    logs = [P.log_binomial(n, k) for k in range(n + 1)]
    assert P.logsumexp(logs) == pytest.approx(n * math.log(2), rel=1e-12)  # sum_k C(n, k) = 2^n
    assert math.isfinite(P.log_binomial(5000, 2500))  # C ~ 1e1503: beyond any float, not its log
    assert P.log_binomial(4, 5) == -math.inf


def test_veit_window_of_5_to_17_units_is_045_percent_of_all_paths():
    """Veit et al. 2016 sec. 5: paths 5-17 units long are 0.45% of the 2^54 paths of ResNet-110."""
    log_window = P.logsumexp([P.log_binomial(54, k) for k in range(5, 18)])
    assert math.exp(log_window - 54 * math.log(2)) == pytest.approx(0.0045, abs=0.00005)


def test_shortest_window():
    assert P.shortest_window([0.1, 0.5, 0.3, 0.1], 0.8) == pytest.approx((1, 2, 0.8))
    assert P.shortest_window([0.05, 0.05, 0.9], 0.9)[:2] == (2, 2)
    assert P.shortest_window([0.45, 0.1, 0.45], 0.9)[:2] == (0, 2)
    lo, hi, carried = P.shortest_window([0.3, 0.3, 0.4], 1.0)  # all of it, despite rounding
    assert (lo, hi) == (0, 2) and carried == pytest.approx(1.0)
    # equally short windows: the one that carries more
    assert P.shortest_window([0.35, 0.1, 0.2, 0.35], 0.4)[:2] == (2, 3)


def test_summary_by_hand():
    """n = 4, one path of length k has gradient 2^-k: totals C(4, k) 2^-k = 1, 2, 1.5, 0.5, 0.0625."""
    sampled = {"n": 4, "fixed": 0, "input": [[2.0 ** -k, 2.0 ** -k] for k in range(5)],
               "unit": [[1.0], [1.0], [1.0], [1.0], [1.0]], "full_input": [1.0], "full_unit": [1.0]}
    r = P.summarise(sampled, mass=0.8)
    totals = [1, 2, 1.5, 0.5, 0.0625]
    assert [row["grad_share"] for row in r["rows"]] == pytest.approx([t / 5.0625 for t in totals])
    assert [row["grad_std"] for row in r["rows"]] == [0.0] * 5
    assert (r["window"]["first"], r["window"]["last"]) == (0, 2)  # 4.5 / 5.0625 = 0.889 >= 0.8
    assert r["window"]["paths_fraction"] == pytest.approx(11 / 16)
    assert r["window"]["peak"] == 1 and r["window"]["mean_length"] == pytest.approx(6.75 / 5.0625)
    assert [row["unit_grad_share"] for row in r["rows"]] == pytest.approx([c / 16 for c in (1, 4, 6, 4, 1)])
    assert (r["unit_window"]["first"], r["unit_window"]["last"]) == (1, 3)  # 14 / 16 >= 0.8
    assert P.summarise(sampled, mass=0.9)["window"]["last"] == 3  # 5 / 5.0625


def test_sampling_restores_the_model():
    model = cifar_model("identity", "original", "A").eval()
    state = {k: v.clone() for k, v in model.state_dict().items()}
    batches = [(torch.randn(4, 3, 8, 8), torch.tensor([0, 1, 2, 3]))]
    sampled = P.sample_gradients(model, batches, samples=3, seed=0)
    assert sampled["n"] == 3 and [len(v) for v in sampled["input"]] == [3, 3, 3, 3]
    assert not model.training
    for k, v in model.state_dict().items():
        torch.testing.assert_close(v, state[k], rtol=0, atol=0)  # BN running statistics too
    again = P.sample_gradients(model, batches, samples=3, seed=0)
    assert again["input"] == sampled["input"]  # seeded: the same unit sets


def test_a_diverged_net_is_one_error():
    model = cifar_model().eval()
    with torch.no_grad():
        model.fc.weight[0, 0] = float("nan")
    train = type("Split", (), {"x": torch.randn(8, 3, 8, 8), "y": torch.arange(8), "__len__": lambda self: 8})()
    with pytest.raises(UserError, match="not finite"):
        P.study(model, train, label="x", source="run", state="trained", batch_size=4, samples=1, mass=0.9, seed=0)


def json_lines(r):
    return [json.loads(line) for line in r.stdout.splitlines()]


@pytest.fixture
def run(residual8_run):
    return residual8_run  # conftest: the bundled residual 8-layer digits net, width 4, one epoch


def test_paths_cli_on_a_run_directory(run):
    r = invoke("paths", run, "--samples", 3, "--batch-size", 16)
    assert r.exit_code == 0, r.stderr
    rows = json_lines(r)
    ks = [x for x in rows if x["event"] == "paths_k"]
    assert [x["length"] for x in ks] == [0, 1, 2, 3]
    assert [round(math.exp(x["log_paths"])) for x in ks] == [1, 3, 3, 1]
    assert all(x["samples"] == 3 and x["grad_min"] <= x["grad_mean"] <= x["grad_max"] for x in ks)
    assert sum(x["grad_share"] for x in ks) == pytest.approx(1.0)
    (summary,) = [x for x in rows if x["event"] == "paths_summary"]
    assert summary["units"] == summary["routable"] == 3 and summary["state"] == "trained"
    assert 0 <= summary["window"]["first"] <= summary["window"]["last"] <= 3
    assert summary["window"]["carried"] >= 0.9
    assert rows[-1] == {"event": "figure", "path": str(run / "paths.png")}
    assert (run / "paths.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_paths_cli_at_init_and_plain_net(tmp_path):
    fig = tmp_path / "p.png"
    r = invoke("paths", "--init", "digits/residual8", "digits/plain8", "--set", "model.widths=[4]",
               "--samples", 2, "--mass", 0.5, "--out", fig)
    assert r.exit_code == 0, r.stderr
    rows = json_lines(r)
    by = {label: [x for x in rows if x.get("label") == label] for label in ("ResNet-8", "plain-8")}
    assert [x["length"] for x in by["ResNet-8"] if x["event"] == "paths_k"] == [0, 1, 2, 3]
    plain = [x for x in by["plain-8"] if x["event"] == "paths_k"]
    assert len(plain) == 1 and plain[0]["length"] == 3 and plain[0]["grad_share"] == 1.0  # one path
    (s_plain,) = [x for x in by["plain-8"] if x["event"] == "paths_summary"]
    assert s_plain["routable"] == 0 and s_plain["state"] == "init"
    assert (s_plain["window"]["first"], s_plain["window"]["last"]) == (3, 3)
    assert s_plain["full_grad"] == pytest.approx(plain[0]["grad_mean"], rel=1e-5)
    assert fig.is_file()


def test_with_init_sets_the_run_beside_its_initial_net(run, tmp_path):
    r = invoke("paths", run, "--with-init", "--samples", 2, "--out", tmp_path / "w.png")
    assert r.exit_code == 0, r.stderr
    summaries = [x for x in json_lines(r) if x["event"] == "paths_summary"]
    assert [(x["label"], x["state"]) for x in summaries] == [("ResNet-8", "trained"), ("ResNet-8", "init")]
    assert summaries[0]["full_grad"] != summaries[1]["full_grad"]  # other weights


@pytest.mark.parametrize("args,needle", [
    (["--mass", "1.5"], "--mass 1.5"),
    (["--init", "--with-init"], "give one"),
    (["--set", "model.depth=14"], "--set changes the spec"),
])
def test_bad_flags_are_one_line(run, args, needle):
    r = invoke("paths", run, *args)
    assert r.exit_code == 2
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and needle in lines[0], r.stderr


@pytest.mark.parametrize("kind,needle", [("missing", "no such run directory"), ("file", "not a run directory"),
                                         ("no spec", "no spec.yaml"), ("no checkpoint", "no checkpoint.pt"),
                                         ("foreign weights", "do not fit")])
def test_bad_run_dir_is_one_line(kind, needle, run, tmp_path):
    bad = tmp_path / "bad"
    if kind == "file":
        bad.write_text("x")
    elif kind != "missing":
        bad.mkdir()
        if kind != "no spec":
            (bad / "spec.yaml").write_text((run / "spec.yaml").read_text().replace("widths: [4]", "widths: [6]"))
        if kind == "foreign weights":
            (bad / "checkpoint.pt").write_bytes((run / "checkpoint.pt").read_bytes())
    r = invoke("paths", run, bad)
    assert r.exit_code == 2
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("resnet: error:") and needle in lines[0], r.stderr
    assert r.stdout == ""
