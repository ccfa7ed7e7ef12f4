"""Signal-propagation plots at initialisation (Brock, De and Smith 2021, "Characterizing signal
propagation to close the performance gap in unnormalized ResNets", sec. 3).

For each residual unit l, on one batch of real images through the freshly initialised net:
- the average channel squared mean of the unit's output x_l: mean_c (mean_{n,h,w} x_l)^2;
- the average channel variance of x_l: mean_c var_{n,h,w} x_l;
- the residual branch's variance: the same for what the unit adds to its shortcut, y - skip
  (F(x) in a plain residual unit; alpha F(x) under SkipInit and ReZero, 0 at init; Fixup's
  scaled branch, 0 at init as its last conv is).
Brock et al. draw the three against depth for normalised and unnormalised nets; a BN net's
variance stays near 1 through a stage, an unnormalised He-initialised one grows unit by unit.

The net runs in training mode (a BN layer uses the batch's statistics, as in the first training
step) with no gradient; nothing is trained.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import torch

# The five nets of the figure, as overrides of one base spec (ResNet-110 of He 2016a, CIFAR widths,
# option A, on 8x8 digits): He 2016a's BN net, the same net with its BN slots empty, and the three
# ways to train it without BN (docs/normfree.md).
NETS: dict[str, dict[str, str]] = {
    "BN": {},
    "none": {"model.norm": "none"},
    "Fixup": {"model.norm": "fixup"},
    "SkipInit": {"model.norm": "none", "model.shortcut.kind": "skipinit"},
    "ReZero": {"model.norm": "none", "model.shortcut.kind": "rezero"},
}
BASE = {"model": {"family": "cifar", "depth": 110}, "data": {"dataset": "digits"}}
BATCH = 256  # images of the training split, in the split's order (no augmentation)


@dataclass
class NetSignal:
    name: str
    units: list[dict]  # unit, sq_mean, var, branch_var (one dict per residual unit, l = 1..L)


def channel_stats(x: torch.Tensor) -> tuple[float, float]:
    """(average channel squared mean, average channel variance) of an (N, C, H, W) tensor: the
    statistics over N, H, W of each channel, averaged over the channels (Brock et al. sec. 3)."""
    mean = x.mean(dim=(0, 2, 3))  # (C,)
    var = x.var(dim=(0, 2, 3), unbiased=False)  # (C,)
    return (mean ** 2).mean().item(), var.mean().item()


def measure(name: str, model: torch.nn.Module, x: torch.Tensor) -> NetSignal:
    """Run the batch `x` through `model` once and read the three statistics at every unit."""
    added: list[torch.Tensor] = []
    outputs: list[torch.Tensor] = []

    def on_combine(_module, args, y):
        skip = args[1]
        added.append(y if skip is None else y - skip)  # what the unit adds to its shortcut

    hooks = [u.combine.register_forward_hook(on_combine) for u in model.units]
    hooks += [u.register_forward_hook(lambda _m, _a, y: outputs.append(y)) for u in model.units]
    model.train()
    try:
        with torch.no_grad():
            model(x)
    finally:
        for h in hooks:
            h.remove()
    units = []
    for l, (y, fx) in enumerate(zip(outputs, added), start=1):
        sq_mean, var = channel_stats(y)
        units.append({"unit": l, "sq_mean": sq_mean, "var": var, "branch_var": channel_stats(fx)[1]})
    return NetSignal(name, units)


def measure_spec(name: str, spec, data) -> NetSignal:
    """Build `spec`'s net as a run would (seeded by run.seed) and measure it on the first
    `optim.batch_size` training images of `data`."""
    from ...model import build_model

    torch.manual_seed(spec.run.seed)
    model = build_model(spec.model, data.in_channels, spec.model.num_classes or data.num_classes)
    return measure(name, model, data.train.x[:spec.optim.batch_size].float())


def rows(results: list[NetSignal]) -> list[dict]:
    return [{"spec": r.name, **u} for r in results for u in r.units]


def figure(results: list[NetSignal], path: str | Path) -> Path:
    """Brock et al. Fig. 1's three panels, one line per net, against the unit index (log scale)."""
    from ... import figures

    plt = figures.pyplot()
    fig, axes = plt.subplots(1, 3, figsize=(13, 3.8))
    panels = [("sq_mean", "average channel squared mean"), ("var", "average channel variance"),
              ("branch_var", "residual branch variance")]
    zero: dict[str, list[str]] = {key: [] for key, _ in panels}  # nets whose statistic is 0 at every unit
    for i, r in enumerate(results):
        for ax, (key, _) in zip(axes, panels):
            pts = [(u["unit"], u[key]) for u in r.units if u[key] > 0]
            if pts:
                ax.plot(*zip(*pts), color=f"C{i % 10}", label=r.name, lw=1.2)
            else:
                zero[key].append(r.name)
    for ax, (key, title) in zip(axes, panels):
        ax.set(yscale="log", xlabel="residual unit l", title=title)
        ax.legend(fontsize=7)
        if zero[key]:  # a log axis cannot draw 0: say so on the panel
            ax.text(0.98, 0.02, f"0 at every unit: {', '.join(zero[key])}", transform=ax.transAxes,
                    ha="right", va="bottom", fontsize=7)
    fig.suptitle("signal propagation at initialisation (Brock, De and Smith 2021), one batch of real images",
                 fontsize=9)
    return figures.save(fig, path)
