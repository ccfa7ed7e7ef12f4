"""Gradient norms of several nets side by side (He 2016b sec. 3; He 2016a Fig. 7).

`measure(specs)`: at step 1 (or averaged over the first K steps) the gradient norm of every weight
layer and of each unit's input, ||dE/dx_l||. With an identity shortcut and nothing after the
addition, dE/dx_l = dE/dx_L (1 + d/dx_l sum F): the "1" reaches every unit untouched (He 2016b
eq. 4-5). A shortcut scaled by lambda turns it into lambda^(L-l), which `direct_term` draws beside
the measurement.
"""

from __future__ import annotations

import re
import statistics
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ...spec.shortcut_kinds import SHORTCUT_KINDS
from ...training.callbacks import GradNormCallback

@dataclass
class NetNorms:
    """What `measure` returns for one spec."""

    name: str
    params: int
    depth: int
    units: int
    layers: list[dict[str, Any]]  # name, index, path, kind, grad_norm, weight_norm
    inputs: list[float | None]  # ||dE/dx_l||, l = 0..L, averaged over the measured steps
    direct: list[float] | None  # lambda^(L - l) for scaled shortcuts (He 2016b eq. 5)
    steps: int
    loss: float
    status: str
    extra: dict[str, Any] = field(default_factory=dict)


def direct_term(spec, units: int) -> list[float] | None:
    """The shortcut-only term of dx_L/dx_l through L - l units each scaled by lambda: lambda^(L-l).
    Exact for units with nothing after the addition (He 2016b eq. 4-5); drawn for comparison only."""
    sc = spec.model.shortcut
    if SHORTCUT_KINDS[sc.kind].value != "shortcut_scale":  # a constant lambda on the shortcut
        return None
    return [sc.shortcut_scale ** (units - l) for l in range(units + 1)]


def measure_spec(name: str, spec, steps: int, data=None) -> NetNorms:
    """Train `steps` steps of `spec` in memory and average the gradient norms over them."""
    from ... import spec as spec_mod
    from ...training.trainer import Trainer

    tree = spec_mod.to_tree(spec)
    tree["optim"].update({"iters": steps, "epochs": None, "milestones": []})
    tree["train"].update({"eval_every": "end", "checkpoint_every": 0, "grad_norm_every": 0})
    if tree["run"]["precision"] == "auto":  # norms measured in fp32 (no TF32) on every device, not bf16 on GPUs
        tree["run"]["precision"] = "fp32"
    short = spec_mod.load(tree, name=name)
    cb = GradNormCallback(every=1)
    trainer = Trainer(short, run_dir=None, callbacks=[cb], data=data)
    summary = trainer.run()
    recs = cb.records
    names = [layer.name for layer in cb.layers]
    mean_w = [_mean([r["weights"][n] for r in recs]) for n in names]
    mean_x = [_mean([r["inputs"][i] for r in recs]) for i in range(len(recs[0]["inputs"]))] if recs else []
    layers = [{"layer": layer.name, "label": layer.label, "index": layer.index, "path": layer.path,
               "kind": type(layer.module).__name__,
               "grad_norm": g, "weight_norm": layer.module.weight.detach().norm().item()}
              for layer, g in zip(cb.layers, mean_w)]
    n_units = len(trainer.model.units)
    return NetNorms(name=name, params=trainer.params, depth=max(layer.index for layer in cb.layers),
                    units=n_units, layers=layers, inputs=mean_x, direct=direct_term(short, n_units),
                    steps=len(recs), loss=_mean([r["loss"] for r in recs]), status=summary["status"])


def _mean(values: Iterable[float | None]) -> float | None:
    vals = [v for v in values if v is not None]
    return sum(vals) / len(vals) if vals else None


def measure(named_specs: list[tuple[str, Any]], steps: int = 1, progress: Callable[[str], None] | None = None
            ) -> list[NetNorms]:
    """`measure_spec` for each (name, spec); data sets are loaded once and shared."""
    from ... import data as data_mod
    from ...spec import to_tree

    cache: dict[str, Any] = {}
    out = []
    for name, spec in named_specs:
        key = repr(to_tree(spec)["data"])
        if key not in cache:
            cache[key] = data_mod.load(spec.data)
        if progress:
            progress(name)
        out.append(measure_spec(name, spec, steps, data=cache[key]))
    return out


def rows(results: list[NetNorms]) -> list[dict[str, Any]]:
    """One JSON-ready object per (spec, layer): weight layers, then unit inputs (kind 'input')."""
    out = []
    for r in results:
        for layer in r.layers:
            out.append({"spec": r.name, **layer})
        last = r.inputs[-1] if r.inputs else None
        for l, g in enumerate(r.inputs):
            row = {"spec": r.name, "layer": f"x_{l}", "index": l, "path": "input", "kind": "dE/dx",
                   "grad_norm": g, "relative": (g / last) if (g is not None and last) else None}
            if r.direct is not None:
                row["direct_term"] = r.direct[l]
            out.append(row)
    return out


