"""Gate telemetry for the gated shortcuts of He 2016b Table 1 (exclusive and shortcut-only gating,
and highway units): the mean of g(x) = sigmoid(W_g x + b_g) per unit.

He 2016b sec. 3.1 explains the failure of exclusive gating at b_g = 0 by the gates: with g near
0.5 both the shortcut and the branch are halved, and only a strongly negative b_g (g near 0) keeps
the shortcut close to the identity. The mean gate per unit over training shows where each run sits.

Measured on a fixed batch: the first `BATCH` images of the run's evaluation split (`val` where the
run holds one out, else `test`), unaugmented, in eval mode under no_grad, so the figure moves only
with the weights and the BN statistics, and no random stream is touched.
"""

from __future__ import annotations

import torch
from torch import nn

BATCH = 256  # images of the fixed batch; the digits test split has 360


def gates_of(model: nn.Module) -> list[nn.Module]:
    """The gate module of every gated unit, in unit order (empty for a net without gates)."""
    return [u.combine.gate for u in getattr(model, "units", []) if getattr(u.combine, "gate", None) is not None]


def fixed_batch(data, device) -> torch.Tensor | None:
    """The first BATCH images of the evaluation split (val if held out, else test)."""
    from .. import data as data_mod

    split = "val" if data_mod.num_examples(data, "val") else "test"
    n = min(BATCH, data_mod.num_examples(data, split))
    return next(iter(data_mod.eval_for(data, split, n, device)))[0]


@torch.no_grad()
def gate_means(model: nn.Module, x: torch.Tensor) -> list[float]:
    """Per gated unit, the mean of its gate's output g (over images, channels and positions) for
    the batch x, read by forward hooks during one eval-mode pass."""
    gates = gates_of(model)
    means: list[float | None] = [None] * len(gates)
    hooks = [g.register_forward_hook(lambda m, i, out, k=k: means.__setitem__(k, out.float().mean().item()))
             for k, g in enumerate(gates)]
    was_training = model.training
    model.eval()
    try:
        model(x)
    finally:
        model.train(was_training)
        for h in hooks:
            h.remove()
    return means
