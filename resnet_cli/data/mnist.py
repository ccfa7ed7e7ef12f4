"""MNIST, Fashion-MNIST and KMNIST from their four IDX files (downloaded only when asked).

Where the files are looked for, in order: `data.dir` itself and its subfolders `<name>/` and
`<Class>/raw/` (when data.dir is given, only there); else the same two subfolders of the cache directory ($RESNET_DATA, else
~/.cache/resnet-cli): `fashion-mnist/` and `FashionMNIST/raw/` (where torchvision's dataset classes
download); the Debian package's folder (`apt-get install dataset-fashion-mnist` puts the files in
/usr/share/datasets/fashion-mnist). The files may be gzipped or not.
"""

from __future__ import annotations

from pathlib import Path
from typing import NamedTuple

import torch

from ..errors import UserError
from .idx import read_pair
from .splits import Raw, Split, cache_dir, given_dir, torchvision_download

DEBIAN_ROOT = Path("/usr/share/datasets")  # Debian's dataset-* packages install below it
FILES = {
    "train": ("train-images-idx3-ubyte", "train-labels-idx1-ubyte"),
    "test": ("t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte"),
}


class _Format(NamedTuple):
    title: str
    folder: str  # the Debian package's folder and our subfolder name
    torchvision_class: str
    page: str  # where a user downloads the files by hand


_FORMATS = {
    "mnist": _Format("MNIST", "mnist", "MNIST", "https://yann.lecun.com/exdb/mnist/"),
    "fashion_mnist": _Format("Fashion-MNIST", "fashion-mnist", "FashionMNIST",
                             "https://github.com/zalandoresearch/fashion-mnist"),
    "kmnist": _Format("KMNIST", "kmnist", "KMNIST", "https://github.com/rois-codh/kmnist"),
}
NUM_CLASSES = 10


def read(spec) -> Raw:
    fmt = _FORMATS[spec.dataset]
    folders = search_path(spec)
    folder = find(fmt, folders)
    if folder is None:
        looked = ", ".join(map(str, folders))
        if not spec.download:
            raise UserError(f"{fmt.title} not found in {looked} and data.download is off: {_hint(fmt)}")
        # Into data.dir (else the cache directory): its `<Class>/raw/`, where the next run finds the files.
        root = given_dir(spec, fmt.title) or cache_dir()
        torchvision_download(fmt.torchvision_class, root, fmt.title, _hint(fmt), looked)
        folder = find(fmt, [root / fmt.torchvision_class / "raw"])
        if folder is None:
            raise UserError(f"{fmt.title} was downloaded into {root} but its files are missing: {_hint(fmt)}")
    return Raw(_split(folder, "train"), _split(folder, "test"), NUM_CLASSES, normalise=True,
               source=str(folder.resolve()))


def search_path(spec) -> list[Path]:
    """The folders looked in, first to last. The four files have the same names in every dataset
    of the family, so only the folder that `data.dir` names may hold them loose; elsewhere they
    must sit in the dataset's own subfolder. A given `data.dir` is the only place looked in: the
    user named where the data is, so another copy is never read in its place."""
    fmt = _FORMATS[spec.dataset]
    own = (fmt.folder, f"{fmt.torchvision_class}/raw")
    given = given_dir(spec, fmt.title)
    if given is not None:
        return [given, *(given / sub for sub in own)]
    return [*(cache_dir() / sub for sub in own), DEBIAN_ROOT / fmt.folder]


def find(fmt: _Format, folders: list[Path]) -> Path | None:
    """The first folder that holds all four files; None when none does. A folder with only some
    of them is an error, not something to skip: the user put them there."""
    for folder in folders:
        present = {name: _file(folder, name) for names in FILES.values() for name in names}
        if all(present.values()):
            return folder
        if any(present.values()):
            missing = ", ".join(name for name, path in present.items() if path is None)
            raise UserError(f"{fmt.title} in {folder} is incomplete (missing {missing}[.gz]): {_hint(fmt)}")
    return None


def _file(folder: Path, name: str) -> Path | None:
    for path in (folder / name, folder / f"{name}.gz"):
        if path.is_file():
            return path
    return None


def _split(folder: Path, which: str) -> Split:
    images_name, labels_name = FILES[which]
    images, labels = read_pair(_file(folder, images_name), _file(folder, labels_name), NUM_CLASSES)
    # uint8 until after selection, as CIFAR (splits.normalise_in_place makes it float).
    return Split(torch.from_numpy(images).unsqueeze(1), torch.from_numpy(labels))  # (N, 1, 28, 28)


def _hint(fmt: _Format) -> str:
    debian = f"`apt-get install dataset-{fmt.folder}` (Debian), or " if fmt.folder == "fashion-mnist" else ""
    return f"{debian}download the four IDX files from {fmt.page} and pass --data-dir DIR"
