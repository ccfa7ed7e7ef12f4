"""Where BN and ReLU sit in a residual unit (He 2016b Table 2): the five orderings, as data.

Kept apart from model/units.py (which builds them with torch) so the spec can check an ordering's
rules, such as which parameter zero-init may zero, without importing torch.
"""

from __future__ import annotations

from dataclasses import dataclass

from .registry import Registry


@dataclass(frozen=True)
class Ordering:
    pre: str  # before the first conv: "", "relu", "bn_relu"
    end: str  # after the last conv, inside the branch: "", "bn", "bn_relu"
    post: str  # after the addition: "", "relu", "bn_relu"

    @property
    def branch_ends_in(self) -> str:
        """The branch's last op before the addition: 'conv', 'bn' or 'relu'."""
        return self.end.rsplit("_", 1)[-1] if self.end else "conv"

    @property
    def zero_init(self) -> str | None:
        """What `model.zero_init_last_bn` zeroes so F(x) = 0 at the start and still has a gradient:
        the branch's last op, if it is linear in its weight. A last BN: its gamma (Goyal et al. 2017).
        A last conv: its weight (timm's pre-activation blocks, `zero_init_last`). A last ReLU: None,
        nothing can (ReLU's output is 0 only where its gradient is 0 too)."""
        return {"bn": "bn", "conv": "conv"}.get(self.branch_ends_in)


ORDERINGS: Registry[Ordering] = Registry("unit ordering")
ORDERINGS.register("original")(Ordering(pre="", end="bn", post="relu"))  # (a) He 2016a
ORDERINGS.register("bn_after_add")(Ordering(pre="", end="", post="bn_relu"))  # (b)
ORDERINGS.register("relu_before_add")(Ordering(pre="", end="bn_relu", post=""))  # (c)
ORDERINGS.register("relu_preact")(Ordering(pre="relu", end="bn", post=""))  # (d)
ORDERINGS.register("full_preact")(Ordering(pre="bn_relu", end="", post=""))  # (e) He 2016b

UNITS = ORDERINGS.names()  # He 2016b Table 2, in its order


def check_zero_init(model) -> None:
    """Refuse zero-init for an ordering whose branch no zeroed parameter can start at 0 and train."""
    if not model.zero_init_last_bn or model.unit not in ORDERINGS:
        return
    if ORDERINGS[model.unit].zero_init is None:
        valid = ", ".join(n for n in UNITS if ORDERINGS[n].zero_init)
        raise ValueError(
            f"model.zero_init_last_bn: true cannot train with model.unit {model.unit}: its branch ends in "
            f"ReLU, whose gradient is 0 wherever its output is 0, so no zeroed parameter leaves the branch "
            f"trainable; valid orderings for zero-init: {valid}")
