"""scikit-learn's 8x8 digits, split as the "Residual Connection" article's digits experiment split them."""

from __future__ import annotations

import base64
import gzip
import importlib.util
from pathlib import Path

import numpy as np
import torch

from . import digits_split
from .splits import Raw, Split

SOURCE = "bundled with scikit-learn"


def read(spec) -> Raw:
    """scikit-learn's 8x8 digits with that experiment's split (stratified 80/20, random_state 0): 1,437 train / 360 test."""
    images, target = all_digits()
    x = torch.tensor(images / 16.0, dtype=torch.float32).unsqueeze(1)  # (1797, 1, 8, 8)
    y = torch.tensor(target, dtype=torch.int64)
    idx_tr, idx_te = (torch.from_numpy(_indices(part).astype(np.int64)) for part in (digits_split.TRAIN, digits_split.TEST))
    return Raw(Split(x[idx_tr], y[idx_tr]), Split(x[idx_te], y[idx_te]), 10, normalise=False, source=SOURCE)


def all_digits() -> tuple[np.ndarray, np.ndarray]:
    """The 1,797 images (8x8, pixels 0-16) and labels from scikit-learn's bundled file, read as its
    `load_digits` reads it but without importing scikit-learn's datasets (and with them SciPy)."""
    found = importlib.util.find_spec("sklearn")
    path = Path(found.submodule_search_locations[0]) / "datasets" / "data" / "digits.csv.gz" if found else None
    if path is None or not path.is_file():  # a scikit-learn that keeps its data elsewhere: ask it
        from sklearn.datasets import load_digits

        bunch = load_digits()
        return bunch.images, bunch.target
    with gzip.open(path, "rt", encoding="utf-8") as f:
        data = np.loadtxt(f, delimiter=",")
    return data[:, :-1].reshape(-1, 8, 8), data[:, -1].astype(int)


def _indices(encoded: str) -> np.ndarray:
    return np.frombuffer(base64.b64decode(encoded), dtype="<u2")
