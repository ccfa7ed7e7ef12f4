"""Loss landscape (Li et al. 2018, "Visualizing the Loss Landscape of Neural Nets"): the training
loss and accuracy at theta* + a d1 (+ b d2) for filter-normalised random directions d1, d2 around
the trained weights theta*.

Choices, each one of several reasonable ones:

- Filter normalisation (Li et al. sec. 4): a Gaussian direction, each filter (one output channel
  of a conv, one row of the fc layer) rescaled to the norm of the same filter of theta*, so that a
  step of 1 means "as large as the weights" in every layer, whatever BN's scale invariance did to
  their norms. Biases and BN's gamma/beta get a zero direction (their "ignore biasbn" setting).
- BN evaluates in eval mode with the trained running statistics, as Li et al.'s code does
  (`net.eval()`); recomputing statistics at every grid point would change the function being
  plotted from one point to the next and cost a training-mode pass per point.
- The loss is measured on a fixed subset of the training split (the landscape of the objective the
  optimiser saw), the first N images of a fixed shuffle independent of the direction seed, so that
  two runs on the same data are compared on the same images.

"Smooth vs chaotic" as numbers, not just a picture (measured on the loss grid):
- local_minima: strict interior local minima (2 neighbours in 1-D, 8 in 2-D); 1 for one valley.
- tv_ratio: total variation over range of log(loss) along each grid line (mean over the lines in
  2-D); a single valley gives 1 to 2, every extra bump adds about twice its height over the range.
- nonconvex_fraction: interior points where the finite-difference curvature of the loss (second
  difference in 1-D, the smaller eigenvalue of the 2x2 finite-difference Hessian in 2-D) is
  negative beyond float32 rounding; Li et al. (Fig. 8) map |lambda_min / lambda_max| of the
  Hessian for the same idea.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from ..errors import UserError
from .trained import Trained

SUBSET_SEED = 0  # the fixed shuffle the --samples subset is taken from: a property of the data


def random_direction(model: nn.Module, generator: torch.Generator) -> list[torch.Tensor]:
    """One filter-normalised Gaussian direction, a tensor per parameter (named_parameters order)."""
    out = []
    for w in model.parameters():
        d = torch.randn(w.shape, generator=generator, dtype=torch.float32).to(w.device, w.dtype)
        if w.dim() <= 1:
            d.zero_()  # biases, BN gamma and beta (Li et al.: "ignore biasbn")
        else:
            # filter i is d[i]: an output channel of a conv, a row of a linear layer
            w_norm = w.detach().flatten(1).norm(dim=1)
            d_norm = d.flatten(1).norm(dim=1)
            d.mul_((w_norm / (d_norm + 1e-10)).view(-1, *([1] * (w.dim() - 1))))
        out.append(d)
    return out


def training_subset(trained: Trained, samples: int) -> tuple[torch.Tensor, torch.Tensor]:
    train = trained.data.train
    if train is None:
        raise UserError(f"{trained.path}: landscape needs in-memory data (digits, synthetic, cifar); "
                        f"{trained.spec.data.dataset} image folders are not supported")
    n = min(samples, len(train))
    order = torch.randperm(len(train), generator=torch.Generator().manual_seed(SUBSET_SEED))[:n]
    return train.x[order].to(trained.device), train.y[order].to(trained.device)


@torch.no_grad()
def _loss_acc(model: nn.Module, x: torch.Tensor, y: torch.Tensor, batch: int = 1000) -> tuple[float, float]:
    loss = torch.zeros((), device=x.device)
    right = torch.zeros((), device=x.device)
    for i in range(0, len(y), batch):
        out = model(x[i:i + batch]).float()
        loss += F.cross_entropy(out, y[i:i + batch], reduction="sum")
        right += (out.argmax(1) == y[i:i + batch]).sum()
    return loss.item() / len(y), 100.0 * right.item() / len(y)


def scan(trained: Trained, *, dims: int, lo: float, hi: float, points: int, samples: int, seed: int,
         log: Callable[[str], None] | None = None) -> dict:
    """Loss and accuracy on a points (x points) grid over [lo, hi]; the weights are restored after."""
    if dims not in (1, 2):
        raise UserError(f"--dims {dims}: give 1 (a line) or 2 (a plane)")
    if points < 3:
        raise UserError(f"--points {points}: at least 3 grid points are needed")
    if not lo < hi:
        raise UserError(f"--range {lo} {hi}: the first value must be below the second")
    tick = time.perf_counter()
    model = trained.model.eval()
    x, y = training_subset(trained, samples)
    gen = torch.Generator().manual_seed(seed)
    dirs = [random_direction(model, gen) for _ in range(dims)]
    params = list(model.parameters())
    theta = [p.detach().clone() for p in params]
    grid = np.linspace(lo, hi, points)
    coords = [(a, 0.0) for a in grid] if dims == 1 else [(a, b) for b in grid for a in grid]
    center_loss, center_acc = _loss_acc(model, x, y)
    rows = []
    try:
        for n, (a, b) in enumerate(coords):
            with torch.no_grad():
                for i, p in enumerate(params):
                    w = theta[i] + float(a) * dirs[0][i]
                    if dims == 2:
                        w = w + float(b) * dirs[1][i]
                    p.copy_(w)
            loss, acc = _loss_acc(model, x, y)
            row = {"alpha": float(a), "loss": loss, "accuracy": acc}
            if dims == 2:
                row["beta"] = float(b)
            rows.append(row)
            if log and (n + 1) % max(10, len(coords) // 10) == 0:
                log(f"{trained.label}: {n + 1}/{len(coords)} points")
    finally:
        with torch.no_grad():
            for p, w in zip(params, theta):
                p.copy_(w)
    losses = np.array([r["loss"] for r in rows])
    if dims == 2:
        losses = losses.reshape(points, points)  # [beta index, alpha index]
    return {
        "run": str(trained.path), "label": trained.label, "residual": trained.residual, "dims": dims,
        "grid": grid.tolist(), "points": rows, "samples": len(y), "seed": seed,
        "bn": "eval (trained running statistics)", "center": {"loss": center_loss, "accuracy": center_acc},
        "measures": measures(losses), "wall_s": time.perf_counter() - tick,
    }


# ---------------------------------------------------------------------------------------------
# Smooth vs chaotic, as numbers


def _tol(loss: np.ndarray) -> np.ndarray:
    """Per interior point: curvature below 1e-5 of the largest loss in its neighbourhood is float32
    rounding, not shape. Local, so the huge losses far out do not hide the shape near the minimum."""
    a = np.abs(loss)
    if loss.ndim == 1:
        return 1e-5 * np.maximum.reduce([a[:-2], a[1:-1], a[2:]])
    n0, n1 = loss.shape
    return 1e-5 * np.maximum.reduce([a[1 + i:n0 - 1 + i, 1 + j:n1 - 1 + j] for i in (-1, 0, 1) for j in (-1, 0, 1)])


def tv_ratio(line: np.ndarray) -> float:
    """Total variation over range of log(loss): 1 for a monotone line, 1 to 2 for one valley, and
    each extra bump adds about twice its height. The log (monotone, so a valley stays a valley)
    lets a bump near the minimum count as much as the walls far out, where the loss is 1000x larger."""
    line = np.log(np.maximum(line, 1e-12))
    span = float(line.max() - line.min())
    return float(np.abs(np.diff(line)).sum()) / span if span > 0 else 1.0


def measures(loss: np.ndarray) -> dict:
    loss = np.asarray(loss, dtype=float)
    if not np.isfinite(loss).all():  # an exploded point: count it as 10x the worst finite loss
        finite = loss[np.isfinite(loss)]
        loss = np.where(np.isfinite(loss), loss, 10 * finite.max() if finite.size else 1e30)
    tol = _tol(loss)
    if loss.ndim == 1:
        mid = loss[1:-1]
        minima = int(((mid < loss[:-2]) & (mid < loss[2:])).sum())
        d2 = loss[:-2] - 2 * mid + loss[2:]
        nonconvex = float((d2 < -tol).mean())
        ratio = tv_ratio(loss)
    else:
        c = loss[1:-1, 1:-1]
        neighbours = [loss[1 + di:loss.shape[0] - 1 + di, 1 + dj:loss.shape[1] - 1 + dj]
                      for di in (-1, 0, 1) for dj in (-1, 0, 1) if (di, dj) != (0, 0)]
        minima = int(np.logical_and.reduce([c < nb for nb in neighbours]).sum())
        # finite-difference Hessian (grid spacing cancels in the sign of its eigenvalues)
        lxx = loss[1:-1, 2:] - 2 * c + loss[1:-1, :-2]
        lyy = loss[2:, 1:-1] - 2 * c + loss[:-2, 1:-1]
        lxy = (loss[2:, 2:] - loss[2:, :-2] - loss[:-2, 2:] + loss[:-2, :-2]) / 4
        lam_min = (lxx + lyy) / 2 - np.sqrt(((lxx - lyy) / 2) ** 2 + lxy ** 2)
        nonconvex = float((lam_min < -tol).mean())
        ratio = float(np.mean([tv_ratio(r) for r in loss] + [tv_ratio(col) for col in loss.T]))
    return {"local_minima": minima, "tv_ratio": ratio, "nonconvex_fraction": nonconvex,
            "loss_min": float(loss.min()), "loss_max": float(loss.max())}


# ---------------------------------------------------------------------------------------------
# Figures


def _log_loss(r: dict) -> np.ndarray:
    n = len(r["grid"])
    return np.log10(np.array([p["loss"] for p in r["points"]]).reshape(n, n))


def contour_levels(results: list[dict], count: int = 25) -> np.ndarray:
    """`count` evenly spaced log10(loss) levels spanning every 2-D result's surface together."""
    z = np.concatenate([_log_loss(r).ravel() for r in results])
    lo, hi = float(z.min()), float(z.max())
    return np.linspace(lo, hi if hi > lo else lo + 1e-6, count)


