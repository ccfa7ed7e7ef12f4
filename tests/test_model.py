"""The builder over every axis, golden parameter counts, and two reference oracles."""

import itertools

import pytest
import torch
import torchvision
from torch import nn

from resnet_cli import spec as S
from resnet_cli.model import COMBINERS, ORDERINGS, build_model, count_params
from oracles import finite_difference_jacobian
from resnet_cli.model.units import make_unit


def build(tree, in_channels=3, classes=10):
    s = S.resolve(S.validate(tree))
    return build_model(s.model, in_channels, s.model.num_classes or classes)


def test_registries_match_spec_names():
    assert set(ORDERINGS.names()) == set(S.UNITS)
    assert set(COMBINERS.names()) == set(S.SHORTCUTS)


AXES = list(itertools.product(("basic", "bottleneck"), S.UNITS, S.SHORTCUTS, ("A", "B", "C")))


@pytest.mark.parametrize("block,unit,shortcut,downsample", AXES, ids=["-".join(a) for a in AXES])
def test_every_cifar_combination_learns(block, unit, shortcut, downsample):
    """Two units a stage, so every stage has a unit that neither starts the net nor changes shape
    (the middle pre-activation unit); one SGD step must lower the loss on the batch it saw."""
    torch.manual_seed(0)
    depth = 14 if block == "basic" else 20  # n = 2
    model = build({"model": {"depth": depth, "block": block, "unit": unit, "downsample": downsample,
                             "widths": [2, 4, 4], "shortcut": {"kind": shortcut, "gate_bias": -1.0}}})
    assert len(model.units) == 6
    if shortcut in ("rezero", "skipinit"):
        # alpha = 0 leaves option A's zero-padded channels identically 0 at init; a BN of an all-zero
        # channel jumps to unit variance on any step, however small. Start alpha off 0 to test learning.
        for unit in model.units:
            nn.init.constant_(unit.combine.alpha, 0.5)
    x, y = torch.randn(8, 3, 8, 8), torch.randint(0, 10, (8,))

    def loss():
        torch.manual_seed(1)  # the same dropout-shortcut mask before and after the step
        return nn.functional.cross_entropy(model(x), y)
    before = loss()
    before.backward()
    assert all(p.grad is not None and torch.isfinite(p.grad).all() for p in model.parameters())
    norm = torch.sqrt(sum((p.grad ** 2).sum() for p in model.parameters()))
    # A step of length 1e-3 in parameter space: tiny nets are sharp, a fixed lr overshoots some.
    torch.optim.SGD(model.parameters(), lr=1e-3 / float(norm)).step()
    with torch.no_grad():
        after = loss()
    assert torch.isfinite(before) and after < before


@pytest.mark.parametrize("unit,shortcut", list(itertools.product(S.UNITS, ("identity", "none", "exclusive_gate"))))
@pytest.mark.parametrize("family,depth,shape", [("digits", 6, (1, 8, 8)), ("imagenet", 18, (3, 32, 32)),
                                                ("imagenet", 50, (3, 32, 32))])
def test_other_families(family, depth, shape, unit, shortcut):
    widths = [2] if family == "digits" else [2, 2, 2, 2]
    model = build({"model": {"family": family, "depth": depth, "unit": unit, "widths": widths,
                             "shortcut": {"kind": shortcut}}}, in_channels=shape[0])
    out = model(torch.randn(2, *shape))
    assert out.shape == (2, 10) and torch.isfinite(out).all()
    out.sum().backward()


# Exact parameter counts against hand counts and torchvision: test_paper_nets.py.


def test_plain_and_residual_twins_have_equal_params():
    for depth in (20, 56):
        plain = build({"model": {"depth": depth, "shortcut": {"kind": "none"}}})
        res = build({"model": {"depth": depth}})
        assert count_params(plain) == count_params(res)


# -- reference oracles ----------------------------------------------------------------------------

