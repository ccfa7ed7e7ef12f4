"""`build_model`: the one bridge from a spec's model section to modules, for every family."""

from __future__ import annotations

from torch import nn

from ..spec import ModelSpec
from ..spec.families import FAMILIES
from .nets import ResNet, build_conv_net
from .vit import build_vit


def build_model(m: ModelSpec, in_channels: int, num_classes: int) -> ResNet:
    """Conv families (cifar, imagenet, digits: nets.py) or the token nets of family vit (vit.py);
    both come back as a `ResNet`: stem, `.units`, `head_act`, pool, fc. It takes a resolved model
    section (from `spec.load`): the papers' choices for block, widths and downsampling are made
    there, once, and what the net was built with is what spec.yaml records."""
    if m.widths is None or (FAMILIES[m.family].net == "conv" and (m.block is None or m.downsample is None)):
        raise ValueError("build_model takes a resolved spec (spec.load); this model section has open fields")
    build = {"conv": build_conv_net, "tokens": build_vit}[FAMILIES[m.family].net]
    return build(m, in_channels, num_classes)


def count_params(model: nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())
