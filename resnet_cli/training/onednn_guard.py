"""A route around a oneDNN defect that corrupts the heap, kept to the layers it hits.

oneDNN's x64 kernels for the weight gradient of a 1x1 convolution (`jit_1x1:avx2`,
`jit_1x1:avx512_core`) handle a stride above one by first copying the strided input pixels into a
workspace ("reduce to unit stride"). For an NHWC (channels_last) input that workspace is booked for
the input's own channel count but written in blocks of 8 channels (AVX2) or 16 (AVX-512), so a
layer with fewer input channels than the block writes past it (uxlfoundation/oneDNN issue 6035,
open; PyTorch 2.13.0 and 2.14.1 ship oneDNN 3.12 with it). The shortcut projections of narrow nets
are such layers: the 1x1 stride-2 convolution of `conv1x1`, `shortcut_gate`, `exclusive_gate` and
`highway` shortcuts at widths below 16. At one thread it ends in `free(): invalid size`, a
segfault, or a run that goes on with a corrupted heap; docs/maintainers.md has the measurements
and tools/onednn_strided_1x1.py reproduces it without this project.

The same kernels are safe on the blocked layout oneDNN picks for contiguous (NCHW) tensors, so only
those layers run in NCHW, with NCHW weights; the rest of the net keeps channels_last.
"""

from __future__ import annotations

import torch
from torch import nn

# The widest channel block of the affected kernels (AVX-512's 16; AVX2's is 8). Applied whatever the
# CPU and thread count: measured here, two threads avoided the crash only because oneDNN then picks
# another work split, which a different core count need not do.
SAFE_CHANNELS = 16


def affected(conv: nn.Module) -> bool:
    """A strided 1x1 convolution over fewer input channels (per group) than oneDNN's channel block."""
    return (isinstance(conv, nn.Conv2d) and conv.kernel_size == (1, 1) and conv.stride != (1, 1)
            and conv.in_channels // conv.groups < SAFE_CHANNELS)


def _contiguous_weight(conv: nn.Conv2d) -> None:
    """A 1x1 kernel's channels_last and contiguous layouts hold the same bytes, but PyTorch chooses
    oneDNN's NHWC path from the weight's strides alone, so they are set to NCHW's (in place: the
    optimizer and the gradient keep the same parameter)."""
    w = conv.weight
    if w.stride() != torch.empty(w.shape, device="meta").stride():
        w.data = w.data.clone(memory_format=torch.contiguous_format)
        if w.grad is not None:
            w.grad = w.grad.clone(memory_format=torch.contiguous_format)


def _to_nchw(conv: nn.Conv2d, args: tuple) -> tuple:
    _contiguous_weight(conv)  # again here: a later `model.to(memory_format=...)` re-strides it
    return (args[0].contiguous(),) + args[1:]


def _to_nhwc(conv: nn.Conv2d, args: tuple, out: torch.Tensor) -> torch.Tensor:
    return out.contiguous(memory_format=torch.channels_last)


def route_around(model: nn.Module, device: torch.device, channels_last: bool) -> list[str]:
    """Run the affected convolutions of `model` in NCHW where it trains on the CPU in channels_last;
    returns their names (empty where nothing needs it: a GPU, NCHW, or no such layer)."""
    if device.type != "cpu" or not channels_last:
        return []
    names = []
    for name, m in model.named_modules():
        if affected(m) and not getattr(m, "_onednn_guarded", False):
            _contiguous_weight(m)
            m.register_forward_pre_hook(_to_nchw)
            m.register_forward_hook(_to_nhwc)
            m._onednn_guarded = True
            names.append(name)
    return names