@pytest.mark.parametrize("stride,cin,cout", [(1, 8, 8), (2, 8, 16)])
def test_original_basic_unit_equals_torchvision_basicblock(stride, cin, cout):
    torch.manual_seed(0)
    ours = make_unit("basic", cin, cout, stride, "original",
                     shortcut=S.ShortcutSpec().model_dump(), downsample="B", pre_at="branch", bottleneck_stride="1x1")
    downsample = None
    if stride != 1 or cin != cout:
        downsample = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))
    ref = torchvision.models.resnet.BasicBlock(cin, cout, stride, downsample)
    # Same parameters in a different module order: copy by role.
    ref_params = [ref.conv1.weight, ref.bn1.weight, ref.bn1.bias, ref.conv2.weight, ref.bn2.weight, ref.bn2.bias]
    if downsample is not None:
        ref_params += [downsample[0].weight, downsample[1].weight, downsample[1].bias]
    ours_params = [p for n, p in ours.named_parameters() if n.startswith("branch")] + \
                  [p for n, p in ours.named_parameters() if n.startswith("skip")]
    assert len(ours_params) == len(ref_params)
    with torch.no_grad():
        for a, b in zip(ours_params, ref_params):
            b.copy_(torch.randn_like(a))
            a.copy_(b)
    x = torch.randn(3, cin, 8, 8)
    for mode in (True, False):
        ours.train(mode), ref.train(mode)
        torch.testing.assert_close(ours(x), ref(x), rtol=0, atol=1e-6)


def test_preact_identity_unit_jacobian_is_identity_plus_branch():
    """He 2016b eq. 5: with h = identity and f = identity, dy/dx = I + dF/dx."""
    torch.manual_seed(0)
    unit = make_unit("basic", 2, 2, 1, "full_preact", shortcut=S.ShortcutSpec().model_dump(),
                     downsample="A", pre_at="branch", bottleneck_stride="1x1").double().eval()
    with torch.no_grad():  # non-trivial BN statistics
        for m in unit.modules():
            if isinstance(m, nn.BatchNorm2d):
                m.running_mean.uniform_(-0.5, 0.5), m.running_var.uniform_(0.5, 2)
    x = torch.randn(1, 2, 4, 4, dtype=torch.double) + 0.01
    n = x.numel()
    fd = finite_difference_jacobian(unit, x)
    jf = torch.autograd.functional.jacobian(lambda v: unit.branch(v), x).reshape(n, n)
    torch.testing.assert_close(fd, torch.eye(n, dtype=torch.double) + jf, atol=1e-6, rtol=1e-6)


def recorded_inputs(modules, run):
    """The first positional input of each module, recorded by forward pre-hooks while `run()` runs."""
    seen = {name: [] for name in modules}
    hooks = [m.register_forward_pre_hook(lambda mod, args, name=name: seen[name].append(args[0]))
             for name, m in modules.items()]
    with torch.no_grad():
        run()
    for h in hooks:
        h.remove()
    return seen


def bn_relu_eval(x, bn):
    shape = (1, -1, 1, 1)
    y = (x - bn.running_mean.view(shape)) / torch.sqrt(bn.running_var.view(shape) + bn.eps)
    return torch.relu(y * bn.weight.view(shape) + bn.bias.view(shape))


def first_bn(module):
    return next(m for m in module.modules() if isinstance(m, nn.BatchNorm2d))


def first_conv(module):
    return next(m for m in module.modules() if isinstance(m, nn.Conv2d))


