"""What every tensor source returns, and the fixed selection of val, train and test images.

Fixed choices, all independent of the run seed so that every run sees the same data:
- val_split and train/test subsets come from one stratified shuffle (RandomState(0)) in which every
  prefix holds the classes in proportion, so a subset of 500 is contained in a subset of 1000.
- normalisation: per-channel mean/std of the training images that remain after the splits.
"""

from __future__ import annotations

import contextlib
import os
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

import numpy as np
import torch

from ..errors import UserError


@dataclass
class Split:
    x: torch.Tensor  # (N, C, H, W) float32, already normalised
    y: torch.Tensor  # (N,) int64

    def __len__(self) -> int:
        return len(self.y)


def cache_dir() -> Path:
    """Where datasets live by default: $RESNET_DATA, else ~/.cache/resnet-cli."""
    env = os.environ.get("RESNET_DATA")
    return Path(env).expanduser() if env else Path.home() / ".cache" / "resnet-cli"


class Raw(NamedTuple):
    """A tensor dataset as read, before val/subset selection and normalisation."""

    train: Split
    test: Split
    num_classes: int
    normalise: bool  # digits keep the article's pixel/16 inputs
    classes: tuple[str, ...] | None = None  # class names read with the data (CIFAR-100's meta file)
    source: str = ""  # where the images were read from (a real path), recorded in the run's meta.json


def given_dir(spec, title: str, holds: str = "the files") -> Path | None:
    """`data.dir` as a folder that exists, None when unset. A folder that is not there is an error,
    never a reason to read another copy of the data (the cache, a download, a system package)."""
    if not spec.dir:
        return None
    path = Path(spec.dir).expanduser()
    if not path.is_dir():
        what = "is a file, not a folder" if path.exists() else "does not exist"
        raise UserError(f"{title} not found: --data-dir {spec.dir} (data.dir) {what}; give the folder that "
                        f"holds {holds}, or leave data.dir unset to use {cache_dir()}")
    return path


def positions(train_labels: np.ndarray, test_labels: np.ndarray, spec) -> tuple[np.ndarray, ...]:
    """Which images form train, val and test: val is held out first, then train is subset."""
    train_pos, val_pos = _hold_out(train_labels, spec.val_split)
    train_pos = train_pos[_subset(train_labels[train_pos], spec.train_subset, "train")]
    return train_pos, val_pos, _subset(test_labels, spec.test_subset, "test")


def normalise_in_place(train: Split, splits: list[Split]) -> tuple[list[float], list[float]]:
    """Scale uint8 pixels to [0, 1], then subtract the training images' per-channel mean and divide
    by their std; returns (mean, std), which a user of an exported net needs to feed it."""
    for split in splits:
        split.x = _as_float(split.x)
    mean, std = _channel_stats(train.x)
    for split in splits:
        # In place: every tensor here belongs to this load, and CIFAR's float copy is 600 MB.
        split.x.sub_(mean.view(1, -1, 1, 1)).div_(std.view(1, -1, 1, 1))
    return mean.tolist(), std.tolist()


def take(split: Split, positions: np.ndarray) -> Split:
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


def reason(err: BaseException) -> str:
    text = str(err).strip().splitlines()
    first = text[0] if text else ""
    return f"{type(err).__name__}: {first[:160]}" if first else type(err).__name__


def torchvision_download(class_name: str, root: Path, title: str, hint: str, looked: str | None = None) -> None:
    """Fetch a dataset with torchvision's class of that name into `root`; any failure is one line
    naming where the files were looked for (`looked`, else `root`)."""
    try:
        import torchvision.datasets

        root.mkdir(parents=True, exist_ok=True)
        # torchvision may print progress; stdout carries the tool's results only.
        with contextlib.redirect_stdout(sys.stderr):
            getattr(torchvision.datasets, class_name)(root=str(root), train=True, download=True)
    except Exception as err:  # noqa: BLE001 - any failure means "not available"; say why in one line
        raise UserError(f"{title} not found in {looked or root} and could not be downloaded ({reason(err)}): "
                        f"{hint}") from None
