"""Where to look inside a net: its weight layers in forward order, and the gradient at each unit's input.

Shared by the trainer's gradient-norm callback and the `gradnorm` experiments; it imports neither.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import nn

@dataclass(frozen=True)
class Layer:
    name: str  # module path, e.g. "units.3.branch.1"
    module: nn.Module
    index: int  # 1-based position along the main path (stem conv = 1 ... fc = depth)
    path: str  # "main" (stem, branch convs, fc) or "shortcut" (projections, gates)
    label: str  # short, for tables: "stem", "unit3.conv1", "unit3.skip", "unit3.gate", "fc"; ViT: "block2.mlp.fc1"


def weight_layers(model: nn.Module) -> list[Layer]:
    """Every Conv2d and Linear in forward order. Main-path layers are numbered 1..depth as the papers
    count depth; a projection or gate on a shortcut takes the index of the main-path layer before it."""
    out: list[Layer] = []
    index = 0
    convs_in_unit: dict[str, int] = {}
    names = unit_labels(model) if hasattr(model, "units") else []
    for name, module in model.named_modules():
        if not isinstance(module, (nn.Conv2d, nn.Linear)):
            continue
        parts = name.split(".")
        side = "skip" in parts or "combine" in parts
        if not side:
            index += 1
        if parts[0] == "units" and len(parts) > 2:
            unit = names[int(parts[1])]
            if side:
                label = f"{unit}.{'skip' if 'skip' in parts else 'gate'}"
            elif isinstance(module, nn.Linear):  # a token net's layers by their names: qkv, proj, fc1, fc2
                label = f"{unit}.{parts[-1]}"
            else:
                convs_in_unit[unit] = convs_in_unit.get(unit, 0) + 1
                label = f"{unit}.conv{convs_in_unit[unit]}"
        else:
            label = parts[0]
        out.append(Layer(name, module, index, "shortcut" if side else "main", label))
    return out


def unit_labels(model: nn.Module) -> list[str]:
    """How tables and figures name each residual unit, the one place for every family: a unit's own
    `label` where its builder gave one (ViT: "block3.attn", "block3.mlp"), else "unit<i>" (0-based)."""
    return [getattr(u, "label", f"unit{i}") for i, u in enumerate(unit_list(model))]


def unit_list(model: nn.Module) -> list[nn.Module]:
    units = getattr(model, "units", None)
    if units is None:
        raise ValueError("gradient norms per unit need a resnet_cli ResNet (a model with .units)")
    return list(units)


# ---------------------------------------------------------------------------------------------
# dE/dx_l: tensor hooks on each unit's input


class InputGrads:
    """Records ||dE/dx_l|| for l = 0..L: x_0..x_{L-1} are the units' inputs, x_L the last unit's
    output (the head's input). Forward pre-hooks attach a tensor hook while `armed`, so steps that
    are not measured pay nothing."""

    def __init__(self, model: nn.Module):
        self.units = unit_list(model)
        self.norms: list[torch.Tensor | None] = [None] * (len(self.units) + 1)
        self.armed = False
        self._handles = [u.register_forward_pre_hook(self._hook(i)) for i, u in enumerate(self.units)]
        self._handles.append(model.head_act.register_forward_pre_hook(self._hook(len(self.units))))

    def _hook(self, i: int) -> Callable:
        def pre(module: nn.Module, args: tuple) -> None:
            x = args[0]
            if self.armed and x.requires_grad and torch.is_grad_enabled():
                x.register_hook(lambda g, i=i: self._store(i, g))

        return pre

    def _store(self, i: int, g: torch.Tensor) -> None:
        self.norms[i] = g.detach().float().norm()

    def arm(self) -> None:
        self.norms = [None] * len(self.norms)
        self.armed = True

    def read(self) -> list[float | None]:
        self.armed = False
        return [None if n is None else n.item() for n in self.norms]

    def remove(self) -> None:
        for h in self._handles:
            h.remove()


def weight_grad_norms(layers: list[Layer]) -> list[float | None]:
    """||dE/dW|| of each layer's weight (one device sync for all of them)."""
    grads = [layer.module.weight.grad for layer in layers]
    present = [g for g in grads if g is not None]
    norms = iter(torch.stack(torch._foreach_norm(present)).tolist() if present else [])
    return [next(norms) if g is not None else None for g in grads]