def test_preact_wiring_seen_by_forward_hooks():
    """He 2016b, authors' code: the stem is a bare conv; the first unit and each shape-changing unit
    apply one BN-ReLU that both the branch and the (BN-free) projection read; other units keep a
    clean identity shortcut; the net ends with BN-ReLU before pooling."""
    torch.manual_seed(0)
    model = build({"model": {"depth": 20, "block": "bottleneck", "unit": "full_preact", "downsample": "B",
                             "widths": [2, 3, 4]}})  # n = 2: units 0, 2, 4 change shape; 1, 3, 5 do not
    for m in model.modules():
        if isinstance(m, nn.BatchNorm2d):
            nn.init.uniform_(m.running_mean, -0.5, 0.5), nn.init.uniform_(m.running_var, 0.5, 2)
            nn.init.uniform_(m.weight, 0.5, 1.5), nn.init.uniform_(m.bias, -0.5, 0.5)
    model.eval()
    x = torch.randn(2, 3, 8, 8)
    watched = {"pool": model.pool}
    for i, u in enumerate(model.units):
        watched.update({f"unit{i}": u, f"skip{i}": u.skip, f"conv{i}": first_conv(u.branch)})
    seen = {k: v[0] for k, v in recorded_inputs(watched, lambda: model(x)).items()}
    stem_conv = first_conv(model.stem)
    torch.testing.assert_close(seen["unit0"], nn.functional.conv2d(x, stem_conv.weight, padding=1))
    for i, u in enumerate(model.units):
        pre = bn_relu_eval(seen[f"unit{i}"], first_bn(u))
        torch.testing.assert_close(seen[f"conv{i}"], pre)  # the branch always reads BN-ReLU(x)
        if i % 2 == 0:  # shape changes (or the first unit): the projection reads the same BN-ReLU(x)
            torch.testing.assert_close(seen[f"skip{i}"], pre)
            assert not any(isinstance(m, nn.BatchNorm2d) for m in u.skip.modules())
        else:  # the clean shortcut: the unit's raw input
            assert torch.equal(seen[f"skip{i}"], seen[f"unit{i}"])
    last_out = model.units[-1](seen["unit5"])
    torch.testing.assert_close(seen["pool"], bn_relu_eval(last_out, first_bn(model.head_act)))


def test_original_unit_projection_reads_the_raw_input():
    """He 2016a: the post-activation unit projects x itself, with BN after the projection."""
    torch.manual_seed(0)
    model = build({"model": {"depth": 8, "downsample": "B", "widths": [2, 3, 4]}}).eval()
    watched = {"unit1": model.units[1], "skip1": model.units[1].skip}
    seen = recorded_inputs(watched, lambda: model(torch.randn(2, 3, 8, 8)))
    assert torch.equal(seen["skip1"][0], seen["unit1"][0])
    assert any(isinstance(m, nn.BatchNorm2d) for m in model.units[1].skip.modules())


def bottleneck_reference(x, p, stride, stride_in):
    """He 2016a Fig. 5 right, written with functional ops: 1x1, 3x3, 1x1 (x4), BN after each, ReLU
    between, a BN'd 1x1 projection, ReLU after the sum. The paper strides in the first 1x1."""
    s1, s3 = (stride, 1) if stride_in == "1x1" else (1, stride)

    def bn(y, w, b):  # train-mode BN over the batch
        return nn.functional.batch_norm(y, None, None, w, b, training=True)
    y = torch.relu(bn(nn.functional.conv2d(x, p[0], stride=s1), p[1], p[2]))
    y = torch.relu(bn(nn.functional.conv2d(y, p[3], stride=s3, padding=1), p[4], p[5]))
    y = bn(nn.functional.conv2d(y, p[6]), p[7], p[8])
    return torch.relu(y + bn(nn.functional.conv2d(x, p[9], stride=stride), p[10], p[11]))


