"""What each dataset is, known without reading it: one row per `data.dataset`.

A plain table, no torch: the spec (dry runs, parameter counts, `augment: auto`, a ViT's patch
check) reads it before any data is loaded; the readers in data/ are registered under the row's
`reader` name (data/dataset.py `READERS`) and hold the rest. A new dataset is one row here plus
one registered reader.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from .registry import Column, Registry


@dataclass(frozen=True)
class Dataset:
    reader: str  # the function in data/ that reads it (data.dataset.READERS)
    # Its shape. An int, or the DataSpec key that sets it (synthetic data and ImageNet folders).
    channels: int | str
    classes: int | str
    side: int | str  # the side of its square images (a ViT's patch must divide it)
    # `data.augment: auto` and `data.pad: auto`.
    augment: str
    pad: int
    files: str  # where its files are looked for; for one that reads none, what it is
    pixels: str  # how its files become the tensors its nets read, before `mean`/`std` (export)
    class_names: tuple[str, ...] = ()  # by label index; () : the reader's, or the index
    reads_files: bool = True  # False: a `data.dir` for it is refused (it would be silently ignored)

    def value(self, field: str, data: Any) -> int:
        """A shape field, read from the DataSpec `data` where the row names a key."""
        v = getattr(self, field)
        if isinstance(v, str):
            for part in v.split("."):
                data = getattr(data, part)
            return data
        return v


DATASETS: Registry[Dataset] = Registry("dataset")

# `auto` augmentation: He 2016a sec. 4.2 pads CIFAR's 32x32 images by 4 and crops and flips. The
# MNIST family's 28x28 images take pad 2 (the same share of the image, and the classic 32x32 LeNet
# framing of MNIST); only Fashion-MNIST is flipped: a mirrored garment is the same garment, a
# mirrored digit or kana is another symbol. The sklearn digits keep the "Residual Connection"
# article's unaugmented 8x8 images (pad 4 only matters if a spec asks for crops; it was every
# dataset's pad before the MNIST family came).
# Class names as the datasets' own documentation lists them (CIFAR-10's batches.meta,
# Fashion-MNIST's and Kuzushiji-MNIST's READMEs; KMNIST's hiragana romanised). CIFAR-100's 100
# names are read from its `meta` file; synthetic classes and image folders are named by their
# index and their folder names.
_DIGITS = tuple(str(i) for i in range(10))
_CACHE = "data.dir, else $RESNET_DATA or ~/.cache/resnet-cli"
_IDX = "28x28 grey uint8 pixels divided by 255"
_CIFAR = "32x32 RGB uint8 pixels divided by 255"
_add = DATASETS.register
_add("digits")(Dataset(
    "digits", 1, 10, 8, "none", 4, "bundled with scikit-learn",
    "scikit-learn's load_digits().images (8x8 grey, 0..16) divided by 16; no mean/std",
    class_names=_DIGITS, reads_files=False))
_add("synthetic")(Dataset(
    "synthetic", "synthetic.channels", "synthetic.classes", "synthetic.image_size", "none", 4, "generated",
    "the synthetic task's float images (data.synthetic), as generated", reads_files=False))
_add("cifar10")(Dataset(
    "cifar", 3, 10, 32, "crop_flip", 4, f"cifar-10-batches-py/ in {_CACHE}", _CIFAR,
    class_names=("airplane", "automobile", "bird", "cat", "deer", "dog", "frog", "horse", "ship", "truck")))
_add("cifar100")(Dataset("cifar", 3, 100, 32, "crop_flip", 4, f"cifar-100-python/ in {_CACHE}", _CIFAR))
_add("imagenet")(Dataset(
    "folders", 3, 1000, "image_size", "crop_flip", 4, f"train/<class>/ and val/<class>/ in {_CACHE} (imagenet/)",
    "RGB, shorter side resized to image_size*256/224, centre crop image_size, divided by 255"))
_add("mnist")(Dataset("mnist", 1, 10, 28, "crop", 2, f"the IDX files in {_CACHE} (mnist/)", _IDX,
                      class_names=_DIGITS))
_add("fashion_mnist")(Dataset(
    "mnist", 1, 10, 28, "crop_flip", 2, f"the IDX files in {_CACHE} (fashion-mnist/)", _IDX,
    class_names=("T-shirt/top", "Trouser", "Pullover", "Dress", "Coat", "Sandal", "Shirt", "Sneaker", "Bag",
                 "Ankle boot")))
_add("kmnist")(Dataset("mnist", 1, 10, 28, "crop", 2, f"the IDX files in {_CACHE} (kmnist/)", _IDX,
                       class_names=("o", "ki", "su", "tsu", "na", "ha", "ma", "ya", "re", "wo")))

# Single columns, read live, for the code that indexes them by name.
AUTO_AUGMENT: Mapping[str, tuple[str, int]] = Column(DATASETS, lambda d: (d.augment, d.pad))
PIXELS: Mapping[str, str] = Column(DATASETS, lambda d: d.pixels)


def shape_of(data: Any) -> tuple[int, int]:
    """(input channels, classes) of a DataSpec's dataset."""
    row = DATASETS[data.dataset]
    return row.value("channels", data), row.value("classes", data)


def chance_error(data: Any) -> float:
    """The test error (%) of a net that guesses, 100 (1 - 1/classes): what a diverged run counts as
    in every study table (He 2016b counts a net that does not train as a failed run, never leaves
    it out; a NaN net's predictions are no better than a guess)."""
    return 100.0 * (1.0 - 1.0 / shape_of(data)[1])
