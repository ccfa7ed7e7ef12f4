"""A trained net's loss and error on one split, as He 2016a reports them: the single original view,
BN's running statistics, every rank a share of the batches under torchrun. The training loop
evaluates with it at each epoch's end, and the analyses (lesion, eval) with it after training.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from .. import data as data_mod
from . import distributed
from . import runtime as runtime_mod


def evaluate(model: torch.nn.Module, data: data_mod.Data, split: str, rt: runtime_mod.Runtime,
             batch_size: int = 1000, d: distributed.Dist = distributed.Dist()) -> tuple[float, float]:
    """Mean cross-entropy and error (%) on a split ('test', 'val', 'train'): batched, no_grad,
    eval mode, the single original view (He 2016a sec. 4.2). Under torchrun every rank takes every
    world-th batch and the sums are all-reduced: no rank idles in a collective while one evaluates."""
    was_training = model.training
    model.eval()
    sums = torch.zeros(2, device=rt.device)  # [loss sum, wrong]
    n = data_mod.num_examples(data, split)
    batch_size = min(batch_size, -(-n // d.world))  # every rank gets a batch of a small split
    with torch.no_grad(), rt.autocast():
        for x, y in data_mod.eval_for(data, split, batch_size, rt.device, shard=d.shard):
            out = model(x.contiguous(memory_format=rt.memory_format)).float()
            sums[0] += F.cross_entropy(out, y, reduction="sum")
            sums[1] += (out.argmax(1) != y).sum()
    model.train(was_training)
    loss_sum, wrong = distributed.reduce_sum(sums.tolist(), d, rt.device)
    return loss_sum / n, 100.0 * wrong / n
