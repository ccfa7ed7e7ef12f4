"""Lesion study (Veit et al. 2016, "Residual Networks Behave Like Ensembles of Relatively Shallow
Networks", sec. 4): delete residual units from a trained net at test time and measure test error.

What "delete" means here:

- In a net with shortcuts, a unit keeps its shortcut and loses its branch: `branch` is replaced by
  `ZeroBranch`, which returns F(x) = 0 of the branch's output shape, so the unit computes
  post(combine(x, skip(x), 0)). For the identity shortcut that is post(skip(x)) (Veit et al.:
  "leaving the skip connection, or downsampling projection, untouched"); for scaled or gated
  shortcuts (He 2016b Table 1) it is still the shortcut path, scaled or gated as trained. The
  unit's pre-activation and after-addition function stay, with their trained running statistics.
- In a plain net (shortcut `none`) there is no shortcut to keep, and a zero branch would zero the
  whole signal. As Veit et al. did for VGG, we delete a whole unit instead where its input and
  output shapes match (the unit becomes the identity); units that change width or resolution cannot
  be deleted and are reported as such.

Errors are measured on the test split with BN in eval mode (the trained running statistics), the
single original view, as `resnet train` reports its own test error. Unit indices are 1-based.
"""

from __future__ import annotations

import contextlib
import itertools
import math
import statistics
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np
import torch
from torch import nn
from torch.nn import functional as F

from ..model.shortcuts import NoShortcut
from ..training.probes import unit_labels
from ..spec import units_per_stage
from .trained import Trained, runtime_for


