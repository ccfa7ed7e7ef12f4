"""How a conv net's weights start (`model.init`, `model.zero_init_last_bn`, `model.norm: fixup`):
He et al. 2015 as the authors' code draws it, a branch started at F(x) = 0, and Fixup. `build_conv_net`
applies them once the net is built; `torch_default` keeps the init each layer got when it was built."""

from __future__ import annotations

from torch import nn

from .shortcuts import init_own
from .units import ORDERINGS

# Each takes a conv net (nets.ResNet: `.units`, each with a `.branch`, and `.fc`); typed nn.Module
# because nets.py imports this module.


def he_init(model: nn.Module) -> None:
    """He et al. 2015 init as the authors' Torch code does it (resnet-pre-act.lua, fb.resnet.torch):
    every conv weight ~ N(0, 2/n) with n = k*k*C_out (fan_out), the 1x1 gate convs included (He 2016b
    appendix: all weights as in He et al. 2015); BN gamma 1, beta 0; the fc bias 0 (its weight keeps
    the framework's default, as there). Modules with their own rule apply it last (`own_init`: gates
    keep their b_g; the channel gate's linear map, a 1x1 conv on the pooled input, is drawn as one)."""
    for m in model.modules():
        if isinstance(m, nn.Conv2d):
            nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")
        elif isinstance(m, nn.modules.batchnorm._BatchNorm):
            nn.init.ones_(m.weight)
            nn.init.zeros_(m.bias)
    nn.init.zeros_(model.fc.bias)
    init_own(model, "he", "fan_out", (nn.Conv2d,))


# The module whose weight zero-init zeroes, by the branch's last op (Ordering.zero_init).
_ZEROED = {"bn": nn.BatchNorm2d, "conv": nn.Conv2d}


def zero_init_last(model: nn.Module, ordering: str, norm: str) -> None:
    """Start every branch at F(x) = 0, so each unit starts as its shortcut, with a gradient left.

    The zeroed weight is the branch's last op before the addition (`Ordering.zero_init`): the last
    BN's gamma where the branch ends in BN (original, relu_preact: Goyal et al. 2017), the last
    conv's weight where it ends in a conv (full_preact, bn_after_add: timm's pre-activation blocks
    zero their last conv in `zero_init_last`). Zeroing a BN that a ReLU follows would leave ReLU(0),
    whose gradient is 0: the branch would never train. A branch ending in ReLU has no such weight
    (relu_before_add; the spec refuses it). Without BN (`model.norm` none or fixup) every ordering's
    branch ends in its last conv, whose weight is zeroed."""
    kind = ORDERINGS[ordering].zero_init
    if kind is None:
        raise ValueError(f"zero-init cannot start a {ordering} branch at 0 and keep it trainable")
    if norm != "batch":  # no BN to zero: the branch's last op before the addition is its last conv
        kind = "conv"
    for unit in model.units:
        last = [m for m in unit.branch.modules() if isinstance(m, _ZEROED[kind])][-1]
        nn.init.zeros_(last.weight)


def fixup_init(model: nn.Module) -> None:
    """Fixup (Zhang, Dauphin and Ma 2019, sec. 3, rules 1-2; the authors' fixup_resnet_cifar.py):
    the classifier and the last conv of every branch start at 0; every other branch conv is drawn
    from He et al. 2015 (N(0, 2 / (k*k*C_out)), fan_out as in `he_init` and in the authors' code)
    and scaled by L^(-1 / (2m - 2)), with L the number of residual units and m the convs in a
    branch (2 in a basic unit: L^(-1/2); 3 in a bottleneck: L^(-1/4)). The stem and the
    projections keep the net's init."""
    n_units = len(model.units)
    for unit in model.units:
        convs = [m for m in unit.branch.modules() if isinstance(m, nn.Conv2d)]
        scale = n_units ** (-1.0 / (2 * len(convs) - 2))
        for conv in convs[:-1]:
            fan_out = conv.weight.shape[0] * conv.weight.shape[2] * conv.weight.shape[3]
            nn.init.normal_(conv.weight, 0.0, (2.0 / fan_out) ** 0.5 * scale)
        nn.init.zeros_(convs[-1].weight)
    nn.init.zeros_(model.fc.weight)
    nn.init.zeros_(model.fc.bias)
