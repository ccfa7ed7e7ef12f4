"""How a depth becomes a net: units per stage, block kind and the default shortcut option.

These rules take a model section (anything with `family`, `depth`, `block`, `downsample`) and are
shared by the spec's validation, its resolution and the model builder, so each papers' choice is
written once.
"""

from __future__ import annotations

# ImageNet nets: units per stage and block kind (He 2016a Table 1; 200 from He 2016b).
IMAGENET_LAYOUTS: dict[int, tuple[str, tuple[int, ...]]] = {
    18: ("basic", (2, 2, 2, 2)),
    34: ("basic", (3, 4, 6, 3)),
    50: ("bottleneck", (3, 4, 6, 3)),
    101: ("bottleneck", (3, 4, 23, 3)),
    152: ("bottleneck", (3, 8, 36, 3)),
    200: ("bottleneck", (3, 24, 36, 3)),
}
# CIFAR depths at which the papers used bottleneck units (He 2016b: ResNet-164 and ResNet-1001).
CIFAR_BOTTLENECK_DEPTHS = (164, 1001)


def _nearest(depth: int, base: int, step: int) -> str:
    below = max(base + step, depth - (depth - base) % step)
    above = below + step if below < depth else below
    near = sorted({below, above} - {depth})
    return " or ".join(str(d) for d in near)


def check_depth(model) -> None:
    """Raise ValueError naming the nearest valid depths when a depth cannot be built."""
    d = model.depth
    if model.family == "imagenet":
        if d not in IMAGENET_LAYOUTS:
            raise ValueError(f"model.depth {d} is not an ImageNet ResNet; valid: {', '.join(map(str, IMAGENET_LAYOUTS))}")
        return
    if model.family == "wrn":
        if d < 10 or (d - 4) % 6:
            raise ValueError(f"model.depth {d} is not 6n+4 for a wide residual net; nearest: {_nearest(d, 4, 6)}")
        if model.block not in (None, "basic"):
            raise ValueError("model.block: a wide residual net is made of basic units (Zagoruyko and Komodakis 2016)")
        return
    if model.family == "digits":
        if d < 4 or d % 2:
            raise ValueError(f"model.depth {d} is not 2n+2 with n >= 1 for the digits net; nearest: {_nearest(d, 2, 2)}")
        return
    block = resolve_block(model)
    if block == "basic" and (d < 8 or (d - 2) % 6):
        hint = " (or block: bottleneck)" if d >= 11 and (d - 2) % 9 == 0 else ""
        raise ValueError(f"model.depth {d} is not 6n+2 for basic CIFAR units; nearest: {_nearest(d, 2, 6)}{hint}")
    if block == "bottleneck" and (d < 11 or (d - 2) % 9):
        raise ValueError(f"model.depth {d} is not 9n+2 for bottleneck CIFAR units; nearest: {_nearest(d, 2, 9)}")


def resolve_block(model) -> str:
    """The papers' block for a depth when the spec leaves it open."""
    if model.block is not None:
        return model.block
    if model.family == "vit":  # no conv blocks: its units are attention and MLP (vit_layout.py)
        return None
    if model.family == "imagenet":
        return IMAGENET_LAYOUTS.get(model.depth, ("basic", ()))[0]
    if model.family in ("digits", "wrn"):
        return "basic"
    d = model.depth
    if d in CIFAR_BOTTLENECK_DEPTHS or ((d - 2) % 6 and not (d - 2) % 9):
        return "bottleneck"
    return "basic"


def units_per_stage(model) -> tuple[int, ...]:
    """Residual units in each stage: 6n+2 basic, 9n+2 bottleneck, 2n+2 digits, table for ImageNet."""
    if model.family == "imagenet":
        return IMAGENET_LAYOUTS[model.depth][1]
    if model.family == "digits":
        return ((model.depth - 2) // 2,)
    if model.family == "wrn":  # depth 6n+4: 6n convs in units, the stem, the fc and two projections
        return ((model.depth - 4) // 6,) * 3
    if model.family == "vit":  # one stage at one width: depth blocks of two units (attention, MLP)
        return (2 * model.depth,)
    per_unit = 3 if resolve_block(model) == "bottleneck" else 2
    return ((model.depth - 2) // (3 * per_unit),) * 3


def resolve_downsample(model) -> str:
    """The papers' shortcut option where shapes change, when the spec leaves it open.

    A for CIFAR nets of basic units (He 2016a sec. 4.2: zero-padding, no parameters; He 2016b keeps
    it for pre-activation ResNet-110); B for CIFAR bottleneck nets (He 2016b: 164 and 1001 project
    where shapes change, `resnet-pre-act.lua` in the authors' resnet-1k-layers code) and for
    ImageNet (He 2016a sec. 4.1). So `--depth 1001 --preact` is the authors' ResNet-1001."""
    if model.downsample is not None or model.family == "vit":  # a vit never changes shape
        return model.downsample
    if model.family in ("imagenet", "wrn") or resolve_block(model) == "bottleneck":
        return "B"
    return "A"


# He 2016a sec. 4.2 warms up only its 110- and 1202-layer CIFAR nets ("0.1 is slightly too large to
# start converging": lr 0.01 until training error is below 80%, about 400 iterations); He 2016b
# warms up every CIFAR run the same way. Neither paper warms up ImageNet nets.
WARMUP_ITERS = 400


def resolve_warmup(model, warmup_iters: int | str) -> int:
    """The papers' warm-up length for a net when the spec says `auto`: 400 iterations for CIFAR nets
    of He 2016b's units and for He 2016a's original unit from 110 layers on; none otherwise."""
    if warmup_iters != "auto":
        return int(warmup_iters)
    if model.family != "cifar" or (model.unit == "original" and model.depth < 110):
        return 0
    return WARMUP_ITERS


def check_norm(model) -> None:
    """The fields of the later answers (docs/normfree.md): `norm`, `widen`, `stochastic_depth`,
    `dropout`, each where it can be built."""
    if model.family == "vit" and (model.norm != "batch" or model.stochastic_depth < 1 or model.dropout):
        raise ValueError("model.norm, model.stochastic_depth and model.dropout apply to the conv families; a vit's "
                         "normalisation is its model.unit (no_ln: none)")
    if model.stochastic_depth < 1 and model.shortcut.kind == "none":
        raise ValueError("model.stochastic_depth drops residual branches; a plain net (model.shortcut.kind: none) "
                         "has no shortcut to carry the signal past a dropped one")
    wide = model.family == "wrn"
    if wide and model.widen is None:
        raise ValueError("model.family wrn needs model.widen, the widening factor k of WRN-d-k (e.g. 10 for WRN-28-10)")
    if not wide and model.widen is not None:
        raise ValueError(f"model.widen applies to model.family wrn only (this is {model.family}); remove it")
