"""Epoch order, seeding and sharding: what makes a batch a pure function of (seed, epoch, position).

Each epoch's order is `epoch_order(n, seed, epoch)` and every random draw of a batch is seeded from
(seed, epoch, position), so a run resumed in mid-epoch sees bitwise the same batches as one that
never stopped, without saving any data-loader state.
"""

from __future__ import annotations

import torch

# Tags that keep the random streams of one (seed, epoch) apart: data order, batch augmentation,
# per-image folder augmentation.
TAG_ORDER, TAG_AUGMENT, TAG_SAMPLE = 1, 2, 3


_MASK64 = (1 << 64) - 1


def mix(*values: int) -> int:
    """A well-spread 63-bit seed from a few integers (splitmix64 steps), the same in every process."""
    h = 0
    for v in values:
        h = (h + 0x9E3779B97F4A7C15 + (v & _MASK64)) & _MASK64
        h = ((h ^ (h >> 30)) * 0xBF58476D1CE4E5B9) & _MASK64
        h = ((h ^ (h >> 27)) * 0x94D049BB133111EB) & _MASK64
        h ^= h >> 31
    return h >> 1


def epoch_order(n: int, seed: int, epoch: int) -> torch.Tensor:
    """The permutation of the n training indices for an epoch: a pure function of (seed, epoch), so a
    resumed run recomputes it instead of storing it. CPU int64."""
    g = torch.Generator().manual_seed(mix(seed, epoch, TAG_ORDER))
    return torch.randperm(n, generator=g)


def batch_generator(device: torch.device, seed: int, epoch: int, i: int, shard: tuple[int, int] = (0, 1)
                    ) -> torch.Generator:
    """The stream of batch i's whole-batch augmentation draws (crop, flip, Cutout), on `device`."""
    rank = () if shard[1] == 1 else (shard[0],)  # ranks draw apart; one process as ever
    return torch.Generator(device=device).manual_seed(mix(seed, epoch, i, TAG_AUGMENT, *rank))


def iters_per_epoch(n: int, batch_size: int) -> int:
    if batch_size < 1:
        raise ValueError(f"batch_size must be positive, got {batch_size}")
    iters = -(-n // batch_size)
    # A final batch of one image is dropped: BatchNorm in train mode cannot normalise one sample.
    return iters - 1 if n % batch_size == 1 else iters


def shard_of(batch: torch.Tensor, shard: tuple[int, int]) -> torch.Tensor:
    """Rank r's contiguous slice of a global batch. Under DistributedDataParallel each rank trains
    on its part of the *same* global batch the single-process run would draw, so the epoch order,
    the global batch size and (up to BatchNorm's per-rank statistics) the update are unchanged, and
    each rank's shard changes every epoch with the order."""
    rank, world = shard
    return batch if world == 1 else batch.tensor_split(world)[rank]


def check_start(start: int, iters: int) -> None:
    if not 0 <= start <= iters:
        raise ValueError(f"start {start} is outside 0..{iters} (batches per epoch)")
