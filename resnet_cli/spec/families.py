"""The net families (`model.family`), as data: default widths, stem, and which builder makes them.

The depth rules of each family (units per stage, block kind, shortcut option) are in layouts.py
and vit_layout.py; this table holds what the model builder and the resolution ask of a family.
"""

from __future__ import annotations

from dataclasses import dataclass

from .registry import Registry
from .vit_layout import DEFAULT_VIT_WIDTH


@dataclass(frozen=True)
class Family:
    widths: tuple[int, ...]  # `model.widths: null`: each stage's base width
    # cifar: a 3x3 conv (He 2016a sec. 4.2). imagenet: 7x7/2 conv-BN-ReLU + 3x3/2 max-pool (He 2016a
    # Table 1), which already ends in BN-ReLU, so the first unit gets no pre-activation of its own
    # (fb.resnet.torch preresnet.lua). patches: a ViT's patch embedding.
    stem: str
    net: str  # "conv" (model/nets.py) or "tokens" (model/vit.py)
    stem_width: int | None = None  # the stem conv's width when it is not the first stage's
    unit: str | None = None  # the ordering a spec that names none gets (None: the schema's default)
    widen: bool = False  # widths are the base widths times `model.widen` (WRN-d-k's k)


FAMILIES: Registry[Family] = Registry("model family")
FAMILIES.register("cifar")(Family(widths=(16, 32, 64), stem="3x3", net="conv"))  # He 2016a sec. 4.2
FAMILIES.register("imagenet")(Family(widths=(64, 128, 256, 512), stem="7x7_maxpool", net="conv"))  # Table 1
# The "Residual Connection" article's digits nets: one stage of 16 on 8x8 images.
FAMILIES.register("digits")(Family(widths=(16,), stem="3x3", net="conv"))
# Wide residual nets, WRN-d-k (Zagoruyko and Komodakis 2016, Table 1): a 3x3 conv to 16 channels,
# three stages of 16k, 32k, 64k, (d - 4) / 6 full pre-activation units each, a projection where the
# width changes (the authors' wide-residual-networks code: a 1x1 conv when in and out differ).
FAMILIES.register("wrn")(Family(widths=(16, 32, 64), stem="3x3", net="conv", stem_width=16, unit="full_preact",
                                widen=True))
FAMILIES.register("vit")(Family(widths=(DEFAULT_VIT_WIDTH,), stem="patches", net="tokens"))  # docs/vit.md


def family_widths(family: str, widen: int | None) -> list[int]:
    """`model.widths: null`: the family's base widths, times the widening factor where it has one."""
    base = list(FAMILIES[family].widths)
    return [w * widen for w in base] if FAMILIES[family].widen else base


def unit_from_family(tree: dict) -> None:
    """A spec tree naming a family with an ordering of its own (wrn: full pre-activation) and no
    `model.unit` gets that ordering, before validation (as `--dataset imagenet` picks its family)."""
    model = tree.get("model")
    if isinstance(model, dict) and isinstance(model.get("family"), str) and "unit" not in model:
        if model["family"] in FAMILIES and FAMILIES[model["family"]].unit is not None:
            model["unit"] = FAMILIES[model["family"]].unit
