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
members. Each epoch's order is `epoch_order(n, seed, epoch)` and every random draw of a batch is
seeded from (seed, epoch, position), so a run resumed in mid-epoch sees bitwise the same batches as
one that never stopped, without saving any data-loader state.

Fixed choices, all independent of the run seed so that every run sees the same data:
- digits: the seed experiment's stratified 80/20 split (random_state 0), pixels / 16, no further
  normalisation.
- synthetic: a fixed generator seed; the task is the same every time.
- val_split and train/test subsets come from one stratified shuffle (RandomState(0)) in which every
  prefix holds the classes in proportion, so a subset of 500 is contained in a subset of 1000.
- normalisation: per-channel mean/std of the training images that remain after the splits.
- ImageNet-style folders: `<dir>/val` is the test split (the papers report ImageNet val error);
  val_split holds images out of `<dir>/train`.
"""

from __future__ import annotations

import contextlib
import os
import pickle
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np
import torch
import torch.nn.functional as F

from .errors import UserError

AUGMENT_MODES = ("none", "flip", "crop", "crop_flip")
SPLITS = ("train", "val", "test")

# Tags that keep the random streams of one (seed, epoch) apart: data order, batch augmentation,
# per-image folder augmentation.
_TAG_ORDER, _TAG_AUGMENT, _TAG_SAMPLE = 1, 2, 3
# The synthetic task is a dataset, not a run: its generator seed never changes.
_SYNTHETIC_SEED = 2016
# ImageNet training-set statistics (the usual constants); scanning 1.28M JPEGs for them at every
# start would cost minutes and give the same numbers.
_IMAGENET_MEAN = (0.485, 0.456, 0.406)
_IMAGENET_STD = (0.229, 0.224, 0.225)
_CIFAR_URL = "https://www.cs.toronto.edu/~kriz/cifar.html"


@dataclass
class Split:
    x: torch.Tensor  # (N, C, H, W) float32, already normalised
    y: torch.Tensor  # (N,) int64

    def __len__(self) -> int:
        return len(self.y)


@dataclass
class Data:
    name: str  # 'digits', 'synthetic', 'cifar10', 'cifar100', 'imagenet'
    train: Split | None  # None only for image-folder (imagenet) data
    test: Split | None
    val: Split | None  # held-out part of train when spec.val_split > 0
    num_classes: int
    in_channels: int
    image_size: int
    folder: FolderData | None = None  # set for imagenet folders only


def cache_dir() -> Path:
    """Where datasets live by default: $RESNET_DATA, else ~/.cache/resnet-cli."""
    env = os.environ.get("RESNET_DATA")
    return Path(env).expanduser() if env else Path.home() / ".cache" / "resnet-cli"


# ---------------------------------------------------------------------------------------------
# Loading


class _Raw(NamedTuple):
    """A tensor dataset as read, before val/subset selection and normalisation."""

    train: Split
    test: Split
    num_classes: int
    normalise: bool  # digits keep the seed's pixel/16 inputs


def load(spec) -> Data:
    """Read, split and normalise the dataset a `DataSpec` names (CPU tensors)."""
    if spec.dataset == "imagenet":
        return _load_folder(spec)
    loaders = {"digits": _digits, "synthetic": _synthetic, "cifar10": _cifar, "cifar100": _cifar}
    raw = loaders[spec.dataset](spec)
    train_pos, val_pos, test_pos = _positions(raw.train.y.numpy(), raw.test.y.numpy(), spec)
    train, test = _take(raw.train, train_pos), _take(raw.test, test_pos)
    val = _take(raw.train, val_pos) if len(val_pos) else None
    if raw.normalise:
        _normalise_in_place(train, [s for s in (train, val, test) if s is not None])
    _, channels, size, _ = train.x.shape
    return Data(spec.dataset, train, test, val, raw.num_classes, channels, size)


def _positions(train_labels: np.ndarray, test_labels: np.ndarray, spec) -> tuple[np.ndarray, ...]:
    """Which images form train, val and test: val is held out first, then train is subset."""
    train_pos, val_pos = _hold_out(train_labels, spec.val_split)
    train_pos = train_pos[_subset(train_labels[train_pos], spec.train_subset, "train")]
    return train_pos, val_pos, _subset(test_labels, spec.test_subset, "test")


def _normalise_in_place(train: Split, splits: list[Split]) -> None:
    for split in splits:
        split.x = _as_float(split.x)
    mean, std = _channel_stats(train.x)
    for split in splits:
        # In place: every tensor here belongs to this load, and CIFAR's float copy is 600 MB.
        split.x.sub_(mean.view(1, -1, 1, 1)).div_(std.view(1, -1, 1, 1))


def _take(split: Split, positions: np.ndarray) -> Split:
    if len(positions) == len(split) and np.array_equal(positions, np.arange(len(split))):
        return split
    idx = torch.from_numpy(positions)
    return Split(split.x[idx], split.y[idx])


def _channel_stats(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-channel mean and std of the training images: the modern form of the papers' per-pixel
    mean subtraction (He 2016a sec. 4.2)."""
    var, mean = torch.var_mean(x, dim=(0, 2, 3), correction=0)
    # A constant channel (possible in tiny test sets) would divide by zero.
    return mean, var.sqrt().clamp_min(1e-6)


