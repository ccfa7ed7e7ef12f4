"""A loaded dataset (`Data`) and the one entry point for batches of either kind of data."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field

import torch

from ..errors import UserError
from ..spec.datasets import DATASETS
from ..spec.registry import Registry
from . import cifar, digits, folders, mnist, synthetic
from .batches import Batches, eval_batches
from .folders import IMAGENET_MEAN, IMAGENET_STD, FolderBatches, FolderData
from .splits import Split, normalise_in_place, positions, take

SPLITS = ("train", "val", "test")


@dataclass
class Data:
    name: str  # a row of spec.datasets.DATASETS
    train: Split | None  # None only for image-folder (imagenet) data
    test: Split | None
    val: Split | None  # held-out part of train when spec.val_split > 0
    num_classes: int
    in_channels: int
    image_size: int
    folder: FolderData | None = None  # set for imagenet folders only
    classes: list[str] = field(default_factory=list)  # one name per class index
    # The per-channel normalisation applied after scaling pixels to [0, 1]; None: inputs as read
    # (digits keep the "Residual Connection" article's pixel/16). Exported nets need it beside them.
    mean: list[float] | None = None
    std: list[float] | None = None
    source: str = ""  # where the images were read from: a real path, or how they were made


# Readers by the name a dataset's row gives (spec/datasets.py `reader`): `read(data_spec)` returns a
# `Raw` (tensors: split, subset and normalised by `load`) or a whole `Data` (image folders).
READERS: Registry = Registry("dataset reader")
READERS.register("digits")(digits.read)
READERS.register("synthetic")(synthetic.read)
READERS.register("cifar")(cifar.read)
READERS.register("mnist")(mnist.read)


@READERS.register("folders")
def read_folders(spec) -> Data:
    """ImageNet-style train/ and val/ folders, streamed from disk (data/folders.py)."""
    folder = folders.read(spec)
    return Data(spec.dataset, None, None, None, len(folder.classes), 3, spec.image_size, folder=folder,
                classes=list(folder.classes), mean=list(IMAGENET_MEAN), std=list(IMAGENET_STD),
                source=str(folders.root_of(spec).resolve()))


def load(spec) -> Data:
    """Read, split and normalise the dataset a `DataSpec` names (CPU tensors)."""
    row = DATASETS[spec.dataset]
    if spec.dir and not row.reads_files:
        raise UserError(f"--data-dir {spec.dir} (data.dir): {spec.dataset} reads no files (it is "
                        f"{row.files}); leave data.dir unset")
    raw = READERS[row.reader](spec)
    if isinstance(raw, Data):
        return raw
    train_pos, val_pos, test_pos = positions(raw.train.y.numpy(), raw.test.y.numpy(), spec)
    train, test = take(raw.train, train_pos), take(raw.test, test_pos)
    val = take(raw.train, val_pos) if len(val_pos) else None
    mean = std = None
    if raw.normalise:
        mean, std = normalise_in_place(train, [s for s in (train, val, test) if s is not None])
    _, channels, size, _ = train.x.shape
    names = raw.classes or row.class_names or tuple(str(i) for i in range(raw.num_classes))
    return Data(spec.dataset, train, test, val, raw.num_classes, channels, size, classes=list(names),
                mean=mean, std=std, source=raw.source)


def check_readable(spec) -> None:
    """The reader's one-line error now, where a dataset cannot be read: what a study checks before it
    creates any run directory. Tensor datasets are read (seconds, or a download where data.download
    allows one); image folders only have their train/ and val/ looked for (scanning ImageNet takes
    minutes)."""
    if DATASETS[spec.dataset].reader == "folders":
        folders.check_root(spec)
    else:
        load(spec)


def num_examples(data: Data, split_name: str) -> int:
    """Images in a split; 0 when the split is absent (no val_split)."""
    _check_split(split_name)
    if data.folder is not None:
        return data.folder.size(split_name)
    split = getattr(data, split_name)
    return 0 if split is None else len(split)


def batches_for(data: Data, split_name: str, batch_size: int, augment: str, pad: int, device,
                seed: int, shard: tuple[int, int] = (0, 1), cutout: int = 0) -> Batches | FolderBatches:
    """Training batches over a split of either kind of data; `shard` = (rank, world size), `cutout`
    the side of the Cutout square (0: off)."""
    if num_examples(data, split_name) == 0:
        raise ValueError(f"{data.name} has no '{split_name}' images")
    if data.folder is not None:
        return data.folder.train_batches(split_name, batch_size, augment, device, seed, shard, cutout)
    return Batches(getattr(data, split_name), batch_size, augment, pad, device, seed, shard, cutout)


def eval_for(data: Data, split_name: str, batch_size: int, device, shard: tuple[int, int] = (0, 1)
             ) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
    """Evaluation batches (single view, in order) over a split of either kind of data; `shard` =
    (rank, world size): this rank's batches only (rank, rank + world, ...)."""
    if num_examples(data, split_name) == 0:
        raise ValueError(f"{data.name} has no '{split_name}' images")
    if data.folder is not None:
        return data.folder.eval_batches(split_name, batch_size, device, shard)
    return eval_batches(getattr(data, split_name), batch_size, device, shard)


def _check_split(split_name: str) -> None:
    if split_name not in SPLITS:
        raise ValueError(f"split '{split_name}' is not one of {', '.join(SPLITS)}")
