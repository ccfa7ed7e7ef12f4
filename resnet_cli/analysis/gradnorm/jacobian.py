"""Jacobian gains by power iteration: the largest singular value of d(output)/d(input) of a stack of
blocks, with one Jacobian-vector and one vector-Jacobian product per step; J itself is never built.
The toy: 30 conv-ReLU-conv blocks on one 8x8 digit, plain against residual (He 2016b sec. 3).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from typing import Any

import torch

def spectral_norm(f: Callable[[torch.Tensor], torch.Tensor], x: torch.Tensor, iters: int = 500,
                  tol: float = 1e-10, generator: torch.Generator | None = None) -> float:
    """Largest singular value of J = df/dx at x, by power iteration on J^T J.

    Each step is one Jacobian-vector product (forward mode) and one vector-Jacobian product
    (reverse mode, its graph built once): memory is that of two passes, never of the full matrix,
    so it scales to a whole net's input. The estimate is ||J v|| for the current unit vector v; v is
    renormalised every step, so gains as small as 1e-40 stay representable in float64. Stops when
    the estimate changes by less than `tol` (relative)."""
    import warnings

    from torch.func import jvp, vjp

    with warnings.catch_warnings():
        # Forward-mode AD of conv2d scripts a decomposition on first use, and torch 2.14 warns that
        # torch.jit.script is deprecated: noise about torch's internals, not about this computation.
        warnings.filterwarnings("ignore", message=".*torch.jit.script.*", category=FutureWarning)
        return _power_iteration(f, x, iters, tol, generator, jvp, vjp)


def _power_iteration(f, x, iters, tol, generator, jvp, vjp) -> float:
    _, pullback = vjp(f, x)
    v = torch.randn(x.shape, dtype=x.dtype, device=x.device, generator=generator)
    v = v / v.norm()
    sigma = 0.0
    for _ in range(iters):
        _, jv = jvp(f, (x,), (v,))  # J v
        new = jv.norm().item()  # Rayleigh quotient: sqrt(v^T J^T J v) for the unit vector v
        if new == 0.0 or not math.isfinite(new):
            return new
        (w,) = pullback(jv)  # J^T J v
        v = w / w.norm()
        if abs(new - sigma) <= tol * new:
            return new
        sigma = new
    return sigma


def toy_image(generator: torch.Generator, noise: float = 0.01) -> torch.Tensor:
    """The article's input: scikit-learn digit 3 (pixels / 16) plus faint noise, so that no
    pre-activation sits exactly on ReLU's kink. (8, 8) float64."""
    from ...data.digits import all_digits

    x = torch.tensor(all_digits()[0][3] / 16.0, dtype=torch.float64)
    return x + noise * torch.randn(x.shape, dtype=torch.float64, generator=generator)


def toy_stack(kernels: torch.Tensor, residual: bool) -> Callable[[torch.Tensor], torch.Tensor]:
    """x -> 30 blocks of y = [x +] conv(relu(conv(x, k1)), k2): single channel, 3x3, zero 'same'
    padding, no BN. kernels: (blocks, 2, 3, 3)."""
    import torch.nn.functional as F

    def f(x: torch.Tensor) -> torch.Tensor:
        h = x[None, None]  # (1, 1, H, W)
        for k1, k2 in kernels:
            fx = F.conv2d(F.relu(F.conv2d(h, k1[None, None], padding=1)), k2[None, None], padding=1)
            h = h + fx if residual else fx
        return h[0, 0]

    return f


def toy_gains(blocks: Iterable[int] = (30,), stds: Iterable[float] = (0.1, 0.3), seed: int = 0,
              iters: int = 500) -> list[dict[str, Any]]:
    """Plain vs residual gain of the "Residual Connection" article's toy for each kernel std and stack length. The same kernels
    serve both nets; a longer stack extends a shorter one (kernels drawn once per std, for max N)."""
    blocks = sorted(set(blocks))
    g = torch.Generator().manual_seed(seed)
    x0 = toy_image(g)  # then the kernels, from the same stream: one seed fixes the whole toy
    out = []
    for std in stds:
        kernels = std * torch.randn(max(blocks), 2, 3, 3, dtype=torch.float64, generator=g)
        for n in blocks:
            for net in ("plain", "residual"):
                f = toy_stack(kernels[:n], residual=net == "residual")
                gain = spectral_norm(f, x0, iters=iters, generator=torch.Generator().manual_seed(seed))
                out.append({"net": net, "blocks": n, "kernel_std": std, "gain": gain, "seed": seed})
    return out


# The "Residual Connection" article's figures for its digits toy of 30 blocks, shown beside ours.
SEED_GAINS = {("plain", 0.1): 2.4e-39, ("residual", 0.1): 1.7, ("plain", 0.3): 1.0e-15, ("residual", 0.3): 81.0}