def _as_float(x: torch.Tensor) -> torch.Tensor:
    # CIFAR stays uint8 until after selection: a quarter of the memory while indexing.
    return x.float().div_(255) if x.dtype == torch.uint8 else x


# ---------------------------------------------------------------------------------------------
# Fixed, stratified selection (val_split, train_subset, test_subset)


def _stratified_order(labels: np.ndarray) -> np.ndarray:
    """A fixed shuffle of 0..N-1 in which every prefix holds each class in proportion.

    Shuffle once with RandomState(0), give each item its within-class rank as a fraction of its
    class size, and sort by that fraction (stable, so ties keep the shuffled order).
    """
    perm = np.random.RandomState(0).permutation(len(labels))
    shuffled = labels[perm]
    by_class = np.argsort(shuffled, kind="stable")
    classes, starts, counts = np.unique(shuffled[by_class], return_index=True, return_counts=True)
    group = np.searchsorted(classes, shuffled[by_class])
    rank = np.empty(len(labels))
    rank[by_class] = (np.arange(len(labels)) - starts[group] + 0.5) / counts[group]
    return perm[np.argsort(rank, kind="stable")]


def _hold_out(labels: np.ndarray, n_val: int) -> tuple[np.ndarray, np.ndarray]:
    """Positions of the training and validation images (He 2016a tuned on a 45k/5k split)."""
    n = len(labels)
    if n_val == 0:
        return np.arange(n), np.arange(0)
    if n_val > n - 2:
        raise UserError(f"data.val_split {n_val} leaves {max(n - n_val, 0)} of the {n} training images; "
                        "at least 2 must remain for training")
    order = _stratified_order(labels)
    return np.sort(order[n_val:]), np.sort(order[:n_val])


def _subset(labels: np.ndarray, n: int | None, which: str) -> np.ndarray:
    """Positions of the first n images of the fixed stratified shuffle, in their original order."""
    if n is None:
        return np.arange(len(labels))
    if n > len(labels):
        raise UserError(f"data.{which}_subset {n} is larger than the {len(labels)} {which} images available")
    return np.sort(_stratified_order(labels)[:n])


# ---------------------------------------------------------------------------------------------
# digits and synthetic


def _digits(spec) -> _Raw:
    """scikit-learn's 8x8 digits with the seed experiment's split: 1,437 train / 360 test."""
    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split

    digits = load_digits()
    x = torch.tensor(digits.images / 16.0, dtype=torch.float32).unsqueeze(1)  # (1797, 1, 8, 8)
    y = torch.tensor(digits.target, dtype=torch.int64)
    idx_tr, idx_te = train_test_split(np.arange(len(y)), test_size=0.2, random_state=0, stratify=digits.target)
    idx_tr, idx_te = torch.from_numpy(idx_tr), torch.from_numpy(idx_te)
    return _Raw(Split(x[idx_tr], y[idx_tr]), Split(x[idx_te], y[idx_te]), 10, normalise=False)


