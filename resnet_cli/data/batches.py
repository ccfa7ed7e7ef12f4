"""Batches of a tensor split, resident on the device and augmented there a whole batch at a time."""

from __future__ import annotations

from collections.abc import Iterator

import torch
import torch.nn.functional as F

from .augment import augment_from, check_mode
from .order import batch_generator, check_start, epoch_order, iters_per_epoch, shard_of
from .splits import Split


class Batches:
    """Training batches for one split, resident on `device`; augmentation per batch on that device."""

    def __init__(self, split: Split, batch_size: int, augment: str, pad: int, device, seed: int,
                 shard: tuple[int, int] = (0, 1), cutout: int = 0):
        check_mode(augment)
        self.device = torch.device(device)
        self.y = split.y.to(self.device)
        self.batch_size, self.augment, self.pad, self.seed = batch_size, augment, pad, seed
        self.cutout = cutout  # data.cutout: the square's side in pixels, 0: off
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
            if self.augment == "none" and not self.cutout:
                x = self.x[idx]
            else:
                g = batch_generator(self.device, self.seed, epoch, i, self.shard)
                x = augment_from(self.x, idx, self.augment, self.crop_pad, g, self.cutout)
            yield x, y


def eval_batches(split: Split, batch_size: int, device, shard: tuple[int, int] = (0, 1)
                 ) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
    """The split in order, unaugmented, one batch at a time on `device`; `shard` (rank, world):
    batches rank, rank + world, ... (the ranks' sums make the whole split's)."""
    x, y = resident(split, torch.device(device))
    rank, world = shard
    for i in range(rank * batch_size, len(split), world * batch_size):
        yield x[i:i + batch_size], y[i:i + batch_size]


def resident(split: Split, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    """The split on `device`, copied there once and kept, as the training split is: an evaluation
    then reads device memory instead of copying the split from pageable host memory each time
    (`resnet lesion` evaluates hundreds of times)."""
    if device.type == "cpu":
        return split.x, split.y
    cache = split.__dict__.setdefault("_resident", {})
    hit = cache.get(str(device))
    if hit is None or hit[0] is not split.x or hit[1] is not split.y:  # the split's tensors were replaced
        hit = cache[str(device)] = (split.x, split.y, split.x.to(device), split.y.to(device))
    return hit[2], hit[3]
