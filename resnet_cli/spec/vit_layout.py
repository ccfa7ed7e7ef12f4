"""How a `model.family: vit` spec becomes a net: the orderings of its residual units, as data, and
the checks and defaults of its fields (Dosovitskiy et al. 2020, "An Image is Worth 16x16 Words").

A ViT is a residual net on a stream of tokens: a patch embedding, `depth` blocks of two residual
units each (multi-head self-attention, then an MLP), a head. Where LayerNorm sits in a unit is the
Transformer's version of He 2016b Table 2, one row of `TOKEN_ORDERINGS` each:

- `post_ln`: x <- LN(x + F(x)), the original Transformer (Vaswani et al. 2017): something after
  the addition, as in He 2016a's original unit;
- `pre_ln`: x <- x + F(LN(x)), nothing after the addition: He 2016b's full pre-activation carried
  over (Xiong et al. 2020; ViT). Its stream is never normalised, so a final LayerNorm follows the
  last unit, as in ViT;
- `no_ln`: x <- x + F(x), no normalisation at all: ReZero's setting (Bachlechner et al. 2020), with
  `model.shortcut.kind: rezero`.

Shared by the spec (names, checks, resolution) and model/vit.py (the modules); plain data, no torch.
"""

from __future__ import annotations

from dataclasses import dataclass

from .datasets import DATASETS
from .layouts import check_depth
from .registry import Registry

# DeiT-Ti's width (Touvron et al. 2021), the smallest of the published ViTs; heads have no default.
DEFAULT_VIT_WIDTH = 192
CONV_ONLY = ("block", "downsample")  # conv-family fields a vit spec must leave unset
VIT_ONLY = ("patch", "heads", "final_norm", "image_size")  # vit fields a conv spec must leave unset


@dataclass(frozen=True)
class TokenOrdering:
    norm_in_branch: bool  # a LayerNorm first inside each branch, the stream itself untouched
    norm_after_add: bool  # a LayerNorm on the sum x + F(x)
    final_norm: bool  # the default of model.final_norm: a LayerNorm after the last unit


TOKEN_ORDERINGS: Registry[TokenOrdering] = Registry("vit unit ordering")
TOKEN_ORDERINGS.register("post_ln")(TokenOrdering(norm_in_branch=False, norm_after_add=True, final_norm=False))
TOKEN_ORDERINGS.register("pre_ln")(TokenOrdering(norm_in_branch=True, norm_after_add=False, final_norm=True))
TOKEN_ORDERINGS.register("no_ln")(TokenOrdering(norm_in_branch=False, norm_after_add=False, final_norm=False))
VIT_UNITS = TOKEN_ORDERINGS.names()


def image_side(data) -> int:
    """The side of the square images the net sees (a DataSpec): the dataset's row, or the key it names
    (synthetic data and ImageNet folders set their own)."""
    return DATASETS[data.dataset].value("side", data)


def _divisors(n: int) -> str:
    return ", ".join(str(k) for k in range(1, n + 1) if n % k == 0)


def check_model(model, data, conv_units: tuple[str, ...]) -> None:
    """Raise ValueError (one line: what is wrong, what would be valid) for a model section that
    cannot be built for this data. Conv families: their ordering names and depth rules (layouts)."""
    if model.family != "vit":
        if model.unit not in conv_units:
            raise ValueError(f"model.unit '{model.unit}' is an ordering of the vit family; valid for "
                             f"{model.family}: {', '.join(conv_units)}")
        for key in VIT_ONLY:
            if getattr(model, key) is not None:
                raise ValueError(f"model.{key} applies to model.family vit only (this is {model.family}); remove it")
        if model.init == "trunc_normal":
            raise ValueError(f"model.init trunc_normal applies to model.family vit only; valid for "
                             f"{model.family}: he, torch_default")
        check_depth(model)
        return
    if model.unit not in VIT_UNITS:
        raise ValueError(f"model.unit '{model.unit}' is not an ordering of the vit family; valid: {', '.join(VIT_UNITS)}")
    for key in CONV_ONLY:
        if getattr(model, key) is not None:
            raise ValueError(f"model.{key} applies to the conv families (cifar, imagenet, digits), not vit; remove it")
    side = model.image_size or image_side(data)
    if model.patch is None:
        raise ValueError(f"model.family vit needs model.patch, the side of a square patch dividing the "
                         f"{side}-pixel images: one of {_divisors(side)}")
    if side % model.patch:
        raise ValueError(f"model.patch {model.patch} does not divide the {side}-pixel images of "
                         f"{data.dataset}; valid: {_divisors(side)}")
    widths = model.widths if model.widths is not None else [DEFAULT_VIT_WIDTH]
    if len(widths) != 1:
        raise ValueError(f"model.widths for vit is one width [d], the residual stream's, got {list(widths)}")
    d = widths[0]
    if model.heads is None:
        raise ValueError(f"model.family vit needs model.heads, the number of attention heads, dividing "
                         f"the width {d}: one of {_divisors(d)}")
    if d % model.heads:
        raise ValueError(f"model.widths [{d}] is not divisible by model.heads {model.heads}; valid heads: {_divisors(d)}")
    if round(d * model.mlp_ratio) < 1:
        raise ValueError(f"model.mlp_ratio {model.mlp_ratio} leaves the MLP of width {d} no hidden unit")


def resolve_vit(model, data) -> dict:
    """The vit fields' open defaults, for `spec.resolve`: the image side from the data, the final
    LayerNorm from the ordering. Nothing for conv families."""
    if model.family != "vit":
        return {}
    final = model.final_norm if model.final_norm is not None else TOKEN_ORDERINGS[model.unit].final_norm
    return {"image_size": model.image_size or image_side(data), "final_norm": final}


def mlp_width(d: int, ratio: float) -> int:
    """The MLP's hidden width: ratio x d, rounded (ViT: 4 x d, e.g. 3072 for d = 768)."""
    return round(d * ratio)
