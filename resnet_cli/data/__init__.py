"""Datasets, splits and training batches.

`load(spec.data)` turns a `DataSpec` into a `Data`: CPU tensors, already split and normalised, or for
ImageNet-style folders a `FolderData` that streams images from disk. Every data problem the user can
fix (a missing folder, a truncated pickle, a split larger than the data) is one `UserError` line.

How the trainer gets batches, whatever the dataset:

    batches = batches_for(data, "train", batch_size, augment, pad, device, seed)
    batches.iters_per_epoch                      # optimizer steps in one epoch
    for x, y in batches.epoch(epoch, start=i):   # resume inside an epoch at batch i
    for x, y in eval_for(data, "test", batch_size, device):
    num_examples(data, "val")                    # 0 when there is no such split

`batches_for` returns a `Batches` (tensor datasets, resident on the device, augmented there a whole
batch at a time) or a `FolderBatches` (ImageFolder + DataLoader workers); both have the same two
members.

Where things live:
    dataset.py    Data, load(), batches_for(), eval_for(), num_examples(): the entry points
    splits.py     Split, the fixed stratified val/subset selection, normalisation
    digits.py, synthetic.py, cifar.py, folders.py   one module per source; each has read(spec)
    augment.py    whole-batch crop, flip and Cutout
    batches.py    Batches (tensor data on the device), eval_batches
    order.py      epoch order, per-batch seeds, sharding over ranks
"""

from .augment import AUGMENT_MODES, augment_batch, augment_from
from .batches import Batches, eval_batches
from .dataset import SPLITS, Data, batches_for, check_readable, eval_for, load, num_examples
from .folders import FolderBatches, FolderData
from .order import epoch_order, shard_of
from .splits import Split, cache_dir

__all__ = [
    "AUGMENT_MODES", "SPLITS", "Batches", "Data", "FolderBatches", "FolderData", "Split", "augment_batch",
    "augment_from", "batches_for", "cache_dir", "check_readable", "epoch_order", "eval_batches", "eval_for", "load",
    "num_examples", "shard_of",
]
