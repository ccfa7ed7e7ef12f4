"""Residual units: where BN and ReLU sit (He 2016b Table 2), basic and bottleneck branches.

An ordering is data: what comes before the first conv (pre-activation), what ends the branch,
and what follows the addition. The five units of Table 2 are five rows of `ORDERINGS`
(resnet_cli/spec/orderings.py); this module builds them.
"""

from __future__ import annotations

import torch
from torch import nn

from ..spec.orderings import ORDERINGS, Ordering
from ..spec.shortcut_kinds import after_addition
from .shortcuts import combiner_for, make_skip


class ScalarBias(nn.Module):
    """Fixup's scalar bias (Zhang, Dauphin and Ma 2019): x + b, one learned b for the whole
    tensor, starting at 0."""

    def __init__(self):
        super().__init__()
        self.bias = nn.Parameter(torch.zeros(1))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.bias


class ScalarScale(nn.Module):
    """Fixup's scalar multiplier at the end of a branch: s * x, one learned s, starting at 1."""

    def __init__(self):
        super().__init__()
        self.scale = nn.Parameter(torch.ones(1))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * self.scale


def norm_layer(norm: str, channels: int) -> nn.Module:
    """What sits in a BN slot (`model.norm`): BatchNorm (He 2016a); nothing (`none`: the layer is an
    identity, so every ordering keeps its shape); Fixup's scalar bias (`fixup`: in the original
    unit the slots after conv1 and conv2 are exactly where the authors' FixupBasicBlock adds
    bias1b and bias2b)."""
    if norm == "batch":
        return nn.BatchNorm2d(channels)
    return ScalarBias() if norm == "fixup" else nn.Identity()


def act(kind: str, channels: int, norm: str = "batch", dropout: float = 0.0) -> nn.Module:
    """'' -> Identity, 'relu', 'bn', 'bn_relu' (the BN slot as `norm` says), then dropout with
    rate `dropout` if above 0 (WRN's dropout between the convs, Zagoruyko and Komodakis 2016)."""
    layers: list[nn.Module] = []
    if "bn" in kind:
        layers.append(norm_layer(norm, channels))
    if "relu" in kind:
        layers.append(nn.ReLU(inplace=False))
    if dropout > 0:
        layers.append(nn.Dropout(dropout))
    if not layers:
        return nn.Identity()
    return layers[0] if len(layers) == 1 else nn.Sequential(*layers)


def biased(conv: nn.Conv2d, norm: str) -> nn.Module:
    """Fixup puts a scalar bias before each conv (bias1a, bias2a in the authors' code); other
    nets take the conv as it is."""
    return nn.Sequential(ScalarBias(), conv) if norm == "fixup" else conv


def scaled(end: nn.Module, norm: str) -> nn.Module:
    """Fixup's multiplier at the end of the branch, before the end slot (out * scale + bias2b)."""
    return nn.Sequential(ScalarScale(), end) if norm == "fixup" else end


def conv3x3(cin: int, cout: int, stride: int = 1) -> nn.Conv2d:
    return nn.Conv2d(cin, cout, 3, stride=stride, padding=1, bias=False)


def conv1x1(cin: int, cout: int, stride: int = 1) -> nn.Conv2d:
    return nn.Conv2d(cin, cout, 1, stride=stride, bias=False)


def basic_branch(cin: int, width: int, stride: int, order: Ordering, pre_inside: bool,
                 norm: str = "batch", dropout: float = 0.0) -> nn.Sequential:
    """Two 3x3 convs (He 2016a Fig. 5 left). Output channels: width."""
    return nn.Sequential(
        act(order.pre if pre_inside else "", cin, norm),
        biased(conv3x3(cin, width, stride), norm),
        act("bn_relu", width, norm, dropout),
        biased(conv3x3(width, width), norm),
        scaled(act(order.end, width, norm), norm),
    )


def bottleneck_branch(cin: int, width: int, stride: int, order: Ordering, pre_inside: bool,
                      stride_in: str, norm: str = "batch", dropout: float = 0.0) -> nn.Sequential:
    """1x1 reduce, 3x3, 1x1 expand x4 (He 2016a Fig. 5 right). The paper strides in the first 1x1;
    torchvision's "v1.5" in the 3x3 (stride_in='3x3'), which the ImageNet parity tests use."""
    s1, s3 = (stride, 1) if stride_in == "1x1" else (1, stride)
    return nn.Sequential(
        act(order.pre if pre_inside else "", cin, norm),
        biased(conv1x1(cin, width, s1), norm),
        act("bn_relu", width, norm, dropout),
        biased(conv3x3(width, width, s3), norm),
        act("bn_relu", width, norm, dropout),
        biased(conv1x1(width, 4 * width), norm),
        scaled(act(order.end, 4 * width, norm), norm),
    )