def _synthetic(spec) -> _Raw:
    """One smooth random template per class, shown at a random circular shift under two nuisances.

    sample = shift(template[y]) + noise * (smooth random field + white gaussian). The shift means no
    fixed pixel carries the class, and the smooth field has the templates' own statistics, so it
    cannot be averaged away. Measured at the defaults (noise 1): a 5-layer conv net passes 90% test
    accuracy in about 300 steps of 128 (about 50% after 100), a linear model on pixels stays at
    chance. Fields have no DC term, so the mean colour gives nothing away.
    """
    s = spec.synthetic
    templates = _smooth_fields(s.classes, s.channels, s.image_size, torch.Generator().manual_seed(_SYNTHETIC_SEED))
    # Separate generators: the test set does not change when train_size does.
    train = _synthetic_split(templates, s.train_size, s.noise, _SYNTHETIC_SEED + 1)
    test = _synthetic_split(templates, s.test_size, s.noise, _SYNTHETIC_SEED + 2)
    return _Raw(train, test, s.classes, normalise=True)


def _smooth_fields(count: int, channels: int, size: int, g: torch.Generator) -> torch.Tensor:
    """(count, channels, size, size) periodic low-frequency random fields, each of unit std."""
    k = max(1, min(3, size // 4))  # highest spatial frequency kept: smooth at every size
    shape = (count, channels, 2 * k + 1, k + 1)
    coeffs = torch.complex(torch.randn(shape, generator=g), torch.randn(shape, generator=g))
    spectrum = torch.zeros(count, channels, size, size // 2 + 1, dtype=torch.complex64)
    rows = torch.cat([torch.arange(0, k + 1), torch.arange(size - k, size)])  # frequencies -k..k
    spectrum[:, :, rows, : k + 1] = coeffs
    spectrum[:, :, 0, 0] = 0  # no DC term
    fields = torch.fft.irfft2(spectrum, s=(size, size))  # periodic, so a circular shift has no seam
    return fields / fields.std(dim=(2, 3), keepdim=True).clamp_min(1e-6)


def _synthetic_split(templates: torch.Tensor, n: int, noise: float, seed: int) -> Split:
    g = torch.Generator().manual_seed(seed)
    classes, channels, size, _ = templates.shape
    y = torch.randperm(n, generator=g) % classes  # balanced classes in random order
    shifts = torch.randint(0, size, (n, 2), generator=g)
    grid = torch.arange(size)
    rows = (grid - shifts[:, :1]) % size  # (n, size)
    cols = (grid - shifts[:, 1:]) % size
    x = _gather_window(templates[y], rows, cols)  # (n, C, size, size)
    if noise > 0:
        clutter = _smooth_fields(n, channels, size, g)
        x = x + noise * (clutter + torch.randn(x.shape, generator=g))
    return Split(x, y)


# ---------------------------------------------------------------------------------------------
# CIFAR python batches


class _CifarFormat(NamedTuple):
    title: str
    folder: str
    train_files: tuple[str, ...]
    test_files: tuple[str, ...]
    label_key: str
    num_classes: int
    archive: str
    torchvision_class: str


_CIFAR = {
    "cifar10": _CifarFormat("CIFAR-10", "cifar-10-batches-py", tuple(f"data_batch_{i}" for i in range(1, 6)),
                            ("test_batch",), "labels", 10, "cifar-10-python.tar.gz", "CIFAR10"),
    "cifar100": _CifarFormat("CIFAR-100", "cifar-100-python", ("train",), ("test",), "fine_labels", 100,
                             "cifar-100-python.tar.gz", "CIFAR100"),
}


def _cifar(spec) -> _Raw:
    fmt = _CIFAR[spec.dataset]
    base = Path(spec.dir).expanduser() if spec.dir else cache_dir()
    folder = _find_cifar(fmt, base)
    if folder is None:
        if not spec.download:
            raise UserError(f"{fmt.title} not found in {base} and data.download is off: {_cifar_hint(fmt)}")
        _download_cifar(fmt, base)
        folder = _find_cifar(fmt, base)
        if folder is None:
            raise UserError(f"{fmt.title} was downloaded into {base} but its batches are missing: {_cifar_hint(fmt)}")
    train = _read_batches(folder, fmt.train_files, fmt)
    test = _read_batches(folder, fmt.test_files, fmt)
    return _Raw(train, test, fmt.num_classes, normalise=True)


def _cifar_hint(fmt: _CifarFormat) -> str:
    return f"download {fmt.archive} from {_CIFAR_URL}, extract it and pass --data-dir DIR"


def _find_cifar(fmt: _CifarFormat, base: Path) -> Path | None:
    """The batches folder: `base/cifar-10-batches-py` or `base` itself; None when absent."""
    names = fmt.train_files + fmt.test_files
    for folder in (base / fmt.folder, base):
        present = [name for name in names if (folder / name).is_file()]
        if len(present) == len(names):
            return folder
        if present:
            missing = ", ".join(name for name in names if name not in present)
            raise UserError(f"{fmt.title} in {folder} is incomplete (missing {missing}): "
                            f"extract {fmt.archive} again")
    return None


def _download_cifar(fmt: _CifarFormat, root: Path) -> None:
    """Fetch and extract the archive with torchvision into `root`, where the next run finds it."""
    try:
        import torchvision.datasets

        root.mkdir(parents=True, exist_ok=True)
        # torchvision may print progress; stdout carries the tool's results only.
        with contextlib.redirect_stdout(sys.stderr):
            getattr(torchvision.datasets, fmt.torchvision_class)(root=str(root), train=True, download=True)
    except Exception as err:  # noqa: BLE001 - any failure means "not available"; say why in one line
        raise UserError(f"{fmt.title} not found in {root} and could not be downloaded ({_reason(err)}): "
                        f"{_cifar_hint(fmt)}") from None


def _reason(err: BaseException) -> str:
    text = str(err).strip().splitlines()
    first = text[0] if text else ""
    return f"{type(err).__name__}: {first[:160]}" if first else type(err).__name__


class _ArrayUnpickler(pickle.Unpickler):
    """Loads only plain containers and numpy arrays: a data file must not be able to run code."""

    _ALLOWED = frozenset({
        ("numpy", "ndarray"), ("numpy", "dtype"), ("_codecs", "encode"),
        ("numpy.core.multiarray", "_reconstruct"), ("numpy._core.multiarray", "_reconstruct"),
        ("numpy.core.numeric", "_frombuffer"), ("numpy._core.numeric", "_frombuffer"),
    })

    def find_class(self, module: str, name: str) -> Any:
        if (module, name) not in self._ALLOWED:
            raise pickle.UnpicklingError(f"unexpected object {module}.{name}")
        return super().find_class(module, name)


def _read_batches(folder: Path, names: tuple[str, ...], fmt: _CifarFormat) -> Split:
    parts = [_read_batch(folder / name, fmt) for name in names]
    data = np.concatenate([d for d, _ in parts])
    labels = np.concatenate([lab for _, lab in parts])
    x = torch.from_numpy(data).view(-1, 3, 32, 32)  # rows are 1024 R, 1024 G, 1024 B values
    return Split(x, torch.from_numpy(labels))


def _read_batch(path: Path, fmt: _CifarFormat) -> tuple[np.ndarray, np.ndarray]:
    """(N, 3072) uint8 images and (N,) int64 labels from one python-version batch file."""
    try:
        with open(path, "rb") as f:
            batch = _ArrayUnpickler(f, encoding="bytes").load()
        data = np.asarray(_field(batch, "data"), dtype=np.uint8)
        labels = np.asarray(_field(batch, fmt.label_key), dtype=np.int64)
    except Exception as err:  # noqa: BLE001 - truncated, garbage or foreign pickles all mean "unreadable"
        raise UserError(f"{fmt.title} file {path} is unreadable ({_reason(err)}): "
                        f"extract {fmt.archive} again") from None
    if data.ndim != 2 or data.shape[1] != 3072 or len(labels) != len(data):
        raise UserError(f"{fmt.title} file {path} is not a batch of 32x32 colour images "
                        f"(data {data.shape}, {len(labels)} labels): extract {fmt.archive} again")
    if len(labels) and (labels.min() < 0 or labels.max() >= fmt.num_classes):
        raise UserError(f"{fmt.title} file {path} has labels outside 0..{fmt.num_classes - 1}")
    return data, labels


def _field(batch: Any, key: str) -> Any:
    # The original files load with bytes keys; a re-saved batch may have str keys.
    for k in (key.encode(), key):
        if isinstance(batch, dict) and k in batch:
            return batch[k]
    raise KeyError(f"no '{key}' entry")


# ---------------------------------------------------------------------------------------------
# Whole-batch augmentation and epoch order


def augment_batch(x: torch.Tensor, mode: str, pad: int, generator: torch.Generator) -> torch.Tensor:
    """Augment a whole (N, C, H, W) batch on its own device, without a per-image loop.

    He 2016a sec. 4.2: pad 4 pixels on each side, take a random 32x32 crop, flip horizontally at
    random. Padding is with zeros of the normalised images, i.e. with the mean pixel. The crop
    offsets are drawn first, then the flips; all draws come from `generator`.
    """
    if mode not in AUGMENT_MODES:
        raise ValueError(f"augment mode '{mode}' is not one of {', '.join(AUGMENT_MODES)}")
    if mode == "none":
        return x
    p = pad if mode in ("crop", "crop_flip") else 0
    source = F.pad(x, (p, p, p, p)) if p else x
    return augment_from(source, torch.arange(len(x), device=x.device), mode, p, generator)


def augment_from(source: torch.Tensor, idx: torch.Tensor, mode: str, pad: int,
                 generator: torch.Generator) -> torch.Tensor:
    """The augmented images source[idx], as `augment_batch` draws them; `source` holds whole images,
    already zero-padded by `pad` on each side when the mode crops (pad 0: no crop). `Batches` pads
    its resident images once, so a batch costs one gather of rows instead of index, pad and crop."""
    n, h, w = len(idx), source.shape[2] - 2 * pad, source.shape[3] - 2 * pad
    if mode in ("crop", "crop_flip") and pad > 0:
        offsets = torch.randint(0, 2 * pad + 1, (n, 2), generator=generator, device=source.device)
        x = _crop_rows(source, idx, offsets[:, 0], offsets[:, 1], h, w)
    else:
        x = source[idx]  # a fresh copy: the flip below may write into it
    if mode in ("flip", "crop_flip"):
        x = _random_flip_(x, generator)
    return x


def _crop_rows(source: torch.Tensor, idx: torch.Tensor, top: torch.Tensor, left: torch.Tensor, h: int,
               w: int) -> torch.Tensor:
    """out[k, c, i, j] = source[idx[k], c, top[k] + i, left[k] + j], as one index_select of rows.

    Every output row is a run of w consecutive values of the contiguous source, so the copy moves
    whole rows instead of computing an address per pixel (a per-pixel gather costs ~6x more CPU)."""
    source = source.contiguous()
    n = len(idx)
    _, c, hp, wp = source.shape
    flat = source.view(-1)
    runs = flat.as_strided((flat.numel() - w + 1, w), (1, 1))  # runs[s] = flat[s : s + w], a view
    dev = source.device
    start = (idx.view(n, 1, 1) * (c * hp * wp) + torch.arange(c, device=dev).view(1, c, 1) * (hp * wp)
             + (top.view(n, 1, 1) + torch.arange(h, device=dev).view(1, 1, h)) * wp + left.view(n, 1, 1))
    return runs.index_select(0, start.view(-1)).view(n, c, h, w)  # (N, C, H, W)


def _random_flip_(x: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
    """Mirror a random half of the batch; may write into x (callers pass a fresh copy)."""
    flip = torch.rand(len(x), generator=generator, device=x.device) < 0.5
    if x.device.type == "cpu":
        # Mirroring only the chosen images costs the CPU half of a where() over the whole batch;
        # on CUDA nonzero() would synchronise with the host, and where() is cheap there.
        chosen = flip.nonzero().view(-1)
        return x.index_copy_(0, chosen, x.index_select(0, chosen).flip(3))
    return torch.where(flip.view(-1, 1, 1, 1), x.flip(3), x)


def _gather_window(x: torch.Tensor, rows: torch.Tensor, cols: torch.Tensor) -> torch.Tensor:
    """out[n, c, i, j] = x[n, c, rows[n, i], cols[n, j]]: a per-image window, by two gathers."""
    n, c, _, w = x.shape
    h_out, w_out = rows.shape[1], cols.shape[1]
    x = x.gather(2, rows.view(n, 1, h_out, 1).expand(n, c, h_out, w))  # (N, C, H_out, W)
    return x.gather(3, cols.view(n, 1, 1, w_out).expand(n, c, h_out, w_out))  # (N, C, H_out, W_out)


_MASK64 = (1 << 64) - 1


def _mix(*values: int) -> int:
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
    g = torch.Generator().manual_seed(_mix(seed, epoch, _TAG_ORDER))
    return torch.randperm(n, generator=g)


def _iters_per_epoch(n: int, batch_size: int) -> int:
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


def _check_start(start: int, iters: int) -> None:
    if not 0 <= start <= iters:
        raise ValueError(f"start {start} is outside 0..{iters} (batches per epoch)")


# ---------------------------------------------------------------------------------------------
# Tensor batches


class Batches:
    """Training batches for one split, resident on `device`; augmentation per batch on that device."""

    def __init__(self, split: Split, batch_size: int, augment: str, pad: int, device, seed: int,
                 shard: tuple[int, int] = (0, 1)):
        if augment not in AUGMENT_MODES:
            raise ValueError(f"augment mode '{augment}' is not one of {', '.join(AUGMENT_MODES)}")
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
        self.iters_per_epoch = _iters_per_epoch(len(split), batch_size)

    def __len__(self) -> int:
        return len(self.y)

    def epoch(self, epoch: int, start: int = 0, order: torch.Tensor | None = None
              ) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        """Batches start..iters_per_epoch-1 of `epoch`, bitwise the same whatever `start` is. `order`:
        a permutation drawn by the caller (`data.shuffle: global`); None: `epoch_order`."""
        _check_start(start, self.iters_per_epoch)
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
        return torch.Generator(device=self.device).manual_seed(_mix(self.seed, epoch, i, _TAG_AUGMENT, *rank))


def eval_batches(split: Split, batch_size: int, device) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
    """The split in order, unaugmented, one batch at a time on `device`."""
    device = torch.device(device)
    for i in range(0, len(split), batch_size):
        yield split.x[i:i + batch_size].to(device), split.y[i:i + batch_size].to(device)


# ---------------------------------------------------------------------------------------------
# ImageNet-style folders


def _load_folder(spec) -> Data:
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
    train_pos, val_pos, test_pos = _positions(np.asarray(train_set.targets, dtype=np.int64), test_labels, spec)
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
    return Data("imagenet", None, None, None, len(folder.classes), 3, spec.image_size, folder=folder)


def _scan(directory: Path):
    from torchvision.datasets import ImageFolder

    try:
        return ImageFolder(str(directory))
    except (FileNotFoundError, OSError) as err:
        raise UserError(f"image folder {directory}: {_reason(err)}") from None


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
            reason = "unreadable"
        except OSError as err:
            reason = _reason(err)
        return UserError(f"image {path} could not be read ({reason}): remove or replace it")


class _KeySampler(torch.utils.data.Sampler):
    """Yields (index, per-image seed) for positions first..stop-1 of an epoch order."""

    def __init__(self, order: list[int], first: int, stop: int, base_seed: int | None):
        self.order, self.first, self.stop, self.base_seed = order, first, stop, base_seed

    def __len__(self) -> int:
        return self.stop - self.first

    def __iter__(self):
        for pos in range(self.first, self.stop):
            seed = None if self.base_seed is None else _mix(self.base_seed, pos)
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
        self.iters_per_epoch = _iters_per_epoch(len(dataset), batch_size)

    def __len__(self) -> int:
        return len(self.dataset)

    def epoch(self, epoch: int, start: int = 0) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        _check_start(start, self.iters_per_epoch)
        order = epoch_order(len(self), self.seed, epoch)
        stop = min(len(self), self.iters_per_epoch * self.batch_size)
        if self.shard[1] == 1:
            sampler = _KeySampler(order.tolist(), start * self.batch_size, stop, _mix(self.seed, epoch, _TAG_SAMPLE))
            yield from _folder_loader(self.dataset, sampler, self.batch_size, self.workers, self.device)
            return
        # Distributed: this rank's slice of each global batch, one loader pass per global batch.
        for i in range(start, self.iters_per_epoch):
            part = shard_of(order[i * self.batch_size:min((i + 1) * self.batch_size, stop)], self.shard).tolist()
            sampler = _KeySampler(part, 0, len(part), _mix(self.seed, epoch, i, self.shard[0], _TAG_SAMPLE))
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
        if augment not in AUGMENT_MODES:
            raise ValueError(f"augment mode '{augment}' is not one of {', '.join(AUGMENT_MODES)}")
        dataset = _FolderDataset(self.samples[split_name], _folder_transform(self.image_size, augment),
                                 self.image_size)
        return FolderBatches(dataset, batch_size, device, seed, self.workers, shard)

    def eval_batches(self, split_name: str, batch_size: int, device) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        dataset = _FolderDataset(self.samples[split_name], _folder_transform(self.image_size, "none"),
                                 self.image_size)
        sampler = _KeySampler(list(range(len(dataset))), 0, len(dataset), None)
        return _folder_loader(dataset, sampler, batch_size, self.workers, torch.device(device))


# ---------------------------------------------------------------------------------------------
# One entry point for either kind of data


def num_examples(data: Data, split_name: str) -> int:
    """Images in a split; 0 when the split is absent (no val_split)."""
    _check_split(split_name)
    if data.folder is not None:
        return data.folder.size(split_name)
    split = getattr(data, split_name)
    return 0 if split is None else len(split)


def batches_for(data: Data, split_name: str, batch_size: int, augment: str, pad: int, device,
                seed: int, shard: tuple[int, int] = (0, 1)) -> Batches | FolderBatches:
    """Training batches over a split of either kind of data; `shard` = (rank, world size)."""
    if num_examples(data, split_name) == 0:
        raise ValueError(f"{data.name} has no '{split_name}' images")
    if data.folder is not None:
        return data.folder.train_batches(split_name, batch_size, augment, device, seed, shard)
    return Batches(getattr(data, split_name), batch_size, augment, pad, device, seed, shard)


def eval_for(data: Data, split_name: str, batch_size: int, device) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
    """Evaluation batches (single view, in order) over a split of either kind of data."""
    if num_examples(data, split_name) == 0:
        raise ValueError(f"{data.name} has no '{split_name}' images")
    if data.folder is not None:
        return data.folder.eval_batches(split_name, batch_size, device)
    return eval_batches(getattr(data, split_name), batch_size, device)


def _check_split(split_name: str) -> None:
    if split_name not in SPLITS:
        raise ValueError(f"split '{split_name}' is not one of {', '.join(SPLITS)}")
