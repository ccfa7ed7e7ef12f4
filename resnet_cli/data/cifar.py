"""CIFAR-10 and CIFAR-100 from the python-version batch files (downloaded only when asked)."""

from __future__ import annotations

import pickle
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np
import torch

from ..errors import UserError
from .splits import Raw, Split, cache_dir, given_dir, reason, torchvision_download

_CIFAR_URL = "https://www.cs.toronto.edu/~kriz/cifar.html"


class _CifarFormat(NamedTuple):
    title: str
    folder: str
    train_files: tuple[str, ...]
    test_files: tuple[str, ...]
    label_key: str
    num_classes: int
    archive: str
    torchvision_class: str
    meta_file: str  # the class names: label_names / fine_label_names
    names_key: str


_CIFAR = {
    "cifar10": _CifarFormat("CIFAR-10", "cifar-10-batches-py", tuple(f"data_batch_{i}" for i in range(1, 6)),
                            ("test_batch",), "labels", 10, "cifar-10-python.tar.gz", "CIFAR10",
                            "batches.meta", "label_names"),
    "cifar100": _CifarFormat("CIFAR-100", "cifar-100-python", ("train",), ("test",), "fine_labels", 100,
                             "cifar-100-python.tar.gz", "CIFAR100", "meta", "fine_label_names"),
}


def read(spec) -> Raw:
    fmt = _CIFAR[spec.dataset]
    base = given_dir(spec, fmt.title) or cache_dir()
    folder = _find_cifar(fmt, base)
    if folder is None:
        if not spec.download:
            raise UserError(f"{fmt.title} not found in {base} and data.download is off: {_cifar_hint(fmt)}")
        torchvision_download(fmt.torchvision_class, base, fmt.title, _cifar_hint(fmt))
        folder = _find_cifar(fmt, base)
        if folder is None:
            raise UserError(f"{fmt.title} was downloaded into {base} but its batches are missing: {_cifar_hint(fmt)}")
    train = _read_batches(folder, fmt.train_files, fmt)
    test = _read_batches(folder, fmt.test_files, fmt)
    return Raw(train, test, fmt.num_classes, normalise=True, classes=_class_names(folder, fmt),
               source=str(folder.resolve()))


def _class_names(folder: Path, fmt: _CifarFormat) -> tuple[str, ...] | None:
    """The names in the archive's meta file; None (names by index) when it is absent or unreadable:
    the names label results, the images and labels alone define the task."""
    try:
        with open(folder / fmt.meta_file, "rb") as f:
            names = _field(_ArrayUnpickler(f, encoding="bytes").load(), fmt.names_key)
        names = tuple(n.decode() if isinstance(n, bytes) else str(n) for n in names)
    except Exception:  # noqa: BLE001 - missing or foreign meta file: fall back to indices
        return None
    return names if len(names) == fmt.num_classes else None


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
        raise UserError(f"{fmt.title} file {path} is unreadable ({reason(err)}): "
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