def summary_row(r: NetNorms) -> dict[str, Any]:
    """First conv and fc from the main path; median, min and max over every weight layer, the
    shortcut's gates and projections included (their gradients are part of what the net trains)."""
    main = [layer for layer in r.layers if layer["path"] == "main" and layer["grad_norm"] is not None]
    first, last = (main[0]["grad_norm"], main[-1]["grad_norm"]) if main else (None, None)
    x0, xl = (r.inputs[0], r.inputs[-1]) if r.inputs else (None, None)
    norms = sorted(layer["grad_norm"] for layer in r.layers if layer["grad_norm"] is not None)
    return {
        "spec": r.name, "depth": r.depth, "units": r.units, "params": r.params, "steps": r.steps,
        "weight_layers": len(norms), "first_layer": first, "last_layer": last,
        # for an even count, the mean of the two middle ones
        "median_layer": statistics.median(norms) if norms else None,
        "min_layer": norms[0] if norms else None, "max_layer": norms[-1] if norms else None,
        "input_ratio": (x0 / xl) if (x0 is not None and xl) else None,
        "direct_term": r.direct[0] if r.direct else None, "loss": r.loss, "status": r.status,
    }


FFN_OUT = re.compile(r"block(\d+)\.mlp\.fc2")  # a ViT block's MLP output layer (model/vit.py names)


def figure(results: list[NetNorms], path: str | Path) -> Path:
    """Left: ||dE/dW|| of each main-path weight layer against depth (ViTs: of each block's MLP
    output layer against the block, as Xiong et al. 2020 Fig. 3 draws W^2 of the FFN). Right: ||dE/dx_l|| relative to
    the last unit, with lambda^(L-l) dotted for scaled shortcuts. Both log-scale."""
    from ... import figures

    plt = figures.pyplot()
    fig, (ax_w, ax_x) = plt.subplots(1, 2, figsize=(11, 4))
    per_block = any(FFN_OUT.fullmatch(layer["label"]) for r in results for layer in r.layers)
    for i, r in enumerate(results):
        colour = f"C{i % 10}"
        main = [layer for layer in r.layers if layer["path"] == "main" and layer["grad_norm"]]
        if per_block:  # Xiong et al. 2020 Fig. 3: the FFN's second weight W^2 in each block
            pts = [(int(m.group(1)), layer["grad_norm"]) for layer in main if (m := FFN_OUT.fullmatch(layer["label"]))]
            ax_w.plot(*zip(*pts), color=colour, label=r.name, lw=1.2, marker=".")
        else:
            ax_w.plot([m["index"] for m in main], [m["grad_norm"] for m in main], color=colour, label=r.name, lw=1.2)
        last = r.inputs[-1] if r.inputs else None
        if last:
            pts = [(l, g / last) for l, g in enumerate(r.inputs) if g]
            ax_x.plot(*zip(*pts), color=colour, label=r.name, lw=1.2)
        if r.direct is not None:
            ax_x.plot(range(len(r.direct)), r.direct, color=colour, ls=":", lw=1.5,
                      label=f"{r.name}: lambda^(L-l)")
    if per_block:
        ax_w.set(yscale="log", xlabel="block", ylabel="||dE/dW||", title="gradient norm of each block's MLP fc2")
    else:
        ax_w.set(yscale="log", xlabel="weight layer (1 = first conv)", ylabel="||dE/dW||",
                 title="gradient norm of each weight layer")
    ax_x.set(yscale="log", xlabel="unit l (input x_l)", ylabel="||dE/dx_l|| / ||dE/dx_L||",
             title="gradient reaching each unit's input")
    from matplotlib.ticker import MaxNLocator

    for ax in (ax_w, ax_x):
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        if ax.get_lines():  # a panel with nothing measured gets no empty legend (matplotlib warns of one)
            ax.legend(fontsize=7)
    return figures.save(fig, path)


# ---------------------------------------------------------------------------------------------
# Variants by name: --variant plain, original, full_preact, scale:0.5, exclusive_gate:-6, a+b


def variant_tree(base: dict, variant: str) -> dict:
    """Apply `name[:value]` terms joined by '+' to a spec tree. A unit ordering (He 2016b Table 2)
    sets model.unit; a shortcut (Table 1) sets shortcut.kind, its value the field its row names:
    lambda for `scale`, the gate bias b_g for gates and p for `dropout`; `plain` is shortcut.kind none."""
    from ... import spec as spec_mod
    from ...errors import UserError

    tree = spec_mod.merge(base, {})
    for term in variant.split("+"):
        name, _, value = term.strip().partition(":")
        if name == "plain":
            name = "none"
        if name in spec_mod.UNITS + spec_mod.VIT_UNITS:
            spec_mod.set_dotted(tree, "model.unit", name)
            target = None
        elif name in SHORTCUT_KINDS:
            spec_mod.set_dotted(tree, "model.shortcut.kind", name)
            target = SHORTCUT_KINDS[name].value  # the field `:value` sets (spec/shortcut_kinds.py)
        else:
            valid = ", ".join(("plain",) + spec_mod.UNITS + spec_mod.VIT_UNITS + SHORTCUT_KINDS.names())
            raise UserError(f"--variant {variant}: unknown name '{name}'; valid: {valid} "
                            "(with :value for scale, gates and dropout; join with +)")
        if value:
            if target is None:
                raise UserError(f"--variant {variant}: '{name}' takes no value")
            try:
                number = float(value)
            except ValueError:
                raise UserError(f"--variant {variant}: '{value}' is not a number") from None
            spec_mod.set_dotted(tree, f"model.shortcut.{target}", number)
    return tree
