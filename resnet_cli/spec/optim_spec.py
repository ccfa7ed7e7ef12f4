"""The optimizer section of a spec: SGD (the papers') or AdamW, the lr schedule, and the recipe
fields later papers add (per-group learning rates, mixup)."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import Field, model_validator

from .section import _Section

# What an lr group can select. scalars: every parameter of one element (Fixup's scalar biases and
# multipliers, SkipInit's and ReZero's alpha); biases: every parameter named `bias` (a conv's, the
# classifier's, BN's beta), the name rule of Fixup's code (cifar_train.py: 'bias' in the name).
SELECTORS = ("scalars", "biases")


class LrGroup(_Section):
    select: list[Literal[SELECTORS]] = Field(min_length=1)
    lr_scale: Annotated[float, Field(gt=0.0)]


class OptimSpec(_Section):
    """The papers' CIFAR recipe by default (He 2016a sec. 4.2, He 2016b sec. 4)."""

    optimizer: Literal["sgd", "adamw"] = "sgd"  # adamw: Transformers' usual (betas 0.9/0.999; no momentum)
    lr: Annotated[float, Field(gt=0.0)] = 0.1
    momentum: Annotated[float, Field(ge=0.0, lt=1.0)] = 0.9
    nesterov: bool = False
    weight_decay: Annotated[float, Field(ge=0.0)] = 1e-4
    batch_size: Annotated[int, Field(ge=2)] = 128
    # Length: exactly one of iters and epochs. 64k iterations is ~164 epochs of 50k images.
    iters: Annotated[int, Field(ge=1)] | None = 64000
    epochs: Annotated[int, Field(ge=1)] | None = None
    # Steps of the lr, in the unit of the length (iterations or epochs). None: at 50% and 75% of
    # the run, the papers' 32k and 48k of 64k.
    milestones: list[Annotated[int, Field(ge=0)]] | None = None
    gamma: Annotated[float, Field(gt=0.0, le=1.0)] = 0.1
    # lr `warmup_lr` for the first `warmup_iters` iterations, then back to lr. auto: the papers'
    # rule for the net (layouts.resolve_warmup): 400 for CIFAR nets from He 2016b and for He
    # 2016a's ResNet-110 and deeper, 0 for shallower original nets and for ImageNet.
    warmup_iters: Annotated[int, Field(ge=0)] | Literal["auto"] = "auto"
    warmup_lr: Annotated[float, Field(gt=0.0)] = 0.01
    # step: the papers' milestones. cosine: lr/2 (1 + cos(pi t/T)) after the warm-up (Loshchilov 2017).
    schedule: Literal["step", "cosine"] = "step"
    # Szegedy et al. 2016: targets (1 - eps) one-hot + eps / classes; 0: the papers' plain loss.
    label_smoothing: Annotated[float, Field(ge=0.0, lt=1.0)] = 0.0
    # Parameters that train at their own multiple of the scheduled lr (the schedule, warm-up and
    # steps apply to every group alike). Fixup's CIFAR code trains its scalar biases and multipliers
    # (and every parameter named bias) at lr/10: [{select: [scalars, biases], lr_scale: 0.1}].
    # A parameter goes to the first group that selects it; the rest train at lr. []: one group.
    lr_groups: list[LrGroup] = []
    # mixup (Zhang et al. 2018): each training batch becomes lam x + (1 - lam) x[perm], lam ~
    # Beta(alpha, alpha), trained on the same mixture of the two targets' losses. 0: off, as in the
    # ResNet papers; Fixup's CIFAR recipe uses alpha 1.
    mixup: Annotated[float, Field(ge=0.0)] = 0.0

    @model_validator(mode="before")
    @classmethod
    def _epochs_replace_default_iters(cls, raw: Any) -> Any:
        # Giving `epochs` alone means "this long in epochs": it replaces the default 64k iterations.
        if isinstance(raw, dict) and raw.get("epochs") is not None and "iters" not in raw:
            raw = {**raw, "iters": None}
        return raw

    @model_validator(mode="after")
    def _one_length(self) -> OptimSpec:
        check_length(self)
        return self


def check_length(optim) -> None:
    """optim: exactly one length, milestones strictly increasing and inside it, and milestones only
    where the schedule steps (cosine has none: its lr is a function of the iteration alone)."""
    if (optim.iters is None) == (optim.epochs is None):
        raise ValueError("set exactly one of optim.iters and optim.epochs (the other to null)")
    if optim.milestones is None:
        return
    if optim.schedule != "step" and optim.milestones:  # [] (no steps) is what cosine means anyway
        raise ValueError(f"optim.milestones {optim.milestones} step the lr of optim.schedule: step only; "
                         f"set them to null for optim.schedule: {optim.schedule}")
    length = optim.iters if optim.iters is not None else optim.epochs
    if sorted(optim.milestones) != optim.milestones or len(set(optim.milestones)) != len(optim.milestones):
        raise ValueError(f"optim.milestones must be strictly increasing, got {optim.milestones}")
    if optim.milestones and optim.milestones[-1] >= length:
        unit = "iters" if optim.iters is not None else "epochs"
        raise ValueError(f"optim.milestones {optim.milestones} must be below optim.{unit} = {length}")
