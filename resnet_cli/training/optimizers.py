"""The optimizer a spec asks for, with its parameter groups (`optim.lr_groups`).

Each group carries `lr_scale`, the multiple of the scheduled lr it trains at; `set_lrs` is the one
place the schedule's lr reaches the groups, so warm-up and steps move every group alike.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import nn

from ..spec import OptimSpec

_SELECT: dict[str, Callable[[str, nn.Parameter], bool]] = {
    "scalars": lambda name, p: p.numel() == 1,
    "biases": lambda name, p: name.rsplit(".", 1)[-1] == "bias",
}


def groups(model: nn.Module, optim: OptimSpec) -> list[dict]:
    """The parameter groups: each of `optim.lr_groups` in order (a parameter goes to the first that
    selects it), then the rest at lr_scale 1. Empty groups are left out."""
    taken: set[int] = set()
    out = []
    for rule in optim.lr_groups:
        params = [p for name, p in model.named_parameters()
                  if id(p) not in taken and any(_SELECT[s](name, p) for s in rule.select)]
        taken.update(id(p) for p in params)
        if params:
            out.append({"params": params, "lr_scale": rule.lr_scale, "select": ",".join(rule.select)})
    rest = [p for p in model.parameters() if id(p) not in taken]
    if rest or not out:
        out.append({"params": rest, "lr_scale": 1.0, "select": "rest"})
    return out


# `optim.optimizer` -> the optimizer over the parameter groups; one row each (the spec's Literal
# names the same keys, so a new optimizer is a row here and a name there).
OPTIMIZERS: dict[str, Callable[[list[dict], OptimSpec], torch.optim.Optimizer]] = {
    # SGD with momentum 0.9 and weight decay 1e-4: the papers' (He 2016a sec. 3.4, 4.2).
    "sgd": lambda params, o: torch.optim.SGD(params, lr=o.lr, momentum=o.momentum, nesterov=o.nesterov,
                                             weight_decay=o.weight_decay),
    # AdamW (Loshchilov & Hutter 2019): the Transformers' usual, betas 0.9/0.999.
    "adamw": lambda params, o: torch.optim.AdamW(params, lr=o.lr, weight_decay=o.weight_decay),
}


def build(model: nn.Module, optim: OptimSpec) -> torch.optim.Optimizer:
    """The optimizer `optim.optimizer` names (OPTIMIZERS), over the groups of `optim.lr_groups`."""
    return OPTIMIZERS[optim.optimizer](groups(model, optim), optim)


def set_lrs(optimizer: torch.optim.Optimizer, lr: float) -> None:
    """The scheduled lr into every group, times the group's own scale."""
    for group in optimizer.param_groups:
        group["lr"] = lr * group.get("lr_scale", 1.0)


def lrs(optimizer: torch.optim.Optimizer) -> dict[str, float]:
    """Each group's lr as the optimizer holds it, by what the group selects (for the log)."""
    return {group.get("select", str(i)): group["lr"] for i, group in enumerate(optimizer.param_groups)}
