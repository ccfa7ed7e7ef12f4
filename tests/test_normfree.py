"""Residual nets without normalisation: `model.norm: none`, SkipInit and ReZero on conv nets, Fixup.

Each test checks the method's defining property against a computation made here by hand: the BN
slots empty, identity at init, Fixup's init scale L^(-1/(2m-2)) and its zero layers."""

import math

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from resnet_cli import spec as S
from resnet_cli.errors import UserError
from resnet_cli.model import build_model, count_params
from resnet_cli.model.units import ScalarBias, ScalarScale


def build(model: dict, in_channels=3, classes=10):
    s = S.load({"model": model})
    return build_model(s.model, in_channels, classes)


def bn_params(net: nn.Module) -> int:
    return sum(2 * m.num_features for m in net.modules() if isinstance(m, nn.BatchNorm2d))


@pytest.mark.parametrize("unit", S.UNITS)
def test_norm_none_empties_every_bn_slot_and_keeps_the_ordering(unit):
    with_bn = build({"depth": 20, "unit": unit})
    without = build({"depth": 20, "unit": unit, "norm": "none"})
    assert not any(isinstance(m, nn.modules.batchnorm._BatchNorm) for m in without.modules())
    assert count_params(without) == count_params(with_bn) - bn_params(with_bn)
    # The same modules at the same places: each BatchNorm became an identity, nothing else moved.
    a, b = dict(with_bn.named_modules()), dict(without.named_modules())
    assert a.keys() == b.keys()
    for name, m in a.items():
        expected = nn.Identity if isinstance(m, nn.BatchNorm2d) else type(m)
        assert isinstance(b[name], expected), name


def test_norm_none_projection_has_no_bn():
    net = build({"depth": 20, "downsample": "B", "norm": "none"})
    projections = [u.skip for u in net.units if isinstance(u.skip, nn.Conv2d)]
    assert len(projections) == 2  # the two stage changes, bare 1x1 convs


def by_hand_without_branches(net, x: torch.Tensor) -> torch.Tensor:
    """The stem-to-head path of a CIFAR original-ordering net, no BN, every branch removed: after
    the stem conv and its ReLU, each unit is ReLU(skip), the skip being option A's zero-padding
    (subsample by 2, zero channels appended) where the shape changes (He 2016a sec. 4.2)."""
    conv = net.stem[0]
    x = F.relu(F.conv2d(x, conv.weight, padding=1))
    for unit in net.units:
        if unit.stride == 2:
            x = x[:, :, ::2, ::2]
        if unit.out_channels > x.shape[1]:
            x = torch.cat([x, x.new_zeros(x.shape[0], unit.out_channels - x.shape[1], *x.shape[2:])], 1)
        x = F.relu(x)
    pooled = x.mean(dim=(2, 3))
    return pooled @ net.fc.weight.T + net.fc.bias


@pytest.mark.parametrize("kind", ["skipinit", "rezero"])
def test_skipinit_and_rezero_start_every_conv_unit_as_its_shortcut(kind):
    torch.manual_seed(0)
    net = build({"depth": 20, "norm": "none", "shortcut": {"kind": kind}})
    x = torch.randn(4, 3, 16, 16)
    with torch.no_grad():
        assert torch.allclose(net(x), by_hand_without_branches(net, x), atol=1e-6)
    # ... and not trivially: the branches compute something, scaled by an alpha of exactly 0
    unit = net.units[3]
    assert unit.branch(torch.randn(2, 16, 8, 8)).abs().sum() > 0
    assert all(u.combine.alpha.item() == 0.0 for u in net.units)
    # alpha is learned: its gradient at 0 is the branch's correlation with the error signal
    F.cross_entropy(net(x), torch.tensor([0, 1, 2, 3])).backward()
    assert all(u.combine.alpha.grad is not None for u in net.units)
    assert any(u.combine.alpha.grad.abs() > 0 for u in net.units)


def test_rezero_has_nothing_after_the_addition_and_skipinit_keeps_the_relu():
    """Bachlechner et al. 2020 eq. 4: x + alpha F(x), nothing after the sum. De and Smith 2020 scale
    the branch alike inside the net's own unit, whose ReLU follows the addition. With the same
    weights, alpha 0.7 and a stream with negative entries, each unit matches its paper's formula by
    hand (F: 3x3 conv, ReLU, 3x3 conv, no BN) and the two nets give different outputs."""
    torch.manual_seed(0)
    skipinit = build({"depth": 8, "norm": "none", "shortcut": {"kind": "skipinit"}})
    rezero = build({"depth": 8, "norm": "none", "shortcut": {"kind": "rezero"}})
    rezero.load_state_dict(skipinit.state_dict())
    for u in [*skipinit.units, *rezero.units]:
        u.combine.alpha.data.fill_(0.7)
    x = torch.randn(2, 16, 8, 8)
    s_unit, r_unit = skipinit.units[0], rezero.units[0]
    fx = F.conv2d(F.relu(F.conv2d(x, s_unit.branch[1].weight, padding=1)), s_unit.branch[3].weight, padding=1)
    with torch.no_grad():
        torch.testing.assert_close(r_unit(x), x + 0.7 * fx)
        torch.testing.assert_close(s_unit(x), F.relu(x + 0.7 * fx))
        image = torch.randn(2, 3, 16, 16)
        assert not torch.allclose(rezero(image), skipinit(image), atol=1e-4)


