"""What sits on the shortcut (He 2016b Table 1) and how shapes are matched (He 2016a options A/B/C).

A unit computes `skip = project(x)` (identity, zero-padding or a 1x1 projection) and then lets a
registered *combiner* join skip and branch: `y = combine(x, skip, fx)`. Each row of He 2016b
Table 1 is one combiner plus its parameters. Each combiner builds itself from the shortcut section's
settings (`from_spec`), reading the fields its row in spec/shortcut_kinds.py names; a new shortcut
design is that row plus one class registered here under the same name.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from ..spec.registry import Registry


class Combiner(nn.Module):
    """y = combine(x, skip, fx). What a unit asks of its combiner: `from_spec` (build from the
    `model.shortcut` settings, a dict of ShortcutSpec's fields), `uses_skip` (False: the unit
    computes no skip at all), `always_project` (True: the skip is a 1x1 projection on every unit)."""

    uses_skip = True
    always_project = False

    @classmethod
    def from_spec(cls, shortcut: dict, in_channels: int, out_channels: int, stride: int) -> Combiner:
        return cls()  # a combiner with no settings


COMBINERS: Registry[type[Combiner]] = Registry("shortcut")


# ------------------------------------------------------------------------------------------
# Matching shapes: option A, B, C (He 2016a sec. 3.3)


class ZeroPadSkip(nn.Module):
    """Option A: identity with stride-2 subsampling and zero-padded extra channels (no parameters)."""

    def __init__(self, in_channels: int, out_channels: int, stride: int):
        super().__init__()
        self.extra = out_channels - in_channels
        self.stride = stride

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.stride > 1:
            x = x[:, :, :: self.stride, :: self.stride]  # (N, C, H/s, W/s)
        if self.extra:
            x = F.pad(x, (0, 0, 0, 0, 0, self.extra))  # (N, C + extra, H/s, W/s)
        return x


def projection(in_channels: int, out_channels: int, stride: int, with_bn: bool) -> nn.Module:
    """Options B/C: a 1x1 projection W_s. He 2016a follows it with BN; the pre-activation code of
    He 2016b does not (its input is already batch-normalised by the shared pre-activation)."""
    conv = nn.Conv2d(in_channels, out_channels, 1, stride=stride, bias=False)
    return nn.Sequential(conv, nn.BatchNorm2d(out_channels)) if with_bn else conv


def make_skip(option: str, in_channels: int, out_channels: int, stride: int, with_bn: bool,
              always_project: bool) -> nn.Module:
    changes = stride != 1 or in_channels != out_channels
    if always_project or option == "C" or (option == "B" and changes):
        return projection(in_channels, out_channels, stride, with_bn)
    if changes:  # option A, or option B where nothing changes falls through to identity
        return ZeroPadSkip(in_channels, out_channels, stride)
    return nn.Identity()


# ------------------------------------------------------------------------------------------
# Gates g(x) = sigmoid(W_g x + b_g)


class ConvGate(nn.Module):
    """He 2016b: a 1x1 conv gate, one value per position and channel."""

    def __init__(self, in_channels: int, out_channels: int, stride: int, bias: float):
        super().__init__()
        self.conv = nn.Conv2d(in_channels, out_channels, 1, stride=stride, bias=True)
        self.b_g = bias
        nn.init.constant_(self.conv.bias, bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.sigmoid(self.conv(x))  # (N, C_out, H/s, W/s)

    def own_init(self, scheme: str, mode: str, done: tuple[type[nn.Module], ...]) -> None:
        """The hook a net's init calls after its pass over the layers (`done`: the layer types that
        pass initialised, with fan `mode`): the weight as the pass drew it (He 2016b appendix: all
        weights as in He et al. 2015), the bias back to b_g, which decides whether gating trains."""
        nn.init.constant_(self.conv.bias, self.b_g)


class ChannelGate(nn.Module):
    """A lighter design: one gate per channel from the globally pooled input."""

    def __init__(self, in_channels: int, out_channels: int, stride: int, bias: float):
        super().__init__()
        self.fc = nn.Linear(in_channels, out_channels)
        self.b_g = bias
        nn.init.constant_(self.fc.bias, bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        pooled = x.mean(dim=(2, 3))  # (N, C_in)
        return torch.sigmoid(self.fc(pooled))[:, :, None, None]  # (N, C_out, 1, 1)

    def own_init(self, scheme: str, mode: str, done: tuple[type[nn.Module], ...]) -> None:
        """As ConvGate's. The linear map is a 1x1 conv on the pooled input, so where the pass
        initialised convs only (the conv nets' he_init), it takes their He init here."""
        if scheme == "he" and not isinstance(self.fc, done):
            nn.init.kaiming_normal_(self.fc.weight, mode=mode, nonlinearity="relu")
        nn.init.constant_(self.fc.bias, self.b_g)


def init_own(model: nn.Module, scheme: str, mode: str, done: tuple[type[nn.Module], ...]) -> None:
    """After a net's init pass: every module with its own rule (`own_init`, as timm's blocks have
    `zero_init_last`) applies it, in module order."""
    for m in model.modules():
        hook = getattr(m, "own_init", None)
        if callable(hook):
            hook(scheme, mode, done)


GATES = {"conv": ConvGate, "channel": ChannelGate}


# ------------------------------------------------------------------------------------------
# Combiners: y = s_h * skip + s_F * fx. Constructor arguments are explicit; `from_spec` reads the
# fields the kind's row names (spec/shortcut_kinds.py) and passes them on.


@COMBINERS.register("identity")
class IdentityShortcut(Combiner):
    """He 2016a eq. 1: y = x + F(x). The clean highway of He 2016b."""

    def forward(self, x, skip, fx):
        return skip + fx


@COMBINERS.register("none")
class NoShortcut(Combiner):
    """A plain net: the same layers with nothing on the shortcut (He 2016a Fig. 6, left)."""

    uses_skip = False

    def forward(self, x, skip, fx):
        return fx


@COMBINERS.register("scale")
class ScaledShortcut(Combiner):
    """He 2016b Table 1 'constant scaling': y = lambda * x + s_F * F(x).
    Over L units the direct gradient term becomes lambda^L (0.5^54 ~ 5.6e-17 in ResNet-110)."""

    def __init__(self, shortcut_scale: float, branch_scale: float):
        super().__init__()
        self.shortcut_scale = shortcut_scale
        self.branch_scale = branch_scale

    @classmethod
    def from_spec(cls, shortcut: dict, in_channels: int, out_channels: int, stride: int) -> Combiner:
        return cls(shortcut["shortcut_scale"], shortcut["branch_scale"])

    def forward(self, x, skip, fx):
        return self.shortcut_scale * skip + self.branch_scale * fx

    def extra_repr(self) -> str:
        return f"shortcut_scale={self.shortcut_scale}, branch_scale={self.branch_scale}"


class Gated(Combiner):
    """A combiner with a learned gate g(x) at `.gate` (training/gates.py reads its mean)."""

    def __init__(self, gate: nn.Module):
        super().__init__()
        self.gate = gate

    @classmethod
    def from_spec(cls, shortcut: dict, in_channels: int, out_channels: int, stride: int) -> Combiner:
        return cls(GATES[shortcut["gate"]](in_channels, out_channels, stride, shortcut["gate_bias"]))


@COMBINERS.register("exclusive_gate")
class ExclusiveGate(Gated):
    """He 2016b Table 1 'exclusive gating': y = (1 - g(x)) * x + g(x) * F(x)."""

    def forward(self, x, skip, fx):
        g = self.gate(x)
        return (1 - g) * skip + g * fx


@COMBINERS.register("highway")
class HighwayGate(ExclusiveGate):
    """Srivastava et al. 2015: y = T(x) H(x) + (1 - T(x)) x. The same form as exclusive gating
    (He 2016b sec. 3.1 says so); registered under its own name so studies can label rows with the
    literature's name and vary gate design (`shortcut.gate`) and carry bias (`shortcut.gate_bias`)."""


@COMBINERS.register("shortcut_gate")
class ShortcutOnlyGate(Gated):
    """He 2016b Table 1 'shortcut-only gating': y = (1 - g(x)) * x + F(x)."""

    def forward(self, x, skip, fx):
        return (1 - self.gate(x)) * skip + fx


@COMBINERS.register("conv1x1")
class ConvShortcut(Combiner):
    """He 2016b Table 1 '1x1 conv shortcut': a projection on every unit (the skip is projected)."""

    always_project = True

    def forward(self, x, skip, fx):
        return skip + fx


@COMBINERS.register("dropout")
class DropoutShortcut(Combiner):
    """He 2016b Table 1 'dropout shortcut': y = m * x + F(x) with m ~ Bernoulli(1 - p) per element.

    The paper's reading (sec. 3.1: it "imposes a scale of lambda with an expectation of 0.5", i.e.
    like constant scaling by 0.5): no 1/(1-p) rescaling in training, and x * (1-p) at test time as
    in the original dropout. `rescale=True` is inverted dropout instead (nn.Dropout: x / (1-p) in
    training, x at test time; expectation x)."""

    def __init__(self, p: float, rescale: bool):
        super().__init__()
        self.p, self.rescale = p, rescale

    @classmethod
    def from_spec(cls, shortcut: dict, in_channels: int, out_channels: int, stride: int) -> Combiner:
        return cls(shortcut["dropout"], shortcut["dropout_rescale"])

    def forward(self, x, skip, fx):
        keep = 1.0 - self.p
        if self.rescale:
            return F.dropout(skip, self.p, self.training) + fx
        if not self.training:
            return keep * skip + fx
        mask = torch.bernoulli(torch.full_like(skip, keep))  # the global generator, as nn.Dropout
        return mask * skip + fx

    def extra_repr(self) -> str:
        return f"p={self.p}, rescale={self.rescale}"


@COMBINERS.register("rezero")
class ReZero(Combiner):
    """Bachlechner et al. 2020: y = x + alpha * F(x) with one learned scalar alpha per unit, starting
    at 0, so every unit starts as the identity and deep stacks train without normalisation. The
    combiner is the sum alone; what follows it (nothing for ReZero, the original unit's ReLU for
    SkipInit) is the unit's, chosen by `model.shortcut.after_addition`."""

    def __init__(self):
        super().__init__()
        self.alpha = nn.Parameter(torch.zeros(()))

    def forward(self, x, skip, fx):
        return skip + self.alpha * fx


@COMBINERS.register("skipinit")
class SkipInit(ReZero):
    """De and Smith 2020 (SkipInit): a learned scalar alpha at the end of each residual branch,
    initialised at 0, in a net whose normalisation is removed. The same sum as ReZero (both papers
    appeared in 2020, independently), but the unit keeps its ReLU after the addition
    (`after_addition: auto` resolves to the ordering's), so the two nets differ once a branch adds
    negative values."""


def combiner_for(shortcut: dict, in_channels: int, out_channels: int, stride: int) -> Combiner:
    """The combiner registered under `shortcut["kind"]`, built from a shortcut section's settings
    (a dict of ShortcutSpec's fields)."""
    return COMBINERS[shortcut["kind"]].from_spec(shortcut, in_channels, out_channels, stride)