class WholeBranch(nn.Module):
    """The branch runs on every step: the `drop` of a unit without stochastic depth."""

    def forward(self, branch: nn.Module, x: torch.Tensor, skip: torch.Tensor | None) -> torch.Tensor:
        return branch(x)


class StochasticDepth(nn.Module):
    """Huang et al. 2016: in training the whole branch is kept with probability `survival` per
    mini-batch and otherwise not run at all (F(x) = 0, as the authors' ResidualDrop.lua skips
    it: its BN statistics are not updated either); at test time F(x) is scaled by `survival`.
    The draw is one number from the global generator, the stream the run seeds and every
    checkpoint saves, so a resumed run draws the same masks as an uninterrupted one."""

    def __init__(self, survival: float):
        super().__init__()
        self.survival = survival

    def forward(self, branch: nn.Module, x: torch.Tensor, skip: torch.Tensor | None) -> torch.Tensor:
        if not self.training:
            return self.survival * branch(x)
        if torch.rand(()) < self.survival:  # one Bernoulli(survival) per unit and mini-batch
            return branch(x)
        return torch.zeros_like(skip)  # (N, C_out, H/s, W/s), the shape the branch would have had

    def extra_repr(self) -> str:
        return f"survival={self.survival:.4f}"


class ResidualUnit(nn.Module):
    """y = combine(x, project(x), F(x)); x_next = post(y)   (He 2016b eq. 1-2).

    `drop` runs the branch: every time (`WholeBranch`) or with stochastic depth."""

    def __init__(self, shared_pre: nn.Module, skip: nn.Module, branch: nn.Module, combine: nn.Module,
                 post: nn.Module, in_channels: int, out_channels: int, stride: int, drop: nn.Module | None = None):
        super().__init__()
        self.shared_pre = shared_pre
        self.skip = skip
        self.branch = branch
        self.combine = combine
        self.post = post
        self.drop = drop if drop is not None else WholeBranch()
        self.in_channels, self.out_channels, self.stride = in_channels, out_channels, stride

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.shared_pre(x)  # pre-activation shared by both paths (first unit, shape change)
        skip = self.skip(x) if getattr(self.combine, "uses_skip", True) else None
        fx = self.drop(self.branch, x, skip)  # (N, C_out, H/s, W/s)
        y = self.combine(x, skip, fx)
        return self.post(y)


def make_unit(block: str, cin: int, width: int, stride: int, ordering: str, *, shortcut: dict,
              downsample: str, pre_at: str, bottleneck_stride: str, norm: str = "batch", dropout: float = 0.0,
              survival: float = 1.0) -> ResidualUnit:
    """Build one unit from explicit arguments (never the spec object).

    `pre_at` says where the ordering's pre-activation goes (He 2016b, authors' code):
    - "branch": inside the branch, the shortcut stays clean (every ordinary unit);
    - "shared": once *before* the split, so a projection reads the activated input (the first unit of
      a CIFAR net, right after the stem conv, and every unit that changes shape;
      `resnet-pre-act.lua` in KaimingHe/resnet-1k-layers);
    - "none": no pre-activation at all (the first unit of an ImageNet net, whose stem already ends in
      BN-ReLU-max-pool: fb.resnet.torch `preresnet.lua`, its "no_preact" unit).
    `norm` fills the BN slots (`norm_layer`), `dropout` sits between the convs (WRN) and
    `survival` < 1 is stochastic depth's probability of running the branch (Huang et al. 2016).
    """
    if pre_at not in ("branch", "shared", "none"):
        raise ValueError(f"pre_at must be branch, shared or none, got {pre_at!r}")
    order = ORDERINGS[ordering]
    cout = width * (4 if block == "bottleneck" else 1)
    shared = pre_at == "shared" and bool(order.pre)
    inside = pre_at == "branch"
    if block == "bottleneck":
        branch = bottleneck_branch(cin, width, stride, order, inside, bottleneck_stride, norm, dropout)
    else:
        branch = basic_branch(cin, width, stride, order, inside, norm, dropout)
    combine = combiner_for(shortcut, cin, cout, stride)
    if not getattr(combine, "uses_skip", True):
        skip: nn.Module = nn.Identity()  # a plain net has no shortcut parameters at all
    else:
        skip = make_skip(downsample, cin, cout, stride, with_bn=shortcut["bn"] and not order.pre and norm == "batch",
                         always_project=getattr(combine, "always_project", False))
    return ResidualUnit(
        shared_pre=act(order.pre, cin, norm) if shared else nn.Identity(),
        skip=skip, branch=branch, combine=combine,
        post=act(order.post, cout, norm) if after_addition(shortcut) == "ordering" else nn.Identity(),
        in_channels=cin, out_channels=cout, stride=stride,
        drop=StochasticDepth(survival) if survival < 1 else None,
    )
