"""ImageNet-style image folders, streamed from disk by DataLoader workers.

`<dir>/val` is the test split (the papers report ImageNet val error); val_split holds images out of
`<dir>/train`. Every image's random transform is seeded from its position in the epoch, so batches
do not depend on the worker count or on a resume.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import numpy as np
import torch

from ..errors import UserError
from .augment import check_mode, cutout_
from .order import TAG_SAMPLE, batch_generator, check_start, epoch_order, iters_per_epoch, mix, shard_of
from .splits import cache_dir, given_dir, positions, reason

# ImageNet training-set statistics (the usual constants); scanning 1.28M JPEGs for them at every
# start would cost minutes and give the same numbers.
IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)


def root_of(spec) -> Path:
    """The folder holding train/ and val/: data.dir (which must exist), else the cache's imagenet/."""
    return given_dir(spec, "image folder", "train/<class>/*.jpg and val/<class>/*.jpg") or cache_dir() / "imagenet"


def check_root(spec) -> Path:
    """The root, once its train/ and val/ folders are there (no image is read)."""
    root = root_of(spec)
    for sub in ("train", "val"):
        if not (root / sub).is_dir():
            raise UserError(f"image folder {root / sub} not found: expected {root}/train/<class>/*.jpg "
                            f"and {root}/val/<class>/*.jpg (pass --data-dir DIR)")
    return root


def read(spec) -> FolderData:
    """The folder's (path, label) lists per split: `<dir>/train` and `<dir>/val` (the test split)."""
    root = check_root(spec)
    train_set = _scan(root / "train")
    if len(train_set.classes) < 2:
        raise UserError(f"image folder {root / 'train'} has {len(train_set.classes)} class folder(s); "
                        "at least 2 are needed")
    test_samples = _remap(_scan(root / "val"), train_set.class_to_idx, root)
    test_labels = np.asarray([label for _, label in test_samples], dtype=np.int64)
    train_pos, val_pos, test_pos = positions(np.asarray(train_set.targets, dtype=np.int64), test_labels, spec)
    folder = FolderData(
        classes=list(train_set.classes),
        samples={
            "train": [train_set.samples[i] for i in train_pos],
            "val": [train_set.samples[i] for i in val_pos],
            "test": [test_samples[i] for i in test_pos],
        },
        image_size=spec.image_size,
        workers=spec.workers,
    )
    return folder


def _scan(directory: Path):
    from torchvision.datasets import ImageFolder

    try:
        return ImageFolder(str(directory))
    except (FileNotFoundError, OSError) as err:
        raise UserError(f"image folder {directory}: {reason(err)}") from None


def _remap(test_set, class_to_idx: dict[str, int], root: Path) -> list[tuple[str, int]]:
    """Test samples labelled with the *training* class indices (val/ may hold fewer classes)."""
    unknown = sorted(set(test_set.classes) - set(class_to_idx))
    if unknown:
        raise UserError(f"{root / 'val'} has class folders that {root / 'train'} lacks: {', '.join(unknown[:5])}")
    return [(path, class_to_idx[test_set.classes[t]]) for path, t in test_set.samples]


def _folder_transform(image_size: int, augment: str):
    """Training: Inception-style RandomResizedCrop and flip (torchvision's reference recipe, in place
    of He 2016a sec. 3.4's shorter-side scale jitter). Testing and 'none': the single centre view."""
    import torchvision.transforms as T

    if "crop" in augment:
        view = [T.RandomResizedCrop(image_size)]
    else:
        view = [T.Resize(int(image_size * 256 / 224)), T.CenterCrop(image_size)]
    flip = [T.RandomHorizontalFlip()] if "flip" in augment else []
    return T.Compose([*view, *flip, T.ToTensor(), T.Normalize(IMAGENET_MEAN, IMAGENET_STD)])


class _FolderDataset(torch.utils.data.Dataset):
    """Images from (path, label) pairs. Keys are (index, seed or None): an image's random transform
    is seeded from its position in the epoch, so batches do not depend on worker count or resume."""

    def __init__(self, samples: list[tuple[str, int]], transform, image_size: int):
        self.samples, self.transform, self.image_size = samples, transform, image_size

    def __len__(self) -> int:
        return len(self.samples)

    def __getitem__(self, key: tuple[int, int | None]) -> tuple[torch.Tensor, int]:
        from torchvision.datasets.folder import default_loader

        index, seed = key
        path, label = self.samples[index]
        try:
            image = default_loader(path)
        except OSError:
            # Raising inside a worker would reach the user as a multi-line traceback; a negative
            # label marks the image so the main process can name it in one line.
            return torch.zeros(3, self.image_size, self.image_size), -1 - index
        if seed is None:
            return self.transform(image), label
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            return self.transform(image), label

    def unreadable(self, y: torch.Tensor) -> UserError:
        from torchvision.datasets.folder import default_loader

        path = self.samples[-1 - int(y[y < 0][0])][0]
        try:
            default_loader(path)
            why = "unreadable"
        except OSError as err:
            why = reason(err)
        return UserError(f"image {path} could not be read ({why}): remove or replace it")