class ZeroBranch(nn.Module):
    """Stands in for a deleted branch: F(x) = 0, shaped like the branch's output.

    Every branch's spatial output is ceil(H / stride): a 3x3 conv with padding 1 and a 1x1 conv
    without padding both give floor((H - 1) / s) + 1, as does option A's x[::s]."""

    def __init__(self, out_channels: int, stride: int):
        super().__init__()
        self.out_channels, self.stride = out_channels, stride

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        n, _, h, w = x.shape
        s = self.stride
        return x.new_zeros(n, self.out_channels, -(-h // s), -(-w // s))  # (N, C_out, H/s, W/s)

    def extra_repr(self) -> str:
        return f"out_channels={self.out_channels}, stride={self.stride}"


def has_shortcut(unit: nn.Module) -> bool:
    return not isinstance(unit.combine, NoShortcut)


def changes_shape(unit: nn.Module) -> bool:
    """A downsampling unit: stride 2 or a change of width (He 2016a's dotted shortcuts)."""
    return unit.stride != 1 or unit.in_channels != unit.out_channels


def can_delete(unit: nn.Module) -> bool:
    return has_shortcut(unit) or not changes_shape(unit)


def describe_units(trained: Trained) -> list[dict]:
    """One row per unit: 1-based index, stage, shapes, and how (or whether) it can be deleted."""
    stage_of = [s + 1 for s, n in enumerate(units_per_stage(trained.spec.model)) for _ in range(n)]
    names = unit_labels(trained.model)
    rows = []
    for i, unit in enumerate(trained.model.units):
        how = "branch->0" if has_shortcut(unit) else ("unit->identity" if can_delete(unit) else None)
        rows.append({"unit": i + 1, "name": names[i], "stage": stage_of[i],
                     "in_channels": unit.in_channels, "out_channels": unit.out_channels, "stride": unit.stride,
                     "downsampling": changes_shape(unit), "deletable": how is not None, "deletion": how})
    return rows


@contextlib.contextmanager
def lesioned(model: nn.Module, indices: list[int]) -> Iterator[nn.Module]:
    """The model with the units at these 0-based indices deleted; restored on exit."""
    saved: dict[int, tuple[str, nn.Module]] = {}
    try:
        for i in indices:
            unit = model.units[i]
            if has_shortcut(unit):
                saved[i] = ("branch", unit.branch)
                unit.branch = ZeroBranch(unit.out_channels, unit.stride)
            elif can_delete(unit):
                saved[i] = ("unit", unit)
                model.units[i] = nn.Identity()
            else:
                raise ValueError(f"unit {i + 1} changes shape ({unit.in_channels}->{unit.out_channels}, "
                                 f"stride {unit.stride}) and has no shortcut: it cannot be deleted")
        yield model
    finally:
        for i, (what, module) in saved.items():
            if what == "branch":
                model.units[i].branch = module
            else:
                model.units[i] = module


def _subsets(n: int, k: int, draws: int, rng: np.random.Generator) -> list[tuple[int, ...]]:
    """`draws` distinct k-subsets of range(n) at random, or all of them when there are no more."""
    if math.comb(n, k) <= draws:
        return list(itertools.combinations(range(n), k))
    seen: set[tuple[int, ...]] = set()
    out = []
    while len(out) < draws:
        pick = tuple(sorted(rng.choice(n, size=k, replace=False).tolist()))
        if pick not in seen:
            seen.add(pick)
            out.append(pick)
    return out


def errors(model: nn.Module, data, rt, picks: list[tuple[int, ...]], batch_size: int = 1000
           ) -> list[tuple[float, float]]:
    """Test loss and error (%) with each pick of units (0-based indices) deleted; () is the intact net.

    One pass over the test set serves every pick: until its first deleted unit a lesioned net
    computes exactly what the intact net does, so each pick's forward starts from the intact net's
    activation there. A single deletion then costs on average half a forward pass, k random ones
    about k/(k+1) of one. The arithmetic is the model's own forward (the same batches, units and
    head), so the figures are those `training/evaluation.py` gives for the lesioned net."""
    from ..data import eval_for, num_examples

    n_units = len(model.units)
    starting_at: dict[int, list[int]] = {}
    for j, pick in enumerate(picks):
        starting_at.setdefault(min(pick, default=n_units), []).append(j)
    sums = torch.zeros(len(picks), 2, device=rt.device)  # per pick: [loss sum, wrong]
    model.eval()
    with torch.no_grad(), rt.autocast():
        for x, y in eval_for(data, "test", batch_size, rt.device):
            h = model.stem(x.contiguous(memory_format=rt.memory_format))  # the intact net's activation
            for i in range(n_units + 1):
                for j in starting_at.get(i, ()):
                    with lesioned(model, list(picks[j])):
                        z = h
                        for unit in model.units[i:]:
                            z = unit(z)
                        out = model.head(z).float()
                    sums[j, 0] += F.cross_entropy(out, y, reduction="sum")
                    sums[j, 1] += (out.argmax(1) != y).sum()
                if i < n_units:
                    h = model.units[i](h)
    n = num_examples(data, "test")
    return [(loss / n, 100.0 * wrong / n) for loss, wrong in sums.tolist()]


def study(trained: Trained, *, max_k: int | None, draws: int, seed: int,
          log: Callable[[str], None] | None = None) -> dict:
    """Baseline, every single deletion, and k random deletions for k = 1..max_k.

    Returns {"run", "label", "residual", "classes", "baseline": {...}, "units": [...], "k": [...],
    "undeletable": [...], "wall_s"}; errors are percentages."""
    tick = time.perf_counter()
    model, data = trained.model, trained.data
    rt = runtime_for(trained.device)
    units = describe_units(trained)
    deletable = [r for r in units if r["deletable"]]
    (base_loss, base_err), *singles = errors(model, data, rt, [()] + [(r["unit"] - 1,) for r in deletable])
    for row, (loss, err) in zip(deletable, singles):
        row["test_loss"], row["test_error"], row["delta"] = loss, err, err - base_err
    for row in units:
        if not row["deletable"]:
            row["test_loss"] = row["test_error"] = row["delta"] = None
    if log:
        log(f"{trained.label}: {len(deletable)} single deletions done")
    candidates = [r["unit"] - 1 for r in deletable]
    n = len(candidates)
    max_k = n if max_k is None else min(max_k, n)
    rng = np.random.default_rng(seed)
    picks = {k: [tuple(candidates[j] for j in pick) for pick in _subsets(n, k, draws, rng)]
             for k in range(1, max_k + 1)}
    flat = [pick for k in picks for pick in picks[k]]
    by_error = dict(zip(flat, (err for _, err in errors(model, data, rt, flat)))) if flat else {}
    by_k = [{"k": 0, "draws": 1, "median": base_err, "min": base_err, "max": base_err}]
    for k, group in picks.items():
        errs = [by_error[pick] for pick in group]
        by_k.append({"k": k, "draws": len(errs), "median": statistics.median(errs), "min": min(errs), "max": max(errs)})
        if log:
            log(f"{trained.label}: k={k}/{max_k}  median error {by_k[-1]['median']:.2f}% over {len(errs)} draws")
    return {
        "run": str(trained.path), "label": trained.label, "residual": trained.residual,
        "classes": data.num_classes, "baseline": {"test_loss": base_loss, "test_error": base_err},
        "units": units, "k": by_k, "undeletable": [r["unit"] for r in units if not r["deletable"]],
        "wall_s": time.perf_counter() - tick,
    }


def figure(results: list[dict], path: str | Path) -> Path:
    """Left: test error against the deleted unit (Veit et al. 2016 Fig. 3a); right: against the
    number of units deleted at random, median with the min-max band (their Fig. 3b). Plain nets
    dashed, residual solid (He 2016a Fig. 6); downsampling units marked with open squares."""
    from matplotlib.ticker import MaxNLocator

    from .. import figures

    plt = figures.pyplot()
    fig, (ax_u, ax_k) = plt.subplots(1, 2, figsize=(10, 3.8))
    for i, r in enumerate(results):
        color = f"C{i}"
        style = figures.STYLE["residual" if r["residual"] else "plain"]
        xs = [u["unit"] for u in r["units"]]
        ys = [u["test_error"] if u["test_error"] is not None else float("nan") for u in r["units"]]
        ax_u.plot(xs, ys, marker="o", ms=3, color=color, label=r["label"], **style)
        ax_u.axhline(r["baseline"]["test_error"], color=color, lw=0.8, alpha=0.6, **style)
        down = [u for u in r["units"] if u["downsampling"]]
        if down:
            ax_u.plot([u["unit"] for u in down], [u["test_error"] if u["test_error"] is not None else
                                                   r["baseline"]["test_error"] for u in down],
                      "s", mfc="none", mec=color, ms=8, label=f"{r['label']}: downsampling unit")
        ks = [row["k"] for row in r["k"]]
        ax_k.plot(ks, [row["median"] for row in r["k"]], marker="o", ms=3, color=color, label=r["label"], **style)
        ax_k.fill_between(ks, [row["min"] for row in r["k"]], [row["max"] for row in r["k"]], color=color, alpha=0.15)
    if results:
        chance = 100.0 * (1 - 1 / results[0]["classes"])
        for ax in (ax_u, ax_k):
            ax.axhline(chance, color="grey", lw=0.8, ls=":", label="chance")
    ax_u.set(xlabel="deleted unit (1-based)", ylabel="test error (%)",
             title="one unit deleted (thin line: nothing deleted)")
    ax_k.xaxis.set_major_locator(MaxNLocator(integer=True))  # k counts units: no k = 2.5
    ax_u.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax_k.set(xlabel="units deleted at random, k", ylabel="test error (%)", title="k units deleted (median, min-max)")
    ax_u.legend(fontsize=7)
    ax_k.legend(fontsize=7)
    return figures.save(fig, path)
