"""Whole-batch augmentation on the batch's own device (He 2016a sec. 4.2: pad, random crop, flip;
DeVries & Taylor 2017: Cutout)."""

from __future__ import annotations

import torch
import torch.nn.functional as F

AUGMENT_MODES = ("none", "flip", "crop", "crop_flip")


def check_mode(mode: str) -> None:
    if mode not in AUGMENT_MODES:
        raise ValueError(f"augment mode '{mode}' is not one of {', '.join(AUGMENT_MODES)}")


def augment_batch(x: torch.Tensor, mode: str, pad: int, generator: torch.Generator, cutout: int = 0
                  ) -> torch.Tensor:
    """Augment a whole (N, C, H, W) batch on its own device, without a per-image loop.

    He 2016a sec. 4.2: pad 4 pixels on each side, take a random 32x32 crop, flip horizontally at
    random. Padding is with zeros of the normalised images, i.e. with the mean pixel. The crop
    offsets are drawn first, then the flips, then the Cutout centres (`cutout` > 0); all draws come
    from `generator`, so turning Cutout on leaves every crop and flip as it was.
    """
    check_mode(mode)
    if mode == "none" and not cutout:
        return x
    p = pad if mode in ("crop", "crop_flip") else 0
    source = F.pad(x, (p, p, p, p)) if p else x
    return augment_from(source, torch.arange(len(x), device=x.device), mode, p, generator, cutout)


def augment_from(source: torch.Tensor, idx: torch.Tensor, mode: str, pad: int,
                 generator: torch.Generator, cutout: int = 0) -> torch.Tensor:
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
    if cutout:
        x = cutout_(x, cutout, generator)
    return x


def cutout_(x: torch.Tensor, size: int, generator: torch.Generator) -> torch.Tensor:
    """DeVries & Taylor 2017: zero one size x size square of every image, its centre uniform over
    the image and the square clipped at the borders (so a square near an edge covers less), the
    same square on every channel. Zero is the mean pixel of normalised images, as in their code,
    which masks after normalising. Writes into x (callers pass a fresh copy)."""
    n, _, h, w = x.shape
    dev = x.device
    cy = torch.randint(0, h, (n,), generator=generator, device=dev)
    cx = torch.randint(0, w, (n,), generator=generator, device=dev)
    top, left = cy - size // 2, cx - size // 2  # rows top..top+size-1: an even size centres as theirs
    rows = torch.arange(h, device=dev).view(1, h)
    cols = torch.arange(w, device=dev).view(1, w)
    in_rows = (rows >= top.view(n, 1)) & (rows < top.view(n, 1) + size)  # (N, H)
    in_cols = (cols >= left.view(n, 1)) & (cols < left.view(n, 1) + size)  # (N, W)
    hole = in_rows.view(n, 1, h, 1) & in_cols.view(n, 1, 1, w)  # (N, 1, H, W)
    return x.masked_fill_(hole, 0.0)


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
