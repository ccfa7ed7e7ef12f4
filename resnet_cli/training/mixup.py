"""mixup (Zhang, Cisse, Dauphin and Lopez-Paz 2018), as Fixup's CIFAR recipe trains with it: one
lam ~ Beta(alpha, alpha) per batch, the batch mixed with a permutation of itself, the loss the
same mixture of the two targets' cross-entropies, and a training "hit" counted the same way (the
authors' cifar_train.py counts lam * correct_a + (1 - lam) * correct_b).

The draws come from the global generator, the stream a run seeds and every checkpoint saves, so a
resumed run mixes the same batches as an uninterrupted one.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F


class Mixed:
    """One mixed batch: the inputs to train on, and how to score outputs against its two targets."""

    def __init__(self, x: torch.Tensor, y: torch.Tensor, alpha: float):
        concentration = torch.tensor([alpha, alpha], dtype=torch.float64)
        self.lam = float(torch.distributions.Beta(concentration[0], concentration[1]).sample())
        perm = torch.randperm(len(y)).to(y.device)
        self.x = self.lam * x + (1.0 - self.lam) * x[perm]
        self.y, self.y_other = y, y[perm]

    def loss(self, out: torch.Tensor, **kwargs) -> torch.Tensor:
        return (self.lam * F.cross_entropy(out, self.y, **kwargs)
                + (1.0 - self.lam) * F.cross_entropy(out, self.y_other, **kwargs))

    def hits(self, out: torch.Tensor) -> torch.Tensor:
        pred = out.argmax(1)
        return self.lam * (pred == self.y).sum() + (1.0 - self.lam) * (pred == self.y_other).sum()