def figure(results: list[dict], path: str | Path) -> Path:
    """1-D: loss (log scale, left) and accuracy (right) against the step along d1, one curve per run
    (Li et al. Fig. 2 style). 2-D: one contour panel of log10(loss) per run (their Fig. 5), all on the
    same levels, with one colour bar."""
    from .. import figures

    plt = figures.pyplot()
    if results and results[0]["dims"] == 2:
        fig, axes = plt.subplots(1, len(results), figsize=(4.6 * len(results), 4.2), squeeze=False,
                                 layout="constrained")
        # One set of levels and one colour bar for every panel: the same colour is the same loss, so
        # the panels compare by eye (a plain net's chaotic surface against a ResNet's valley).
        levels = contour_levels(results)
        norm = plt.Normalize(levels[0], levels[-1])
        for ax, r in zip(axes[0], results):
            g = np.array(r["grid"])
            cs = ax.contour(g, g, _log_loss(r), levels=levels, cmap="viridis", norm=norm, linewidths=0.8)
            ax.clabel(cs, cs.levels[::4], fontsize=6, fmt="%.1f")
            ax.plot([0], [0], "r+", ms=10)
            m = r["measures"]
            ax.set(xlabel="d1", ylabel="d2", aspect="equal",
                   title=f"{r['label']}: log10 loss\nminima {m['local_minima']}, TV/range {m['tv_ratio']:.2f}, "
                         f"non-convex {100 * m['nonconvex_fraction']:.0f}%")
            ax.grid(False)
        bar = fig.colorbar(plt.cm.ScalarMappable(norm=norm, cmap="viridis"), ax=list(axes[0]), shrink=0.85)
        bar.set_label("log10 training loss")
    else:
        fig, ax = plt.subplots(figsize=(6, 4))
        acc_ax = ax.twinx()
        for i, r in enumerate(results):
            style = figures.STYLE["residual" if r["residual"] else "plain"]
            a = [p["alpha"] for p in r["points"]]
            m = r["measures"]
            ax.plot(a, [p["loss"] for p in r["points"]], color=f"C{i}", lw=1.8, **style,
                    label=f"{r['label']} loss (minima {m['local_minima']}, TV/range {m['tv_ratio']:.2f})")
            acc_ax.plot(a, [p["accuracy"] for p in r["points"]], color=f"C{i}", lw=0.8, alpha=0.6, **style,
                        label=f"{r['label']} accuracy")
        ax.set_yscale("log")
        ax.set(xlabel="step along filter-normalised direction d1", ylabel="training loss (log)",
               title="loss (bold) and accuracy (thin) around the trained weights")
        acc_ax.set_ylabel("training accuracy (%)")
        acc_ax.set_ylim(0, 100)
        acc_ax.grid(False)
        lines = ax.get_legend_handles_labels()
        more = acc_ax.get_legend_handles_labels()
        ax.legend(lines[0] + more[0], lines[1] + more[1], fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.15),
                  ncol=2)
    return figures.save(fig, path)
