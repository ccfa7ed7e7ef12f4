"""Stochastic depth (Huang et al. 2016): survival probabilities, test-time scaling, whole-branch
drops per mini-batch, and a killed run that resumes bitwise."""


import pytest
import torch
from torch import nn

from processes import here, killed_and_resumed_is_bitwise
from resnet_cli import spec as S
from resnet_cli.errors import UserError
from resnet_cli.model import build_model
from resnet_cli.model.units import StochasticDepth, WholeBranch


def build(model: dict):
    s = S.load({"model": model})
    return build_model(s.model, 3, 10)


def test_survival_decays_linearly_to_p_L():
    net = build({"depth": 20, "stochastic_depth": 0.5})
    # Huang et al. 2016 eq. 4 by hand, L = 9 units: p_l = 1 - (l / 9) * 0.5
    hand = [1 - 1 / 18, 1 - 2 / 18, 1 - 3 / 18, 1 - 4 / 18, 1 - 5 / 18, 1 - 6 / 18, 1 - 7 / 18, 1 - 8 / 18, 0.5]
    assert [u.drop.survival for u in net.units] == pytest.approx(hand, abs=1e-12)
    assert all(isinstance(u.drop, WholeBranch) for u in build({"depth": 20}).units)  # 1.0: off


def one_unit(survival: float):
    torch.manual_seed(0)
    net = build({"depth": 14, "norm": "none", "widths": [4, 4, 4], "stochastic_depth": 0.5})
    unit = net.units[1]  # a unit that keeps its shape: skip is the identity
    unit.drop = StochasticDepth(survival)
    return unit, torch.randn(3, 4, 6, 6)


def test_test_time_scales_the_branch_by_its_survival():
    unit, x = one_unit(0.3)
    unit.eval()
    with torch.no_grad():
        expected = torch.relu(x + 0.3 * unit.branch(x))  # original unit: ReLU(x + p F(x)) (Huang eq. 5)
        assert torch.allclose(unit(x), expected, atol=1e-6)


def test_training_keeps_the_whole_branch_or_none_of_it_with_probability_p():
    unit, x = one_unit(0.3)
    unit.train()
    calls = []
    unit.branch.register_forward_hook(lambda *_: calls.append(1))
    torch.manual_seed(1)
    kept = 0
    with torch.no_grad():
        full, bare = torch.relu(x + unit.branch(x)), torch.relu(x)
        calls.clear()
        for _ in range(2000):
            y = unit(x)
            if torch.equal(y, full):
                kept += 1
            else:
                assert torch.equal(y, bare)  # dropped: the unit is its shortcut, for the whole batch
    assert kept == len(calls)  # a dropped branch is not run at all (no BN statistics updated)
    assert abs(kept / 2000 - 0.3) < 0.035  # 3.4 standard deviations of a Bernoulli(0.3) mean of 2000


def test_plain_nets_refuse_stochastic_depth():
    with pytest.raises(UserError, match="stochastic_depth"):
        S.load({"model": {"stochastic_depth": 0.5, "shortcut": {"kind": "none"}}})


# ~23 iterations an epoch (batch 64 on 1,437 digits), checkpoint every 10: the kill lands mid-epoch 2.
RUN = ["digits/residual8", "--set", "model.widths=[4]", "--epochs", "2", "--set", "train.checkpoint_every=10",
       "--set", "model.stochastic_depth=0.5"]


@pytest.mark.slow
def test_killed_and_resumed_run_draws_the_same_masks(tmp_path):
    wa = killed_and_resumed_is_bitwise(tmp_path, RUN)
    # ... and the masks mattered: without stochastic depth the same run ends elsewhere
    off = here("train", *RUN[:-2], "--out", "off", "--json", cwd=tmp_path)
    wo = torch.load(tmp_path / "off" / "checkpoint.pt", weights_only=True)["model"]
    assert not all(torch.equal(wa[k], wo[k]) for k in wa), off.stderr


def test_dropped_units_leave_the_other_parameters_gradients_alone():
    torch.manual_seed(0)
    net = build({"depth": 8, "widths": [2, 2, 2], "stochastic_depth": 0.01})
    for u in net.units:
        u.drop = StochasticDepth(1e-9)  # every branch dropped
    net(torch.randn(2, 3, 8, 8)).sum().backward()
    for u in net.units:
        assert all(p.grad is None for p in u.branch.parameters())
    assert net.fc.weight.grad is not None and isinstance(net.units[0].drop, nn.Module)
