"""The builder over every axis, golden parameter counts, and two reference oracles."""

import itertools

import pytest
import torch
import torchvision
from torch import nn

from resnet_cli import spec as S
from resnet_cli.model import COMBINERS, ORDERINGS, build_model, count_params
from resnet_cli.model.units import make_unit


def build(tree, in_channels=3, classes=10):
    s = S.resolve(S.validate(tree))
    return build_model(s.model, in_channels, s.model.num_classes or classes)


def test_registries_match_spec_names():
    assert set(ORDERINGS.names()) == set(S.UNITS)
    assert set(COMBINERS.names()) == set(S.SHORTCUTS)


AXES = list(itertools.product(("basic", "bottleneck"), S.UNITS, S.SHORTCUTS, ("A", "B", "C")))


@pytest.mark.parametrize("block,unit,shortcut,downsample", AXES, ids=["-".join(a) for a in AXES])
def test_every_cifar_combination_trains(block, unit, shortcut, downsample):
    torch.manual_seed(0)
    depth = 8 if block == "basic" else 11
    model = build({"model": {"depth": depth, "block": block, "unit": unit, "downsample": downsample,
                             "widths": [2, 4, 4], "shortcut": {"kind": shortcut, "gate_bias": -1.0}}})
    x = torch.randn(4, 3, 8, 8, requires_grad=True)
    out = model(x)
    assert out.shape == (4, 10)
    assert torch.isfinite(out).all()
    out.sum().backward()
    assert torch.isfinite(x.grad).all()
    assert all(p.grad is not None and torch.isfinite(p.grad).all() for p in model.parameters() if p.requires_grad)


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


@pytest.mark.parametrize("gate", ["conv", "channel"])
@pytest.mark.parametrize("zero_init", [False, True])
@pytest.mark.parametrize("stride_in", ["1x1", "3x3"])
def test_more_axes(gate, zero_init, stride_in):
    model = build({"model": {"depth": 11, "widths": [2, 2, 2], "zero_init_last_bn": zero_init,
                             "bottleneck_stride": stride_in, "shortcut": {"kind": "shortcut_gate", "gate": gate}}})
    assert model(torch.randn(2, 3, 8, 8)).shape == (2, 10)


# -- golden parameter counts (He 2016a Table 6, He 2016b; torchvision for ImageNet) ----------------

PAPER_CIFAR = {20: 0.27e6, 32: 0.46e6, 44: 0.66e6, 56: 0.85e6, 110: 1.7e6, 1202: 19.4e6}


@pytest.mark.parametrize("depth", PAPER_CIFAR)
def test_cifar_option_a_params_match_paper(depth):
    n = count_params(build({"model": {"depth": depth, "downsample": "A"}}))
    assert abs(n - PAPER_CIFAR[depth]) / PAPER_CIFAR[depth] < 0.02


@pytest.mark.parametrize("depth,paper", [(164, 1.7e6), (1001, 10.2e6)])
def test_preact_bottleneck_params_match_paper(depth, paper):
    n = count_params(build({"model": {"depth": depth, "unit": "full_preact", "downsample": "B"}}))
    assert abs(n - paper) / paper < 0.02


TV = {18: torchvision.models.resnet18, 34: torchvision.models.resnet34, 50: torchvision.models.resnet50,
      101: torchvision.models.resnet101, 152: torchvision.models.resnet152}


@pytest.mark.parametrize("depth", TV)
def test_imagenet_params_equal_torchvision(depth):
    ours = count_params(build({"model": {"family": "imagenet", "depth": depth}}, classes=1000))
    assert ours == count_params(TV[depth]())


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
    eps = 1e-6
    fd = torch.zeros(n, n, dtype=torch.double)
    with torch.no_grad():
        for i in range(n):
            d = torch.zeros(n, dtype=torch.double)
            d[i] = eps
            d = d.view_as(x)
            fd[:, i] = ((unit(x + d) - unit(x - d)) / (2 * eps)).flatten()
    jf = torch.autograd.functional.jacobian(lambda v: unit.branch(v), x).reshape(n, n)
    torch.testing.assert_close(fd, torch.eye(n, dtype=torch.double) + jf, atol=1e-6, rtol=1e-6)


def test_preact_net_has_final_bn_relu_and_projection_reads_preactivated_input():
    model = build({"model": {"depth": 20, "block": "bottleneck", "unit": "full_preact", "downsample": "B",
                             "widths": [2, 2, 2]}})  # n = 2
    assert isinstance(model.head_act, nn.Sequential)  # BN-ReLU before pooling (He 2016b)
    stem_layers = list(model.stem)
    assert isinstance(stem_layers[0], nn.Conv2d) and all(isinstance(m, nn.Identity) for m in stem_layers[1:])
    first = model.units[0]
    assert isinstance(first.shared_pre, nn.Sequential)  # first unit: BN-ReLU before the split
    inner = model.units[1]
    assert isinstance(inner.shared_pre, nn.Identity) and isinstance(inner.skip, nn.Identity)
    proj = model.units[2]  # first unit of stage 2 changes shape
    assert isinstance(proj.shared_pre, nn.Sequential) and isinstance(proj.skip, nn.Conv2d)  # no BN on it


def test_zero_init_makes_every_unit_start_as_its_shortcut():
    torch.manual_seed(0)
    for unit in S.UNITS:
        model = build({"model": {"depth": 8, "unit": unit, "widths": [2, 4, 4], "zero_init_last_bn": True}}).eval()
        for u in model.units:
            assert torch.count_nonzero(u.branch(torch.randn(2, u.in_channels, 8, 8))) == 0


def test_checkpointing_gives_same_loss_grads_and_bn_stats():
    torch.manual_seed(0)
    a = build({"model": {"depth": 20, "unit": "full_preact", "widths": [4, 4, 8]}})
    b = build({"model": {"depth": 20, "unit": "full_preact", "widths": [4, 4, 8]}})
    b.load_state_dict(a.state_dict())
    b.checkpoint_segments = 3
    x, y = torch.randn(8, 3, 16, 16), torch.randint(0, 10, (8,))
    losses = []
    for m in (a, b):
        loss = nn.functional.cross_entropy(m(x), y)
        loss.backward()
        losses.append(loss)
    torch.testing.assert_close(losses[0], losses[1])
    for (na, pa), (_, pb) in zip(a.named_parameters(), b.named_parameters()):
        torch.testing.assert_close(pa.grad, pb.grad, msg=na)
    for (na, ba), (_, bb) in zip(a.named_buffers(), b.named_buffers()):
        torch.testing.assert_close(ba, bb, msg=na)  # BN statistics updated once, not twice
