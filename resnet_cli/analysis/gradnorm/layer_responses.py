"""Layer responses of a trained net: std of each layer's output after BN (He 2016a Fig. 7)."""

from __future__ import annotations

import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from torch import nn

from ...training.probes import unit_list

def response_points(model: nn.Module) -> list[tuple[str, int, nn.Module]]:
    """For each main-path conv: the module whose output is its response. He 2016a Fig. 7 takes each
    3x3 layer's output after BN and before ReLU or the addition: the first BN after the conv inside
    the same stem or branch; a conv followed by no BN there (the last conv of a pre-activation
    branch) answers with its own output, which goes straight into the addition."""
    out: list[tuple[str, int, nn.Module]] = []
    index = 0
    containers: list[tuple[str, nn.Module]] = [("stem", model.stem)]
    containers += [(f"units.{i}.branch", u.branch) for i, u in enumerate(unit_list(model))]
    for prefix, container in containers:
        pending: tuple[str, nn.Module] | None = None
        for name, m in container.named_modules():
            if isinstance(m, (nn.Conv2d, nn.Linear)):  # Linear: a ViT branch's layers, no BN after them
                if pending is not None:
                    index += 1
                    out.append((pending[0], index, pending[1]))
                pending = (f"{prefix}.{name}", m)
            elif isinstance(m, nn.modules.batchnorm._BatchNorm) and pending is not None:
                index += 1
                out.append((pending[0], index, m))
                pending = None
        if pending is not None:
            index += 1
            out.append((pending[0], index, pending[1]))
    return out


def responses(run, split: str = "test", batch_size: int = 500, device: str = "cpu") -> dict[str, Any]:
    """Std of every layer's response over a split, in eval mode (BN with its running statistics, as
    at test time), for the weights of the run's last checkpoint. `run`: an opened run (`open_runs`)
    or its directory (opened here on `device`)."""
    from ... import data as data_mod
    from ..trained import Trained, load_run

    if not isinstance(run, Trained):
        run = load_run(run, device)
    model = run.model
    points = response_points(model)
    sums = [torch.zeros(3, dtype=torch.float64, device=run.device) for _ in points]  # n, sum, sum of squares

    def hook(k: int) -> Callable:
        def record(module, args, out) -> None:
            o = out.detach().double()
            sums[k] += torch.stack([o.new_tensor(float(o.numel())), o.sum(), (o * o).sum()])

        return record

    handles = [m.register_forward_hook(hook(k)) for k, (_, _, m) in enumerate(points)]
    try:
        with torch.no_grad():
            for x, _ in data_mod.eval_for(run.data, split, batch_size, run.device):
                model(x)
    finally:
        for h in handles:
            h.remove()
    layers = []
    for (name, index, _), (n, s, ss) in zip(points, (t.tolist() for t in sums)):
        mean = s / n
        layers.append({"layer": name, "index": index, "std": math.sqrt(max(ss / n - mean * mean, 0.0))})
    m = run.spec.model
    return {"run": str(run.path), "label": run.label, "depth": m.depth, "unit": m.unit, "shortcut": m.shortcut.kind,
            "split": split, "layers": layers}


def responses_figure(runs: list[dict[str, Any]], path: str | Path) -> Path:
    """He 2016a Fig. 7: std per layer in network order (top) and sorted by magnitude (bottom)."""
    from ... import figures

    plt = figures.pyplot()
    fig, (ax_o, ax_s) = plt.subplots(2, 1, figsize=(8, 6.5))
    for i, run in enumerate(runs):
        style = figures.STYLE["plain" if run["shortcut"] == "none" else "residual"]
        stds = [layer["std"] for layer in run["layers"]]
        label = run.get("name", run["label"])
        ax_o.plot(range(1, len(stds) + 1), stds, color=f"C{i % 10}", label=label, **style)
        ax_s.plot(range(1, len(stds) + 1), sorted(stds, reverse=True), color=f"C{i % 10}", label=label, **style)
    ax_o.set(xlabel="layer index (original order)", ylabel="std", title="layer responses after BN")
    ax_s.set(xlabel="layer index (sorted by magnitude)", ylabel="std")
    ax_o.legend(fontsize=7)
    return figures.save(fig, path)
