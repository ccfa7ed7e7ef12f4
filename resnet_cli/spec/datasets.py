"""What each dataset is, known without reading it: its shape and its default augmentation.

Plain tables, no torch: the spec (dry runs, parameter counts, `augment: auto`) reads them before
any data is loaded, and the readers in data/ hold the rest.
"""

from __future__ import annotations

MNIST_FAMILY = ("mnist", "fashion_mnist", "kmnist")  # 28x28 grey images in IDX files
DATASETS = ("digits", "synthetic", "cifar10", "cifar100", "imagenet", *MNIST_FAMILY)

# (input channels, classes); synthetic's come from its own section of the spec.
DATASET_SHAPES = {
    "digits": (1, 10), "cifar10": (3, 10), "cifar100": (3, 100), "imagenet": (3, 1000),
    "mnist": (1, 10), "fashion_mnist": (1, 10), "kmnist": (1, 10),
}
# The side of each dataset's square images (a ViT's patch must divide it); synthetic and ImageNet
# folders set theirs in the spec.
IMAGE_SIDES = {"digits": 8, "cifar10": 32, "cifar100": 32, "mnist": 28, "fashion_mnist": 28, "kmnist": 28}

# `data.augment: auto` and `data.pad: auto`, per dataset: (mode, pad). He 2016a sec. 4.2 pads
# CIFAR's 32x32 images by 4 and crops and flips. The MNIST family's 28x28 images take pad 2 (the
# same share of the image, and the classic 32x32 LeNet framing of MNIST); only Fashion-MNIST is
# flipped: a mirrored garment is the same garment, a mirrored digit or kana is another symbol.
# The sklearn digits keep the "Residual Connection" article's unaugmented 8x8 images (pad 4 only
# matters if a spec asks for crops; it was every dataset's pad before the MNIST family came).
AUTO_AUGMENT: dict[str, tuple[str, int]] = {
    "digits": ("none", 4), "synthetic": ("none", 4),
    "cifar10": ("crop_flip", 4), "cifar100": ("crop_flip", 4), "imagenet": ("crop_flip", 4),
    "fashion_mnist": ("crop_flip", 2), "mnist": ("crop", 2), "kmnist": ("crop", 2),
}

# Class names by label index, as the datasets' own documentation lists them (CIFAR-10's
# batches.meta, Fashion-MNIST's and Kuzushiji-MNIST's READMEs; KMNIST's hiragana romanised).
# CIFAR-100's 100 names are read from its `meta` file; synthetic classes and image folders are
# named by their index and their folder names.
_DIGITS = tuple(str(i) for i in range(10))
CLASS_NAMES: dict[str, tuple[str, ...]] = {
    "digits": _DIGITS, "mnist": _DIGITS,
    "cifar10": ("airplane", "automobile", "bird", "cat", "deer", "dog", "frog", "horse", "ship", "truck"),
    "fashion_mnist": ("T-shirt/top", "Trouser", "Pullover", "Dress", "Coat", "Sandal", "Shirt", "Sneaker", "Bag",
                      "Ankle boot"),
    "kmnist": ("o", "ki", "su", "tsu", "na", "ha", "ma", "ya", "re", "wo"),
}

# How a dataset's files become the tensors its nets read, before `mean`/`std` (data.Data): what a
# user of an exported net must do to an image to classify it.
PIXELS: dict[str, str] = {
    "digits": "scikit-learn's load_digits().images (8x8 grey, 0..16) divided by 16; no mean/std",
    "synthetic": "the synthetic task's float images (data.synthetic), as generated",
    "cifar10": "32x32 RGB uint8 pixels divided by 255",
    "cifar100": "32x32 RGB uint8 pixels divided by 255",
    "mnist": "28x28 grey uint8 pixels divided by 255",
    "fashion_mnist": "28x28 grey uint8 pixels divided by 255",
    "kmnist": "28x28 grey uint8 pixels divided by 255",
    "imagenet": "RGB, shorter side resized to image_size*256/224, centre crop image_size, divided by 255",
}
