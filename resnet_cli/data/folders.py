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
from .augment import check_mode
from .order import TAG_SAMPLE, check_start, epoch_order, iters_per_epoch, mix, shard_of
from .splits import cache_dir, positions, reason

# ImageNet training-set statistics (the usual constants); scanning 1.28M JPEGs for them at every
# start would cost minutes and give the same numbers.
_IMAGENET_MEAN = (0.485, 0.456, 0.406)
_IMAGENET_STD = (0.229, 0.224, 0.225)


def read(spec) -> FolderData:
    """The folder's (path, label) lists per split: `<dir>/train` and `<dir>/val` (the test split)."""
    root = Path(spec.dir).expanduser() if spec.dir else cache_dir() / "imagenet"
    for sub in ("train", "val"):
        if not (root / sub).is_dir():
            raise UserError(f"image folder {root / sub} not found: expected {root}/train/<class>/*.jpg "
                            f"and {root}/val/<class>/*.jpg (pass --data-dir DIR)")
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
    return T.Compose([*view, *flip, T.ToTensor(), T.Normalize(_IMAGENET_MEAN, _IMAGENET_STD)])


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


class _KeySampler(torch.utils.data.Sampler):
    """Yields (index, per-image seed) for positions first..stop-1 of an epoch order."""

    def __init__(self, order: list[int], first: int, stop: int, base_seed: int | None):
        self.order, self.first, self.stop, self.base_seed = order, first, stop, base_seed

    def __len__(self) -> int:
        return self.stop - self.first

    def __iter__(self):
        for pos in range(self.first, self.stop):
            seed = None if self.base_seed is None else mix(self.base_seed, pos)
            yield self.order[pos], seed


def _folder_loader(dataset: _FolderDataset, sampler: _KeySampler, batch_size: int, workers: int,
                   device: torch.device) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
    loader = torch.utils.data.DataLoader(
        dataset, batch_size=batch_size, sampler=sampler, num_workers=workers,
        pin_memory=device.type == "cuda",
        # Its own generator: the loader draws a worker base seed, which must not consume the global
        # RNG the training run is seeded from. Images are seeded per key, so its value is unused.
        generator=torch.Generator().manual_seed(0),
    )
    for x, y in loader:
        if (y < 0).any():
            raise dataset.unreadable(y)
        yield x.to(device, non_blocking=True), y.to(device, non_blocking=True)


class FolderBatches:
    """Training batches from an image folder: same interface as `Batches`."""

    def __init__(self, dataset: _FolderDataset, batch_size: int, device, seed: int, workers: int,
                 shard: tuple[int, int] = (0, 1)):
        self.dataset, self.batch_size, self.seed, self.workers = dataset, batch_size, seed, workers
        self.shard = shard
        self.device = torch.device(device)
        self.iters_per_epoch = iters_per_epoch(len(dataset), batch_size)

    def __len__(self) -> int:
        return len(self.dataset)

    def epoch(self, epoch: int, start: int = 0, order: torch.Tensor | None = None
              ) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        """As `Batches.epoch`: `order` is a permutation drawn by the caller (`data.shuffle: global`)."""
        check_start(start, self.iters_per_epoch)
        order = epoch_order(len(self), self.seed, epoch) if order is None else order.cpu()
        stop = min(len(self), self.iters_per_epoch * self.batch_size)
        if self.shard[1] == 1:
            sampler = _KeySampler(order.tolist(), start * self.batch_size, stop, mix(self.seed, epoch, TAG_SAMPLE))
            yield from _folder_loader(self.dataset, sampler, self.batch_size, self.workers, self.device)
            return
        # Distributed: this rank's slice of each global batch, one loader pass per global batch.
        for i in range(start, self.iters_per_epoch):
            part = shard_of(order[i * self.batch_size:min((i + 1) * self.batch_size, stop)], self.shard).tolist()
            sampler = _KeySampler(part, 0, len(part), mix(self.seed, epoch, i, self.shard[0], TAG_SAMPLE))
            yield from _folder_loader(self.dataset, sampler, len(part), self.workers, self.device)


class FolderData:
    """An ImageNet-style dataset on disk: (path, label) lists per split, loaded by DataLoader workers."""

    def __init__(self, classes: list[str], samples: dict[str, list[tuple[str, int]]], image_size: int,
                 workers: int):
        self.classes, self.samples, self.image_size, self.workers = classes, samples, image_size, workers

    def size(self, split_name: str) -> int:
        return len(self.samples[split_name])

    def train_batches(self, split_name: str, batch_size: int, augment: str, device, seed: int,
                      shard: tuple[int, int] = (0, 1)) -> FolderBatches:
        check_mode(augment)
        dataset = _FolderDataset(self.samples[split_name], _folder_transform(self.image_size, augment),
                                 self.image_size)
        return FolderBatches(dataset, batch_size, device, seed, self.workers, shard)

    def eval_batches(self, split_name: str, batch_size: int, device) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        dataset = _FolderDataset(self.samples[split_name], _folder_transform(self.image_size, "none"),
                                 self.image_size)
        sampler = _KeySampler(list(range(len(dataset))), 0, len(dataset), None)
        return _folder_loader(dataset, sampler, batch_size, self.workers, torch.device(device))
