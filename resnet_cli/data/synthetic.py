"""A synthetic image task of tunable difficulty: class templates under shift and clutter."""

from __future__ import annotations

import torch

from .splits import Raw, Split

SOURCE = "generated"

# The synthetic task is a dataset, not a run: its generator seed never changes.
_SYNTHETIC_SEED = 2016


def read(spec) -> Raw:
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
    return Raw(train, test, s.classes, normalise=True, source=SOURCE)


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


def _gather_window(x: torch.Tensor, rows: torch.Tensor, cols: torch.Tensor) -> torch.Tensor:
    """out[n, c, i, j] = x[n, c, rows[n, i], cols[n, j]]: a per-image window, by two gathers."""
    n, c, _, w = x.shape
    h_out, w_out = rows.shape[1], cols.shape[1]
    x = x.gather(2, rows.view(n, 1, h_out, 1).expand(n, c, h_out, w))  # (N, C, H_out, W)
    return x.gather(3, cols.view(n, 1, 1, w_out).expand(n, c, h_out, w_out))  # (N, C, H_out, W_out)
