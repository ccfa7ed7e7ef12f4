"""The gradient highway, measured (He 2016b sec. 3; He 2016a Fig. 7; SCIENCE.md sec. 1, 6, 7).

Three measurements, each returned as plain data:

- `measure(specs)`: at step 1 (or averaged over the first K steps) the gradient norm of every weight
  layer and of each unit's input, ||dE/dx_l||. With an identity shortcut and nothing after the
  addition, dE/dx_l = dE/dx_L (1 + d/dx_l sum F): the "1" reaches every unit untouched. A shortcut
  scaled by lambda turns it into lambda^(L-l), which `direct_term` draws beside the measurement.
- `toy_gains()` / `spectral_norm()`: the largest singular value of d(output)/d(input) of a stack of
  blocks, by power iteration on J^T J with one Jacobian-vector and one vector-Jacobian product per
  step; J itself is never built. The seed's toy: 30 conv-ReLU-conv blocks on one 8x8 digit.
- `responses(run_dir)`: std of each layer's response after BN, before ReLU or addition (He 2016a
  Fig. 7), for a trained run.

`GradNormCallback(every)` hangs off the trainer and logs the same per-layer norms into a run's
metrics.jsonl every N iterations (`train.grad_norm_every`).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn

from ..train import Callback

# ---------------------------------------------------------------------------------------------
# Which modules are the net's weight layers


@dataclass(frozen=True)
class Layer:
    name: str  # module path, e.g. "units.3.branch.1"
    module: nn.Module
    index: int  # 1-based position along the main path (stem conv = 1 ... fc = depth)
    path: str  # "main" (stem, branch convs, fc) or "shortcut" (projections, gates)
    label: str  # short, for tables: "stem", "unit3.conv1", "unit3.skip", "unit3.gate", "fc"


def weight_layers(model: nn.Module) -> list[Layer]:
    """Every Conv2d and Linear in forward order. Main-path layers are numbered 1..depth as the papers
    count depth; a projection or gate on a shortcut takes the index of the main-path layer before it."""
    out: list[Layer] = []
    index = 0
    convs_in_unit: dict[str, int] = {}
    for name, module in model.named_modules():
        if not isinstance(module, (nn.Conv2d, nn.Linear)):
            continue
        parts = name.split(".")
        side = "skip" in parts or "combine" in parts
        if not side:
            index += 1
        if parts[0] == "units" and len(parts) > 2:
            unit = f"unit{parts[1]}"
            if side:
                label = f"{unit}.{'skip' if 'skip' in parts else 'gate'}"
            else:
                convs_in_unit[unit] = convs_in_unit.get(unit, 0) + 1
                label = f"{unit}.conv{convs_in_unit[unit]}"
        else:
            label = parts[0]
        out.append(Layer(name, module, index, "shortcut" if side else "main", label))
    return out


def unit_list(model: nn.Module) -> list[nn.Module]:
    units = getattr(model, "units", None)
    if units is None:
        raise ValueError("gradient norms per unit need a resnet_cli ResNet (a model with .units)")
    return list(units)


# ---------------------------------------------------------------------------------------------
# dE/dx_l: tensor hooks on each unit's input


class InputGrads:
    """Records ||dE/dx_l|| for l = 0..L: x_0..x_{L-1} are the units' inputs, x_L the last unit's
    output (the head's input). Forward pre-hooks attach a tensor hook while `armed`, so steps that
    are not measured pay nothing."""

    def __init__(self, model: nn.Module):
        self.units = unit_list(model)
        self.norms: list[torch.Tensor | None] = [None] * (len(self.units) + 1)
        self.armed = False
        self._handles = [u.register_forward_pre_hook(self._hook(i)) for i, u in enumerate(self.units)]
        self._handles.append(model.head_act.register_forward_pre_hook(self._hook(len(self.units))))

    def _hook(self, i: int) -> Callable:
        def pre(module: nn.Module, args: tuple) -> None:
            x = args[0]
            if self.armed and x.requires_grad and torch.is_grad_enabled():
                x.register_hook(lambda g, i=i: self._store(i, g))

        return pre

    def _store(self, i: int, g: torch.Tensor) -> None:
        self.norms[i] = g.detach().float().norm()

    def arm(self) -> None:
        self.norms = [None] * len(self.norms)
        self.armed = True

    def read(self) -> list[float | None]:
        self.armed = False
        return [None if n is None else n.item() for n in self.norms]

    def remove(self) -> None:
        for h in self._handles:
            h.remove()


def weight_grad_norms(layers: list[Layer]) -> list[float | None]:
    """||dE/dW|| of each layer's weight (one device sync for all of them)."""
    grads = [layer.module.weight.grad for layer in layers]
    present = [g for g in grads if g is not None]
    norms = iter(torch.stack(torch._foreach_norm(present)).tolist() if present else [])
    return [next(norms) if g is not None else None for g in grads]


class GradNormCallback(Callback):
    """Per-layer gradient norms every `every` steps, after backward() and before step() (STYLE 6).

    Measures steps 1, every + 1, 2 every + 1, ... (step 1 is the net at initialisation). Each record,
    `{"event": "grad_norm", "iter": n, "weights": {layer: norm}, "inputs": [||dE/dx_0||, ...]}`, is
    kept in `.records` and appended to the run's metrics.jsonl when the trainer has a run directory.
    `iter` counts the steps done once this gradient is applied, as the epoch records do, so a resume
    that truncates metrics to its checkpoint keeps exactly the records it will not recompute."""

    def __init__(self, every: int, keep: bool = True):
        if every < 1:
            raise ValueError(f"every must be >= 1, got {every}")
        self.every = every
        self.keep = keep
        self.records: list[dict[str, Any]] = []

    def _due(self, iteration: int) -> bool:
        return iteration % self.every == 0

    def on_start(self, t) -> None:
        self.layers = weight_layers(t.model)
        self.inputs = InputGrads(t.model)
        self.trainer = t
        # Arm the unit-input hooks before the forward pass of each measured step.
        self._arm_handle = t.model.register_forward_pre_hook(self._maybe_arm)

    def _maybe_arm(self, module: nn.Module, args: tuple) -> None:
        if module.training and torch.is_grad_enabled() and self._due(self.trainer.p.iteration):
            self.inputs.arm()

    def after_backward(self, t) -> None:
        if not self._due(t.p.iteration):
            return
        norms = weight_grad_norms(self.layers)
        record = {
            "event": "grad_norm", "iter": t.p.iteration + 1, "loss": t.last_loss.item(),
            "weights": {layer.name: n for layer, n in zip(self.layers, norms)},
            "inputs": self.inputs.read(),
        }
        if self.keep:
            self.records.append(record)
        if t.run_dir is not None:
            t.run_dir.append_metrics(record)

    def on_end(self, t, summary: dict[str, Any]) -> None:
        self.inputs.remove()
        self._arm_handle.remove()


# ---------------------------------------------------------------------------------------------
# Gradient norms of several specs side by side


@dataclass
class NetNorms:
    """What `measure` returns for one spec."""

    name: str
    params: int
    depth: int
    units: int
    layers: list[dict[str, Any]]  # name, index, path, kind, grad_norm, weight_norm
    inputs: list[float | None]  # ||dE/dx_l||, l = 0..L, averaged over the measured steps
    direct: list[float] | None  # lambda^(L - l) for scaled shortcuts (SCIENCE.md sec. 1)
    steps: int
    loss: float
    status: str
    extra: dict[str, Any] = field(default_factory=dict)


def direct_term(spec, units: int) -> list[float] | None:
    """The shortcut-only term of dx_L/dx_l through L - l units each scaled by lambda: lambda^(L-l).
    Exact for units with nothing after the addition (He 2016b eq. 4-5); drawn for comparison only."""
    sc = spec.model.shortcut
    if sc.kind != "scale":
        return None
    return [sc.shortcut_scale ** (units - l) for l in range(units + 1)]


def measure_spec(name: str, spec, steps: int, data=None) -> NetNorms:
    """Train `steps` steps of `spec` in memory and average the gradient norms over them."""
    from .. import spec as spec_mod
    from ..train import Trainer

    tree = spec_mod.to_tree(spec)
    tree["optim"].update({"iters": steps, "epochs": None, "milestones": []})
    tree["train"].update({"eval_every": "end", "checkpoint_every": 0, "grad_norm_every": 0})
    if tree["run"]["precision"] == "auto":  # norms measured in fp32 (no TF32) on every device, not bf16 on GPUs
        tree["run"]["precision"] = "fp32"
    short = spec_mod.resolve(spec_mod.validate(tree, name))
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
    from .. import data as data_mod
    from ..spec import to_tree

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
    main = [layer for layer in r.layers if layer["path"] == "main" and layer["grad_norm"] is not None]
    first, last = (main[0]["grad_norm"], main[-1]["grad_norm"]) if main else (None, None)
    x0, xl = (r.inputs[0], r.inputs[-1]) if r.inputs else (None, None)
    norms = sorted(layer["grad_norm"] for layer in main)
    return {
        "spec": r.name, "depth": r.depth, "units": r.units, "params": r.params, "steps": r.steps,
        "first_layer": first, "last_layer": last, "median_layer": norms[len(norms) // 2] if norms else None,
        "min_layer": norms[0] if norms else None, "max_layer": norms[-1] if norms else None,
        "input_ratio": (x0 / xl) if (x0 is not None and xl) else None,
        "direct_term": r.direct[0] if r.direct else None, "loss": r.loss, "status": r.status,
    }


def figure(results: list[NetNorms], path) -> None:
    """Left: ||dE/dW|| of each main-path weight layer against depth. Right: ||dE/dx_l|| relative to
    the last unit, with lambda^(L-l) dotted for scaled shortcuts. Both log-scale."""
    from .. import figures

    plt = figures.pyplot()
    fig, (ax_w, ax_x) = plt.subplots(1, 2, figsize=(11, 4))
    for i, r in enumerate(results):
        colour = f"C{i % 10}"
        main = [layer for layer in r.layers if layer["path"] == "main" and layer["grad_norm"]]
        ax_w.plot([m["index"] for m in main], [m["grad_norm"] for m in main], color=colour, label=r.name, lw=1.2)
        last = r.inputs[-1] if r.inputs else None
        if last:
            pts = [(l, g / last) for l, g in enumerate(r.inputs) if g]
            ax_x.plot(*zip(*pts), color=colour, label=r.name, lw=1.2)
        if r.direct is not None:
            ax_x.plot(range(len(r.direct)), r.direct, color=colour, ls=":", lw=1.5,
                      label=f"{r.name}: lambda^(L-l)")
    ax_w.set(yscale="log", xlabel="weight layer (1 = first conv)", ylabel="||dE/dW||",
             title="gradient norm of each weight layer")
    ax_x.set(yscale="log", xlabel="unit l (input x_l)", ylabel="||dE/dx_l|| / ||dE/dx_L||",
             title="gradient reaching each unit's input")
    from matplotlib.ticker import MaxNLocator

    for ax in (ax_w, ax_x):
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.legend(fontsize=7)
    figures.save(fig, path)


# ---------------------------------------------------------------------------------------------
# Variants by name: --variant plain, original, full_preact, scale:0.5, exclusive_gate:-6, a+b


def variant_tree(base: dict, variant: str) -> dict:
    """Apply `name[:value]` terms joined by '+' to a spec tree. A unit ordering (He 2016b Table 2)
    sets model.unit; a shortcut (Table 1) sets shortcut.kind, its value being lambda for `scale`,
    the gate bias b_g for gates and p for `dropout`; `plain` is shortcut.kind none."""
    from .. import spec as spec_mod
    from ..errors import UserError

    tree = spec_mod.merge(base, {})
    for term in variant.split("+"):
        name, _, value = term.strip().partition(":")
        if name == "plain":
            name = "none"
        if name in spec_mod.UNITS:
            spec_mod.set_dotted(tree, "model.unit", name)
            target = None
        elif name in spec_mod.SHORTCUTS:
            spec_mod.set_dotted(tree, "model.shortcut.kind", name)
            target = {"scale": "shortcut_scale", "exclusive_gate": "gate_bias", "shortcut_gate": "gate_bias",
                      "highway": "gate_bias", "dropout": "dropout"}.get(name)
        else:
            valid = ", ".join(("plain",) + spec_mod.UNITS + spec_mod.SHORTCUTS)
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


# ---------------------------------------------------------------------------------------------
# Jacobian gains by power iteration (SCIENCE.md sec. 6, "Gradient identity")


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
    """The seed's input: scikit-learn digit 3 (pixels / 16) plus faint noise, so that no
    pre-activation sits exactly on ReLU's kink. (8, 8) float64."""
    from sklearn.datasets import load_digits

    x = torch.tensor(load_digits().images[3] / 16.0, dtype=torch.float64)
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
    """Plain vs residual gain of the seed's toy for each kernel std and stack length. The same kernels
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


# The seed's figures for 30 blocks (SCIENCE.md sec. 6), shown beside ours.
SEED_GAINS = {("plain", 0.1): 2.4e-39, ("residual", 0.1): 1.7, ("plain", 0.3): 1.0e-15, ("residual", 0.3): 81.0}


# ---------------------------------------------------------------------------------------------
# Layer responses (He 2016a Fig. 7)


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
            if isinstance(m, nn.Conv2d):
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


def responses(run_dir, split: str = "test", batch_size: int = 500, device: str = "cpu") -> dict[str, Any]:
    """Std of every layer's response over a split, in eval mode (BN with its running statistics, as
    at test time), for the weights of the run's last checkpoint."""
    from .. import data as data_mod
    from .trained import load_run

    run = load_run(run_dir, device)
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


def responses_figure(runs: list[dict[str, Any]], path) -> None:
    """He 2016a Fig. 7: std per layer in network order (top) and sorted by magnitude (bottom)."""
    from .. import figures

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
    figures.save(fig, path)