class _KeyBatches:
    """A batch sampler of (index, per-image seed) keys: this rank's slice of each global batch,
    batches `start`..`stop`-1 of an epoch order. An image's seed depends only on its position in the
    epoch, so a batch's images are the same whatever the worker count, the resume point or the number
    of ranks. `FolderBatches` sets it anew each epoch; its persistent loader reads it as it goes."""

    def __init__(self, batch_size: int, shard: tuple[int, int] = (0, 1)):
        self.batch_size, self.shard = batch_size, shard
        self.set(torch.arange(0), 0, 0, 0, None)

    def set(self, order: torch.Tensor, start: int, stop: int, limit: int, base_seed: int | None) -> None:
        """Batches start..stop-1 of `order` (positions beyond `limit` dropped)."""
        self.order, self.start, self.stop, self.limit, self.base_seed = order, start, stop, limit, base_seed

    def __len__(self) -> int:
        return max(self.stop - self.start, 0)

    def __iter__(self):
        bs = self.batch_size
        for i in range(self.start, self.stop):
            positions = shard_of(torch.arange(i * bs, min((i + 1) * bs, self.limit)), self.shard).tolist()
            yield [(int(self.order[pos]), None if self.base_seed is None else mix(self.base_seed, pos))
                   for pos in positions]


def _folder_loader(dataset: _FolderDataset, batches: _KeyBatches, workers: int, device: torch.device,
                   persistent: bool = False) -> torch.utils.data.DataLoader:
    return torch.utils.data.DataLoader(
        dataset, batch_sampler=batches, num_workers=workers, pin_memory=device.type == "cuda",
        persistent_workers=persistent and workers > 0,
        # Its own generator: the loader draws a worker base seed, which must not consume the global
        # RNG the training run is seeded from. Images are seeded per key, so its value is unused.
        generator=torch.Generator().manual_seed(0),
    )


def _to_device(dataset: _FolderDataset, loader, device: torch.device) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
    for x, y in loader:
        if (y < 0).any():
            raise dataset.unreadable(y)
        yield x.to(device, non_blocking=True), y.to(device, non_blocking=True)


class FolderBatches:
    """Training batches from an image folder: same interface as `Batches`. One DataLoader for the
    whole run, its workers persistent across epochs; under torchrun each rank's loader yields its
    slice of every global batch (a loader per global batch would fork workers at every step and
    prefetch nothing)."""

    def __init__(self, dataset: _FolderDataset, batch_size: int, device, seed: int, workers: int,
                 shard: tuple[int, int] = (0, 1), cutout: int = 0):
        self.dataset, self.batch_size, self.seed, self.workers = dataset, batch_size, seed, workers
        self.cutout = cutout
        self.shard = shard
        self.device = torch.device(device)
        self.iters_per_epoch = iters_per_epoch(len(dataset), batch_size)
        self.keys = _KeyBatches(batch_size, shard)
        self.loader = None  # made at the first epoch

    def __len__(self) -> int:
        return len(self.dataset)

    def epoch(self, epoch: int, start: int = 0, order: torch.Tensor | None = None
              ) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        """As `Batches.epoch`: `order` is a permutation drawn by the caller (`data.shuffle: global`)."""
        check_start(start, self.iters_per_epoch)
        order = epoch_order(len(self), self.seed, epoch) if order is None else order.cpu()
        limit = min(len(self), self.iters_per_epoch * self.batch_size)
        self.keys.set(order, start, self.iters_per_epoch, limit, mix(self.seed, epoch, TAG_SAMPLE))
        if self.loader is None:
            self.loader = _folder_loader(self.dataset, self.keys, self.workers, self.device, persistent=True)
        for i, (x, y) in enumerate(_to_device(self.dataset, self.loader, self.device), start):
            if self.cutout:  # on the device, per batch, from the batch's own stream (as `Batches`)
                x = cutout_(x, self.cutout, batch_generator(self.device, self.seed, epoch, i, self.shard))
            yield x, y


class FolderData:
    """An ImageNet-style dataset on disk: (path, label) lists per split, loaded by DataLoader workers."""

    def __init__(self, classes: list[str], samples: dict[str, list[tuple[str, int]]], image_size: int,
                 workers: int):
        self.classes, self.samples, self.image_size, self.workers = classes, samples, image_size, workers

    def size(self, split_name: str) -> int:
        return len(self.samples[split_name])

    def train_batches(self, split_name: str, batch_size: int, augment: str, device, seed: int,
                      shard: tuple[int, int] = (0, 1), cutout: int = 0) -> FolderBatches:
        check_mode(augment)
        dataset = _FolderDataset(self.samples[split_name], _folder_transform(self.image_size, augment),
                                 self.image_size)
        return FolderBatches(dataset, batch_size, device, seed, self.workers, shard, cutout)

    def eval_batches(self, split_name: str, batch_size: int, device, shard: tuple[int, int] = (0, 1)
                     ) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        """The split in order, centre views; `shard`: this rank's batches (rank, rank + world, ...)."""
        dataset = _FolderDataset(self.samples[split_name], _folder_transform(self.image_size, "none"),
                                 self.image_size)
        rank, world = shard
        keys = [[(i, None) for i in range(b, min(b + batch_size, len(dataset)))]
                for b in range(rank * batch_size, len(dataset), world * batch_size)]
        device = torch.device(device)
        return _to_device(dataset, _folder_loader(dataset, keys, self.workers, device), device)
