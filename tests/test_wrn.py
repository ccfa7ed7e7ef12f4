"""Wide residual nets, WRN-d-k (Zagoruyko and Komodakis 2016): the family's parameter counts against
a closed form written here, and that form against the counts the WRN paper gives (Table 2 ff.:
WRN-28-10 36.5M, WRN-16-8 11.0M on CIFAR-10)."""

import pytest
import torch
from torch import nn

from resnet_cli import spec as S
from resnet_cli.errors import UserError
from resnet_cli.model import build_model, count_params


def wrn(depth: int, k: int, **model):
    s = S.load({"model": {"family": "wrn", "depth": depth, "widen": k, **model}})
    return s, build_model(s.model, 3, 10)


def closed_form(depth: int, k: int, classes: int = 10, channels: int = 3) -> int:
    """A 3x3 conv to 16 channels; three stages of n = (d - 4) / 6 pre-activation units at widths
    16k, 32k, 64k, each unit BN-ReLU-conv3x3-BN-ReLU-conv3x3 (BN: 2 parameters a channel) with a
    1x1 projection where the width changes; BN-ReLU, pool and a linear classifier at the end."""
    n = (depth - 4) // 6
    total = 9 * channels * 16
    c = 16
    for w in (16 * k, 32 * k, 64 * k):
        total += 2 * c + 9 * c * w + 2 * w + 9 * w * w + (c * w if c != w else 0)  # the first unit
        total += (n - 1) * (2 * w + 9 * w * w + 2 * w + 9 * w * w)
        c = w
    return total + 2 * c + c * classes + classes


@pytest.mark.parametrize("depth,k", [(10, 1), (16, 4), (22, 2), (28, 10), (16, 8), (40, 4)])
def test_parameter_counts_match_the_closed_form(depth, k):
    _, net = wrn(depth, k)
    assert count_params(net) == closed_form(depth, k)


@pytest.mark.parametrize("depth,k,millions", [(28, 10, 36.5), (16, 8, 11.0)])
def test_closed_form_matches_the_papers_counts(depth, k, millions):
    assert round(closed_form(depth, k) / 1e6, 1) == millions


def test_wrn_is_pre_activation_with_projections_where_the_width_changes_and_dropout_between_the_convs():
    s, net = wrn(16, 4, dropout=0.3)
    assert s.model.unit == "full_preact" and s.model.widths == [64, 128, 256] and s.model.downsample == "B"
    assert net.stem[0].out_channels == 16
    assert [isinstance(u.skip, nn.Conv2d) for u in net.units] == [True, False, True, False, True, False]
    for u in net.units:
        kinds = [type(m).__name__ for m in u.branch.modules() if not isinstance(m, (nn.Sequential, nn.Identity))]
        # BN-ReLU first (shared where the unit projects), then conv, BN, ReLU, dropout, conv
        assert kinds[-5:] == ["Conv2d", "BatchNorm2d", "ReLU", "Dropout", "Conv2d"]
        assert [m.p for m in u.branch.modules() if isinstance(m, nn.Dropout)] == [0.3]
    net.eval()
    x = torch.randn(2, 3, 32, 32)
    with torch.no_grad():
        assert torch.equal(net(x), net(x))  # dropout is off at test time


@pytest.mark.parametrize("model,match", [({"family": "wrn", "depth": 28}, "widen"),
                                         ({"family": "wrn", "depth": 20, "widen": 2}, "6n\\+4"),
                                         ({"family": "cifar", "depth": 20, "widen": 2}, "widen")])
def test_bad_wrn_specs_are_one_line_errors(model, match):
    with pytest.raises(UserError, match=match):
        S.load({"model": model})