@pytest.mark.parametrize("stride_in", ["1x1", "3x3"])
def test_bottleneck_stride_position(stride_in):
    """bottleneck_stride=3x3 equals torchvision's Bottleneck ("v1.5") with copied weights; the
    paper's 1x1 equals a functional reference. The two differ, so neither passes as the other."""
    torch.manual_seed(0)
    cin, width, stride = 8, 4, 2
    ours = make_unit("bottleneck", cin, width, stride, "original", shortcut=S.ShortcutSpec().model_dump(),
                     downsample="B", pre_at="branch", bottleneck_stride=stride_in)
    params = [p for n, p in ours.named_parameters() if n.startswith("branch")] + \
             [p for n, p in ours.named_parameters() if n.startswith("skip")]
    assert [tuple(p.shape) for p in params[::3]] == [(4, 8, 1, 1), (4, 4, 3, 3), (16, 4, 1, 1), (16, 8, 1, 1)]
    with torch.no_grad():
        for p in params:
            p.copy_(torch.randn_like(p))
    x = torch.randn(3, cin, 8, 8)
    with torch.no_grad():
        got = ours(x)
        torch.testing.assert_close(got, bottleneck_reference(x, params, stride, stride_in), rtol=1e-5, atol=1e-5)
        other = bottleneck_reference(x, params, stride, "3x3" if stride_in == "1x1" else "1x1")
        assert not torch.allclose(got, other, atol=1e-3)
    if stride_in == "3x3":
        downsample = nn.Sequential(nn.Conv2d(cin, 4 * width, 1, stride, bias=False), nn.BatchNorm2d(4 * width))
        ref = torchvision.models.resnet.Bottleneck(cin, width, stride, downsample)
        ref_params = [ref.conv1.weight, ref.bn1.weight, ref.bn1.bias, ref.conv2.weight, ref.bn2.weight,
                      ref.bn2.bias, ref.conv3.weight, ref.bn3.weight, ref.bn3.bias, downsample[0].weight,
                      downsample[1].weight, downsample[1].bias]
        with torch.no_grad():
            for a, b in zip(params, ref_params):
                b.copy_(a)
            torch.testing.assert_close(got, ref(x), rtol=1e-5, atol=1e-5)


def test_checkpointing_is_bitwise_equal_and_really_recomputes():
    """README: losses, gradients and BN running statistics are bitwise equal with and without
    activation checkpointing, and BN statistics are updated once, not twice."""
    torch.manual_seed(0)
    a = build({"model": {"depth": 20, "unit": "full_preact", "widths": [4, 4, 8]}})
    b = build({"model": {"depth": 20, "unit": "full_preact", "widths": [4, 4, 8]}})
    b.load_state_dict(a.state_dict())
    b.checkpoint_segments = 3
    calls = {id(a): 0, id(b): 0}
    for m in (a, b):
        for conv in [c for c in m.units.modules() if isinstance(c, nn.Conv2d)]:
            conv.register_forward_pre_hook(lambda mod, args, key=id(m): calls.__setitem__(key, calls[key] + 1))
    x, y = torch.randn(8, 3, 16, 16), torch.randint(0, 10, (8,))
    losses = []
    for m in (a, b):
        loss = nn.functional.cross_entropy(m(x), y)
        loss.backward()
        losses.append(loss)
    convs = 2 * len(a.units)  # two 3x3 convs a unit; identity shortcuts
    assert calls[id(a)] == convs and calls[id(b)] == 2 * convs  # every conv ran again in the backward
    assert torch.equal(losses[0], losses[1])
    for (na, pa), (_, pb) in zip(a.named_parameters(), b.named_parameters()):
        assert torch.equal(pa.grad, pb.grad), na
    for (na, ba), (_, bb) in zip(a.named_buffers(), b.named_buffers()):
        assert torch.equal(ba, bb), na  # BN statistics updated once, not twice


@pytest.mark.parametrize("bn", [True, False])
def test_shortcut_bn_decides_whether_the_1x1_conv_shortcut_carries_a_batchnorm(bn):
    """He 2016b Table 1's 1x1-conv shortcut on the digits ResNet-8 at width 4: 3 units of 4 -> 4
    channels, each a 1x1 conv W_s (4*4 weights, no bias) with or without BN (4 weights + 4 biases)."""
    def net(kind, bn):
        return build({"model": {"family": "digits", "depth": 8, "widths": [4],
                                "shortcut": {"kind": kind, "bn": bn}}, "data": {"dataset": "digits"}}, 1, 10)

    with_conv = net("conv1x1", bn)
    skips = [u.skip for u in with_conv.units]
    assert len(skips) == 3
    assert all(isinstance(s, nn.Sequential) == bn for s in skips)
    assert sum(isinstance(m, nn.BatchNorm2d) for s in skips for m in s.modules()) == (3 if bn else 0)
    assert count_params(with_conv) - count_params(net("identity", bn)) == 3 * (4 * 4 + (8 if bn else 0))