def test_a_rezero_run_written_before_after_addition_keeps_its_relu():
    """A run directory's spec from before `model.shortcut.after_addition` reads as the net it trained
    (the ReLU after the addition); a new spec with kind rezero means the paper's unit."""
    from resnet_cli.spec.legacy import as_written

    old = S.to_tree(S.load({"model": {"norm": "none", "shortcut": {"kind": "rezero"}}}))
    assert old["model"]["shortcut"]["after_addition"] == "none"
    del old["model"]["shortcut"]["after_addition"]
    assert S.load(as_written(old)).model.shortcut.after_addition == "ordering"
    assert S.load(old).model.shortcut.after_addition == "none"


def test_the_hand_path_is_not_the_bn_net():
    """The oracle above tells a net with its branches from one without."""
    torch.manual_seed(0)
    net = build({"depth": 20, "norm": "none"})
    x = torch.randn(4, 3, 16, 16)
    with torch.no_grad():
        assert not torch.allclose(net(x), by_hand_without_branches(net, x), atol=1e-3)


# ---------------------------------------------------------------------------------------------
# Fixup (Zhang, Dauphin and Ma 2019)


def branch_convs(unit):
    return [m for m in unit.branch.modules() if isinstance(m, nn.Conv2d)]


@pytest.mark.parametrize("depth,block,units,m", [(20, "basic", 9, 2), (110, "basic", 54, 2), (47, "bottleneck", 15, 3)])
def test_fixup_scales_the_branch_init_by_L_to_the_minus_1_over_2m_minus_2(depth, block, units, m):
    torch.manual_seed(0)
    net = build({"depth": depth, "block": block, "norm": "fixup"})
    assert len(net.units) == units
    scale = {(9, 2): 1 / 3, (54, 2): 1 / math.sqrt(54), (15, 3): 15 ** -0.25}[(units, m)]  # L^(-1/(2m-2)) by hand
    for i in range(m - 1):  # every conv of the branch but the last, pooled over the units of the last stage
        ws = [branch_convs(u)[i].weight for u in net.units if u.out_channels == net.units[-1].out_channels]
        fan_out = ws[0].shape[0] * ws[0].shape[2] * ws[0].shape[3]
        measured = torch.cat([w.flatten() for w in ws]).std().item()
        expected = math.sqrt(2 / fan_out) * scale  # He et al. 2015 times Fixup's factor
        assert measured == pytest.approx(expected, rel=0.03), (i, measured, expected)


def test_fixup_zero_layers_biases_and_multipliers():
    net = build({"depth": 20, "norm": "fixup"})
    for unit in net.units:
        assert torch.count_nonzero(branch_convs(unit)[-1].weight) == 0
        biases = [m for m in unit.branch.modules() if isinstance(m, ScalarBias)]
        scales = [m for m in unit.branch.modules() if isinstance(m, ScalarScale)]
        # the authors' FixupBasicBlock: bias1a, bias1b, bias2a, bias2b and one scale
        assert len(biases) == 4 and len(scales) == 1
        assert all(b.bias.item() == 0 for b in biases) and scales[0].scale.item() == 1
    assert torch.count_nonzero(net.fc.weight) == 0 and torch.count_nonzero(net.fc.bias) == 0
    assert not any(isinstance(m, nn.BatchNorm2d) for m in net.modules())
    # Every branch is 0 at init, so each unit is ReLU(skip); the zero classifier gives zero logits.
    with torch.no_grad():
        assert torch.count_nonzero(net(torch.randn(2, 3, 16, 16))) == 0


def test_fixup_trains_a_step():
    torch.manual_seed(0)
    net = build({"depth": 20, "norm": "fixup", "widths": [4, 8, 8]})
    x, y = torch.randn(16, 3, 8, 8), torch.randint(0, 10, (16,))
    opt = torch.optim.SGD(net.parameters(), lr=0.1)
    losses = []
    for _ in range(5):
        opt.zero_grad()
        loss = F.cross_entropy(net(x), y)
        loss.backward()
        opt.step()
        losses.append(loss.item())
    assert losses[-1] < losses[0]


def test_norm_refused_for_vit():
    with pytest.raises(UserError, match="model.norm"):
        S.load({"model": {"family": "vit", "unit": "no_ln", "patch": 4, "heads": 2, "widths": [8], "depth": 1,
                          "norm": "none"}, "data": {"dataset": "digits"}})
