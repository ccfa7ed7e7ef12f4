"""Batches of a tensor split, resident on the device and augmented there a whole batch at a time."""

from __future__ import annotations

from collections.abc import Iterator

import torch
import torch.nn.functional as F

from .augment import augment_from, check_mode
from .order import TAG_AUGMENT, check_start, epoch_order, iters_per_epoch, mix, shard_of
from .splits import Split


class Batches:
    """Training batches for one split, resident on `device`; augmentation per batch on that device."""

    def __init__(self, split: Split, batch_size: int, augment: str, pad: int, device, seed: int,
                 shard: tuple[int, int] = (0, 1)):
        check_mode(augment)
        self.device = torch.device(device)
        self.y = split.y.to(self.device)
        self.batch_size, self.augment, self.pad, self.seed = batch_size, augment, pad, seed
        # Crop modes keep the images zero-padded once, here (1.56x the memory at 32x32, pad 4): each
        # batch is then one gather of rows (`augment_from`) instead of index, pad and crop.
        self.crop_pad = pad if augment in ("crop", "crop_flip") else 0
        p = self.crop_pad
        x = split.x.to(self.device)
        self.x = F.pad(x, (p, p, p, p)) if p else x
        self.shard = shard
        self.iters_per_epoch = iters_per_epoch(len(split), batch_size)

    def __len__(self) -> int:
        return len(self.y)

    def epoch(self, epoch: int, start: int = 0, order: torch.Tensor | None = None
              ) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        """Batches start..iters_per_epoch-1 of `epoch`, bitwise the same whatever `start` is. `order`:
        a permutation drawn by the caller (`data.shuffle: global`); None: `epoch_order`."""
        check_start(start, self.iters_per_epoch)
        order = (epoch_order(len(self), self.seed, epoch) if order is None else order).to(self.device)
        for i in range(start, self.iters_per_epoch):
            idx = shard_of(order[i * self.batch_size:(i + 1) * self.batch_size], self.shard)
            y = self.y[idx]
            if self.augment == "none":
                x = self.x[idx]
            else:
                x = augment_from(self.x, idx, self.augment, self.crop_pad, self._generator(epoch, i))
            yield x, y

    def _generator(self, epoch: int, i: int) -> torch.Generator:
        rank = () if self.shard[1] == 1 else (self.shard[0],)  # ranks draw apart; one process as ever
        return torch.Generator(device=self.device).manual_seed(mix(self.seed, epoch, i, TAG_AUGMENT, *rank))


def eval_batches(split: Split, batch_size: int, device) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
    """The split in order, unaugmented, one batch at a time on `device`."""
    device = torch.device(device)
    for i in range(0, len(split), batch_size):
        yield split.x[i:i + batch_size].to(device), split.y[i:i + batch_size].to(device)
