"""What can sit on a unit's shortcut (He 2016b Table 1 and its neighbours), as data.

One row per `model.shortcut.kind`: which `model.shortcut` fields it reads, the one a gradient-norm
variant's `:value` sets, and the two decisions other code makes about a kind (is the net plain, does
the unit carry a gate). model/shortcuts.py registers one combiner class under each name and builds
it from exactly these fields; kept apart from it, like orderings.py, so the spec, the help and the
variant tables know the kinds without importing torch.

A new kind is one row here plus one registered class in model/shortcuts.py.
"""

from __future__ import annotations

from dataclasses import dataclass

from .registry import Registry

GATE_FIELDS = ("gate", "gate_bias")  # every gated kind: the gate's design and its bias b_g


@dataclass(frozen=True)
class ShortcutKind:
    about: str  # what it computes, and whose it is
    fields: tuple[str, ...] = ()  # the model.shortcut fields its combiner reads (besides `bn`)
    value: str | None = None  # the field `resnet gradnorm --variant kind:value` sets
    plain: bool = False  # nothing on the shortcut: the same layers as a plain net (He 2016a Fig. 3)
    gated: bool = False  # y mixes skip and branch through a learned gate g(x) (training/gates.py reads it)
    # What its paper puts after the addition (`model.shortcut.after_addition: auto`): the unit
    # ordering's, or nothing.
    after_addition: str = "ordering"


SHORTCUT_KINDS: Registry[ShortcutKind] = Registry("shortcut kind")
_add = SHORTCUT_KINDS.register
_add("identity")(ShortcutKind("y = x + F(x) (He 2016a eq. 1)"))
_add("none")(ShortcutKind("y = F(x): a plain net (He 2016a Fig. 6 left)", plain=True))
_add("scale")(ShortcutKind("y = lambda x + s_F F(x): constant scaling (He 2016b Table 1)",
                           fields=("shortcut_scale", "branch_scale"), value="shortcut_scale"))
_add("exclusive_gate")(ShortcutKind("y = (1 - g) x + g F(x): exclusive gating (He 2016b Table 1)",
                                    fields=GATE_FIELDS, value="gate_bias", gated=True))
_add("shortcut_gate")(ShortcutKind("y = (1 - g) x + F(x): shortcut-only gating (He 2016b Table 1)",
                                   fields=GATE_FIELDS, value="gate_bias", gated=True))
_add("conv1x1")(ShortcutKind("y = W_s x + F(x): a 1x1 projection on every unit (He 2016b Table 1)"))
_add("dropout")(ShortcutKind("y = m x + F(x), m ~ Bernoulli(1 - p): dropout shortcut (He 2016b Table 1)",
                             fields=("dropout", "dropout_rescale"), value="dropout"))
_add("highway")(ShortcutKind("y = T H(x) + (1 - T) x: highway units (Srivastava et al. 2015)",
                             fields=GATE_FIELDS, value="gate_bias", gated=True))
# ReZero's unit is x_{i+1} = x_i + alpha_i F(x_i), nothing after the sum (Bachlechner et al. 2020,
# eq. 4); SkipInit (De and Smith 2020) scales the branch alike but keeps the net's ReLU after it.
_add("rezero")(ShortcutKind("y = x + alpha F(x), alpha learned from 0, nothing after the addition (Bachlechner et al. 2020)",
                            after_addition="none"))
_add("skipinit")(ShortcutKind("y = x + alpha F(x), alpha learned from 0, the unit's ReLU after it (De and Smith 2020)"))


def after_addition(shortcut) -> str:
    """`model.shortcut.after_addition` resolved: `ordering` or `none` (a ShortcutSpec or its dict)."""
    get = shortcut.get if isinstance(shortcut, dict) else lambda key: getattr(shortcut, key)
    chosen = get("after_addition")
    return SHORTCUT_KINDS[get("kind")].after_addition if chosen in (None, "auto") else chosen


def is_plain(kind: str) -> bool:
    """A net with this shortcut kind is the plain twin of a residual net (He 2016a sec. 4.1)."""
    return SHORTCUT_KINDS[kind].plain
