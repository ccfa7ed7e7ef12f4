"""Whole conv nets: stem, stages of residual units, head (the `ResNet` every family builds)."""

from __future__ import annotations

import contextlib
import functools

import torch
from torch import nn
from torch.utils.checkpoint import checkpoint

from ..spec import ModelSpec, units_per_stage
from ..spec.families import FAMILIES
from .initialisation import fixup_init, he_init, zero_init_last
from .units import ORDERINGS, ResidualUnit, ScalarBias, act, make_unit


class ResNet(nn.Module):
    """stem -> units (flat list; stage boundaries recorded) -> final activation -> pool -> fc.

    Every family is this shape (model/vit.py builds its token nets as one), so the analyses find
    the residual units of any net in `.units` and the head's input at `head_act`."""

    def __init__(self, stem: nn.Module, units: list[ResidualUnit], head_act: nn.Module, num_classes: int,
                 pool: nn.Module | None = None):
        super().__init__()
        self.stem = stem
        self.units = nn.ModuleList(units)
        self.head_act = head_act
        self.pool = pool if pool is not None else nn.AdaptiveAvgPool2d(1)  # global average pool
        self.fc = nn.Linear(units[-1].out_channels if units else _stem_channels(stem), num_classes)
        self.checkpoint_segments = 0

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.stem(x)  # (N, C0, H', W')
        if self.checkpoint_segments and self.training and torch.is_grad_enabled():
            x = self._checkpointed(x)
        else:
            for unit in self.units:
                x = unit(x)
        return self.head(x)

    def head(self, x: torch.Tensor) -> torch.Tensor:
        """The last unit's output to logits; analyses that run the units themselves end here."""
        x = self.head_act(x)
        x = self.pool(x).flatten(1)  # (N, C_last)
        return self.fc(x)  # (N, classes)

    def _checkpointed(self, x: torch.Tensor) -> torch.Tensor:
        """Recompute activations segment by segment in the backward pass (Chen et al. 2016).

        The recomputation runs the units in training mode a second time; BatchNorm would update
        its running statistics twice. `_frozen_bn_stats` makes the second pass leave them alone,
        so a checkpointed run matches an ordinary one up to rounding."""
        groups = _split(list(self.units), self.checkpoint_segments)
        for group in groups:
            seg = nn.Sequential(*group)
            # A partial of a module-level function, not a lambda made here: torch.compile (Dynamo)
            # refuses a function object created inside the traced forward as `context_fn`.
            x = checkpoint(seg, x, use_reentrant=False, context_fn=functools.partial(_recompute_contexts, seg))
        return x


def _recompute_contexts(seg: nn.Module):
    """`checkpoint`'s context_fn: nothing around the first pass, frozen BN statistics around the recomputation."""
    return contextlib.nullcontext(), _frozen_bn_stats(seg)


def _split(items: list, k: int) -> list[list]:
    k = max(1, min(k, len(items)))
    size, rest = divmod(len(items), k)
    out, i = [], 0
    for j in range(k):
        n = size + (1 if j < rest else 0)
        out.append(items[i:i + n])
        i += n
    return [g for g in out if g]


@contextlib.contextmanager
def _frozen_bn_stats(module: nn.Module):
    bns = [m for m in module.modules() if isinstance(m, nn.modules.batchnorm._BatchNorm)]
    saved = [(m.momentum, m.num_batches_tracked.clone() if m.num_batches_tracked is not None else None)
             for m in bns]
    for m in bns:
        m.momentum = 0.0  # running = (1 - 0) * running + 0 * batch: unchanged
    try:
        yield
    finally:
        for m, (mom, nbt) in zip(bns, saved):
            m.momentum = mom
            if nbt is not None:
                m.num_batches_tracked.copy_(nbt)


def _stem_channels(stem: nn.Module) -> int:
    return [m for m in stem.modules() if isinstance(m, nn.Conv2d)][0].out_channels


def make_stem(stem: str, in_channels: int, width: int, pre: str, norm: str = "batch") -> nn.Module:
    """The family's stem (spec/families.py). 3x3 (CIFAR and digits): conv [BN] [ReLU], leaving out the part of BN-ReLU that the first unit's
    pre-activation supplies (He 2016b: in pre-activation nets the first unit applies BN-ReLU right
    after the stem conv, before its split). 7x7_maxpool (ImageNet): 7x7/2 conv-BN-ReLU, 3x3/2 max-pool for every
    ordering (He 2016a Table 1; fb.resnet.torch `preresnet.lua` keeps it for pre-activation nets and
    gives the first unit no pre-activation of its own)."""
    if stem == "7x7_maxpool":
        return nn.Sequential(nn.Conv2d(in_channels, width, 7, stride=2, padding=3, bias=False),
                             act("bn_relu", width, norm), nn.MaxPool2d(3, stride=2, padding=1))
    stem_act = {"": "bn_relu", "relu": "bn", "bn_relu": ""}[pre]
    return nn.Sequential(nn.Conv2d(in_channels, width, 3, padding=1, bias=False), act(stem_act, width, norm))


def build_conv_net(m: ModelSpec, in_channels: int, num_classes: int) -> ResNet:
    """The conv families' nets from a ModelSpec (through `build.build_model`); every block takes
    explicit arguments."""
    block = m.block
    order = ORDERINGS[m.unit]
    widths = list(m.widths)
    family = FAMILIES[m.family]
    stem_width = family.stem_width or widths[0]  # WRN: a 16-channel stem before stages of 16k (Zagoruyko 2016)
    stem_kind = family.stem
    stem = make_stem(stem_kind, in_channels, stem_width, order.pre, m.norm)
    n_total = sum(units_per_stage(m))
    shortcut = m.shortcut.model_dump()
    units: list[ResidualUnit] = []
    cin = stem_width
    for stage, (n_units, width) in enumerate(zip(units_per_stage(m), widths)):
        for i in range(n_units):
            stride = 2 if (stage > 0 and i == 0) else 1
            changes = stride != 1 or cin != width * (4 if block == "bottleneck" else 1)
            if not units:
                pre_at = "none" if stem_kind == "7x7_maxpool" else "shared"  # that stem ends in BN-ReLU
            else:
                pre_at = "shared" if changes else "branch"
            # Huang et al. 2016 eq. 4: p_l = 1 - (l / L)(1 - p_L) for unit l = 1..L.
            survival = 1.0 - (len(units) + 1) / n_total * (1.0 - m.stochastic_depth)
            unit = make_unit(block, cin, width, stride, m.unit, shortcut=shortcut,
                             downsample=m.downsample, pre_at=pre_at, bottleneck_stride=m.bottleneck_stride,
                             norm=m.norm, dropout=m.dropout, survival=survival)
            units.append(unit)
            cin = unit.out_channels
    # Pre-activation nets end with one more BN-ReLU before pooling (He 2016b, authors' code):
    # the last unit's sum is otherwise never normalised. Generally: the unit's pre-activation once more.
    head_act = act(order.pre, cin, m.norm)
    if m.norm == "fixup":  # Fixup's scalar bias before the classifier (bias2 in the authors' code)
        head_act = nn.Sequential(head_act, ScalarBias())
    model = ResNet(stem, units, head_act, num_classes)
    if m.init == "he":
        he_init(model)
    # torch_default: each layer keeps the init PyTorch gave it when it was built, drawn in build order
    # (stem conv, each unit's convs, fc weight and bias) from the global generator.
    if m.norm == "fixup":
        fixup_init(model)
    if m.zero_init_last_bn:
        zero_init_last(model, m.unit, m.norm)
    return model
