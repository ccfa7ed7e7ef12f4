"""scikit-learn's 8x8 digits, split as the "Residual Connection" article's digits experiment split them."""

from __future__ import annotations

import numpy as np
import torch

from .splits import Raw, Split

SOURCE = "bundled with scikit-learn"


def read(spec) -> Raw:
    """scikit-learn's 8x8 digits with that experiment's split (stratified 80/20, random_state 0): 1,437 train / 360 test."""
    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split

    digits = load_digits()
    x = torch.tensor(digits.images / 16.0, dtype=torch.float32).unsqueeze(1)  # (1797, 1, 8, 8)
    y = torch.tensor(digits.target, dtype=torch.int64)
    idx_tr, idx_te = train_test_split(np.arange(len(y)), test_size=0.2, random_state=0, stratify=digits.target)
    idx_tr, idx_te = torch.from_numpy(idx_tr), torch.from_numpy(idx_te)
    return Raw(Split(x[idx_tr], y[idx_tr]), Split(x[idx_te], y[idx_te]), 10, normalise=False, source=SOURCE)
