"""Residual units: where BN and ReLU sit (He 2016b Table 2), basic and bottleneck branches.

An ordering is data: what comes before the first conv (pre-activation), what ends the branch,
and what follows the addition. The five units of Table 2 are five rows of `ORDERINGS`
(resnet_cli/spec/orderings.py); this module builds them.
"""

from __future__ import annotations

import torch
from torch import nn

from ..spec.orderings import ORDERINGS, Ordering
from .shortcuts import combiner_for, make_skip


def act(kind: str, channels: int) -> nn.Module:
    """'' -> Identity, 'relu', 'bn', 'bn_relu'."""
    layers: list[nn.Module] = []
    if "bn" in kind:
        layers.append(nn.BatchNorm2d(channels))
    if "relu" in kind:
        layers.append(nn.ReLU(inplace=False))
    if not layers:
        return nn.Identity()
    return layers[0] if len(layers) == 1 else nn.Sequential(*layers)


def conv3x3(cin: int, cout: int, stride: int = 1) -> nn.Conv2d:
    return nn.Conv2d(cin, cout, 3, stride=stride, padding=1, bias=False)


def conv1x1(cin: int, cout: int, stride: int = 1) -> nn.Conv2d:
    return nn.Conv2d(cin, cout, 1, stride=stride, bias=False)


def basic_branch(cin: int, width: int, stride: int, order: Ordering, pre_inside: bool) -> nn.Sequential:
    """Two 3x3 convs (He 2016a Fig. 5 left). Output channels: width."""
    return nn.Sequential(
        act(order.pre if pre_inside else "", cin),
        conv3x3(cin, width, stride),
        act("bn_relu", width),
        conv3x3(width, width),
        act(order.end, width),
    )


def bottleneck_branch(cin: int, width: int, stride: int, order: Ordering, pre_inside: bool,
                      stride_in: str) -> nn.Sequential:
    """1x1 reduce, 3x3, 1x1 expand x4 (He 2016a Fig. 5 right). The paper strides in the first 1x1;
    torchvision's "v1.5" in the 3x3 (stride_in='3x3'), which the ImageNet parity tests use."""
    s1, s3 = (stride, 1) if stride_in == "1x1" else (1, stride)
    return nn.Sequential(
        act(order.pre if pre_inside else "", cin),
        conv1x1(cin, width, s1),
        act("bn_relu", width),
        conv3x3(width, width, s3),
        act("bn_relu", width),
        conv1x1(width, 4 * width),
        act(order.end, 4 * width),
    )


class ResidualUnit(nn.Module):
    """y = combine(x, project(x), F(x)); x_next = post(y)   (He 2016b eq. 1-2)."""

    def __init__(self, shared_pre: nn.Module, skip: nn.Module, branch: nn.Module, combine: nn.Module,
                 post: nn.Module, in_channels: int, out_channels: int, stride: int):
        super().__init__()
        self.shared_pre = shared_pre
        self.skip = skip
        self.branch = branch
        self.combine = combine
        self.post = post
        self.in_channels, self.out_channels, self.stride = in_channels, out_channels, stride

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.shared_pre(x)  # pre-activation shared by both paths (first unit, shape change)
        fx = self.branch(x)  # (N, C_out, H/s, W/s)
        skip = self.skip(x) if getattr(self.combine, "uses_skip", True) else None
        y = self.combine(x, skip, fx)
        return self.post(y)


def make_unit(block: str, cin: int, width: int, stride: int, ordering: str, *, shortcut: dict,
              downsample: str, pre_at: str, bottleneck_stride: str) -> ResidualUnit:
    """Build one unit from explicit arguments (never the spec object).

    `pre_at` says where the ordering's pre-activation goes (He 2016b, authors' code):
    - "branch": inside the branch, the shortcut stays clean (every ordinary unit);
    - "shared": once *before* the split, so a projection reads the activated input (the first unit of
      a CIFAR net, right after the stem conv, and every unit that changes shape;
      `resnet-pre-act.lua` in KaimingHe/resnet-1k-layers);
    - "none": no pre-activation at all (the first unit of an ImageNet net, whose stem already ends in
      BN-ReLU-max-pool: fb.resnet.torch `preresnet.lua`, its "no_preact" unit).
    """
    if pre_at not in ("branch", "shared", "none"):
        raise ValueError(f"pre_at must be branch, shared or none, got {pre_at!r}")
    order = ORDERINGS[ordering]
    cout = width * (4 if block == "bottleneck" else 1)
    shared = pre_at == "shared" and bool(order.pre)
    inside = pre_at == "branch"
    if block == "bottleneck":
        branch = bottleneck_branch(cin, width, stride, order, inside, bottleneck_stride)
    else:
        branch = basic_branch(cin, width, stride, order, inside)
    combine = combiner_for(shortcut, cin, cout, stride)
    if not getattr(combine, "uses_skip", True):
        skip: nn.Module = nn.Identity()  # a plain net has no shortcut parameters at all
    else:
        skip = make_skip(downsample, cin, cout, stride, with_bn=shortcut["bn"] and not order.pre,
                         always_project=getattr(combine, "always_project", False))
    return ResidualUnit(
        shared_pre=act(order.pre, cin) if shared else nn.Identity(),
        skip=skip, branch=branch, combine=combine, post=act(order.post, cout),
        in_channels=cin, out_channels=cout, stride=stride,
    )
