"""Path lengths (Veit, Wilber and Belongie 2016, "Residual Networks Behave Like Ensembles of
Relatively Shallow Networks", sec. 5): which path lengths carry the gradient.

Unrolled, a net of n residual units is a sum over 2^n paths: at each unit a path goes through the
residual branch or through the shortcut; its length k is the number of branches it goes through,
and C(n, k) paths have length k. Veit et al.'s method, here: feed a training batch forward through
the whole net; in the backward pass pick k units at random whose gradient flows only through the
branch, the others only through the shortcut, and take the norm of the gradient at the input. The
mean over samples is the gradient of one path of length k; times C(n, k) it is the total gradient
that length carries (their Fig. 6b). In their trained ResNet-110 (54 units) almost all of it came
from paths 5-17 units long.

How the route is restricted. The forward pass is the full net's; only the backward pass changes.
Inside each unit a tap sits after the shortcut (`skip`: identity, option A's zero padding, a 1x1
projection) and after the branch F, before the two are combined: a tap passes its value forward
unchanged and, in the backward pass, passes or zeroes the gradient by a switch read *at backward
time*, so one forward serves every sampled route. Everything else keeps its forward value and its
full derivative: the scale of a scaled shortcut, the gate value g(x) of a gated one, the dropout
mask of the dropout shortcut, the shared pre-activation before the split (first unit and
shape-changing units of pre-activation nets) and the function after the addition (the original
unit's ReLU). A "skipped" downsampling unit thus passes the gradient through its projection or its
zero padding.

What a path means exactly. The gradient of one path is the product, unit by unit, of either the
shortcut's or the branch's Jacobian, each taken at the full net's forward values and multiplied by
the Jacobian of what follows the addition. Summed over all 2^n routes these products give the full
gradient exactly, whatever follows the addition (the chain rule is linear; the tests enumerate it).
Veit et al.'s unrolling of the *forward value* into a sum of path functions is exact only when
nothing nonlinear follows the addition (full pre-activation units); with the original unit's ReLU
after the addition it is the usual first-order reading, and we measure it as they did on the
original net. Two terms are on no path: the derivative of a gate's value g(x) with respect to its
own input (gated shortcuts, He 2016b Table 1) is closed while a route is restricted, so for gated
nets the per-length totals leave out the gradient that flows through the gates.

Batch norm runs in training mode (batch statistics, as in the gradient during training) and its
running statistics are restored afterwards. The gradient is that of the summed cross-entropy, and
its norm is taken per image and averaged over the batch, so it does not scale with the batch size.
A plain net (shortcut `none`) has one path, through every unit: it is reported as one row.
"""

from __future__ import annotations

import contextlib
import math
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from ..errors import UserError
from ..model.shortcuts import NoShortcut

MASS = 0.9  # the share of the total gradient the reported window of lengths carries


# ------------------------------------------------------------------------------------------
# Routing the backward pass


class Switch:
    """Open: the gradient passes this tap; closed: it is zeroed. Read when backward runs."""

    __slots__ = ("open",)

    def __init__(self) -> None:
        self.open = True


class _Tap(torch.autograd.Function):
    @staticmethod
    def forward(ctx, t: torch.Tensor, switch: Switch) -> torch.Tensor:
        ctx.switch = switch
        return t.view_as(t)

    @staticmethod
    def backward(ctx, grad: torch.Tensor):
        return (grad if ctx.switch.open else torch.zeros_like(grad)), None


class TapOutput(nn.Module):
    """`inner(x)`, with its output's gradient under `switch`."""

    def __init__(self, inner: nn.Module, switch: Switch):
        super().__init__()
        self.inner, self.switch = inner, switch

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return _Tap.apply(self.inner(x), self.switch)


class TapInput(nn.Module):
    """`inner(x)`, with the gradient into x under `switch` (a gate's own input)."""

    def __init__(self, inner: nn.Module, switch: Switch):
        super().__init__()
        self.inner, self.switch = inner, switch

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.inner(_Tap.apply(x, self.switch))


def has_shortcut(unit: nn.Module) -> bool:
    return not isinstance(unit.combine, NoShortcut)


@dataclass
class Router:
    """The switches of a net's routable units (those with a shortcut), in the order of the net."""

    routable: list[int]  # 0-based indices of units with a shortcut
    fixed: int  # units without a shortcut: every path goes through their branch
    skip: list[Switch] = field(default_factory=list)
    branch: list[Switch] = field(default_factory=list)
    gates: list[Switch] = field(default_factory=list)

    @property
    def n(self) -> int:
        return len(self.routable)

    def full(self) -> None:
        """The ordinary backward pass: every tap open."""
        for s in (*self.skip, *self.branch, *self.gates):
            s.open = True

    def path(self, through_branch: Sequence[int]) -> None:
        """One route: branch at these routable positions (0..n-1), shortcut at the others."""
        chosen = set(through_branch)
        for j in range(self.n):
            self.branch[j].open = j in chosen
            self.skip[j].open = j not in chosen
        for s in self.gates:
            s.open = False


@contextlib.contextmanager
def routed(model: nn.Module) -> Iterator[Router]:
    """The model with taps in every unit that has a shortcut; the original modules come back on exit."""
    saved: list[tuple[nn.Module, str, nn.Module]] = []
    routable = [i for i, u in enumerate(model.units) if has_shortcut(u)]
    router = Router(routable=routable, fixed=len(model.units) - len(routable))

    def wrap(owner: nn.Module, name: str, tap: type[nn.Module]) -> Switch:
        switch = Switch()
        inner = getattr(owner, name)
        saved.append((owner, name, inner))
        setattr(owner, name, tap(inner, switch))
        return switch

    try:
        for i in routable:
            unit = model.units[i]
            router.skip.append(wrap(unit, "skip", TapOutput))
            router.branch.append(wrap(unit, "branch", TapOutput))
            if isinstance(getattr(unit.combine, "gate", None), nn.Module):
                router.gates.append(wrap(unit.combine, "gate", TapInput))
        yield router
    finally:
        for owner, name, inner in reversed(saved):
            setattr(owner, name, inner)


@contextlib.contextmanager
def training_mode_kept(model: nn.Module) -> Iterator[nn.Module]:
    """Training mode (BN batch statistics), with the buffers and the mode restored on exit."""
    buffers = {k: v.detach().clone() for k, v in model.named_buffers()}
    was_training = model.training
    model.train()
    try:
        yield model
    finally:
        model.train(was_training)
        with torch.no_grad():
            for k, v in model.named_buffers():
                v.copy_(buffers[k])


# ------------------------------------------------------------------------------------------
# Counting paths (in logs: C(333, 166) ~ 1e99, 2^333 ~ 1e100)


def log_binomial(n: int, k: int) -> float:
    """ln C(n, k), exact to rounding for any n (lgamma; math.comb would build a 100-digit integer)."""
    if not 0 <= k <= n:
        return -math.inf
    return math.lgamma(n + 1) - math.lgamma(k + 1) - math.lgamma(n - k + 1)


def logsumexp(values: Sequence[float]) -> float:
    top = max(values)
    if top == -math.inf:
        return -math.inf
    return top + math.log(sum(math.exp(v - top) for v in values))


def shortest_window(shares: Sequence[float], mass: float) -> tuple[int, int, float]:
    """The shortest run of consecutive positions whose shares add up to at least `mass`
    (among equally short ones, the one carrying most). Returns (first, last, carried)."""
    total = math.fsum(shares)
    if not total > 0:  # nothing to carry (every share 0): no length is picked out, the window is all of them
        return 0, len(shares) - 1, total
    best: tuple[int, int, float] | None = None
    need = mass * total * (1 - 1e-12)  # a window that carries everything counts as carrying `mass`
    for lo in range(len(shares)):
        acc = 0.0
        for hi in range(lo, len(shares)):
            acc += shares[hi]
            if acc >= need:
                if best is None or (hi - lo, -acc) < (best[1] - best[0], -best[2]):
                    best = (lo, hi, acc)
                break
    assert best is not None  # the whole run carries the total, at least `need`
    return best


# ------------------------------------------------------------------------------------------
# Measuring


def _per_image_norm(grad: torch.Tensor) -> float:
    return grad.flatten(1).norm(dim=1).mean().item()


def sample_gradients(model: nn.Module, batches: Sequence[tuple[torch.Tensor, torch.Tensor]], samples: int, *,
                     seed: int, log: Callable[[str], None] | None = None) -> dict:
    """For each k = 0..n and each sample (a batch, cycling through `batches`, and a fresh random set
    of k units), the gradient norm at the net's input and at the first unit's input when the
    backward pass goes through the branch of those k units and the shortcut of the others.

    Returns {"n", "fixed", "input": [[norm per sample] per k], "unit": [...], "full_input", "full_unit"}."""
    rng = np.random.default_rng(seed)
    captured: list[torch.Tensor] = []
    hook = model.units[0].register_forward_pre_hook(lambda _m, args: captured.append(args[0]))
    with training_mode_kept(model), routed(model) as router, torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)  # the dropout shortcut draws its masks in the forward pass
        n = router.n
        at_input: list[list[float]] = [[] for _ in range(n + 1)]
        at_unit: list[list[float]] = [[] for _ in range(n + 1)]
        full_input, full_unit = [], []
        try:
            for s in range(samples):
                x, y = batches[s % len(batches)]
                x = x.detach().clone().requires_grad_(True)
                captured.clear()
                loss = F.cross_entropy(model(x).float(), y, reduction="sum")
                first = captured[0]
                router.full()
                gx, gu = torch.autograd.grad(loss, [x, first], retain_graph=True)
                full_input.append(_per_image_norm(gx))
                full_unit.append(_per_image_norm(gu))
                for k in range(n + 1):
                    router.path(rng.choice(n, size=k, replace=False).tolist())
                    gx, gu = torch.autograd.grad(loss, [x, first], retain_graph=k < n)
                    at_input[k].append(_per_image_norm(gx))
                    at_unit[k].append(_per_image_norm(gu))
                if log and (s + 1) % max(1, samples // 5) == 0:
                    log(f"  sample {s + 1}/{samples}: {n + 1} routes")
        finally:
            hook.remove()
            router.full()
    return {"n": n, "fixed": router.fixed, "input": at_input, "unit": at_unit,
            "full_input": full_input, "full_unit": full_unit}


def _stats(values: Sequence[float]) -> dict:
    a = np.asarray(values, dtype=np.float64)
    return {"mean": float(a.mean()), "std": float(a.std(ddof=1)) if len(a) > 1 else 0.0,
            "min": float(a.min()), "max": float(a.max())}


def _log(v: float) -> float:
    return math.log(v) if v > 0 else -math.inf


def summarise(sampled: dict, mass: float = MASS) -> dict:
    """Per k: the gradient of one path (mean, std, min, max), ln C(n, k), the total ln(C * mean) and
    its share, at the input and at the first unit; and the shortest window of lengths carrying `mass`."""
    n, fixed = sampled["n"], sampled["fixed"]
    log_paths = [log_binomial(n, k) for k in range(n + 1)]
    rows = []
    windows = {}
    for where in ("input", "unit"):
        stats = [_stats(v) for v in sampled[where]]
        log_total = [lp + _log(st["mean"]) for lp, st in zip(log_paths, stats)]
        norm = logsumexp(log_total)
        shares = [math.exp(t - norm) if norm > -math.inf else 0.0 for t in log_total]
        lo, hi, carried = shortest_window(shares, mass)
        log_window_paths = logsumexp(log_paths[lo:hi + 1])
        windows[where] = {"first": lo + fixed, "last": hi + fixed, "carried": carried,
                          "peak": max(range(n + 1), key=lambda k: shares[k]) + fixed,
                          "mean_length": math.fsum(sh * (k + fixed) for k, sh in enumerate(shares)),
                          "paths_fraction": math.exp(log_window_paths - n * math.log(2)),
                          "log_paths": log_window_paths}
        for k, (st, lt, sh) in enumerate(zip(stats, log_total, shares)):
            if where == "input":
                rows.append({"length": k + fixed, "k": k, "samples": len(sampled[where][k]),
                             "log_paths": log_paths[k], "path_fraction": math.exp(log_paths[k] - n * math.log(2))})
            key = "grad" if where == "input" else "unit_grad"
            rows[k].update({f"{key}_{s}": v for s, v in st.items()})
            rows[k].update({f"{key}_log_total": lt, f"{key}_share": sh})
    return {"n": n, "fixed": fixed, "mass": mass, "rows": rows, "window": windows["input"],
            "unit_window": windows["unit"], "full_grad": _stats(sampled["full_input"])["mean"],
            "full_unit_grad": _stats(sampled["full_unit"])["mean"]}


def training_batches(train, batch_size: int, count: int, device, seed: int) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """`count` training batches drawn without replacement (then cycled), the same for every net."""
    order = torch.randperm(len(train), generator=torch.Generator().manual_seed(seed))
    out = []
    for i in range(count):
        idx = order[(i * batch_size) % len(train):][:batch_size]
        if len(idx) < batch_size:  # wrap around the end of the permutation
            idx = torch.cat([idx, order[:batch_size - len(idx)]])
        out.append((train.x[idx].to(device), train.y[idx].to(device)))
    return out


def study(model: nn.Module, train, *, label: str, source: str, state: str, batch_size: int, samples: int,
          mass: float, seed: int, device=None, log: Callable[[str], None] | None = None) -> dict:
    """The whole measurement for one net: batches, sampled routes, summary; labelled for output."""
    tick = time.perf_counter()
    device = device or next(model.parameters()).device
    batches = training_batches(train, batch_size, min(samples, max(1, len(train) // batch_size)), device, seed)
    if log:
        log(f"{label} ({state}): {samples} samples of every path length, batch {batch_size}")
    sampled = sample_gradients(model, batches, samples, seed=seed, log=log)
    if not all(math.isfinite(v) for per_k in sampled["input"] for v in per_k):
        raise UserError(f"{source}: the gradient is not finite (NaN or Inf weights or loss; a diverged run?)")
    result = summarise(sampled, mass)
    result.update({"label": label, "run": source, "state": state, "samples": samples, "batch_size": batch_size,
                   "seed": seed, "wall_s": time.perf_counter() - tick})
    return result


def figure(results: list[dict], path: str | Path) -> Path:
    """Veit et al. 2016 Fig. 6, per net: (a) how many paths have each length, (b) the gradient
    magnitude of one path of that length (log scale; mean, min-max band), (c) the total gradient
    each length carries (share of the sum; shaded: the shortest window carrying the mass)."""
    from .. import figures

    plt = figures.pyplot()
    fig, (ax_n, ax_g, ax_t) = plt.subplots(1, 3, figsize=(13, 3.8))
    palette: dict[str, str] = {}
    for r in results:
        color = palette.setdefault(r["label"], f"C{len(palette)}")  # a net trained and at init: one colour
        label = f"{r['label']}, {r['state']}"
        style = {"linestyle": "--" if r["state"] == "init" else "-"}
        rows = r["rows"]
        lengths = [row["length"] for row in rows]
        ax_n.plot(lengths, [row["path_fraction"] for row in rows], color=color, label=label, **style)
        ax_g.semilogy(lengths, [row["grad_mean"] for row in rows], color=color, marker="o", ms=2.5, label=label,
                      **style)
        ax_g.fill_between(lengths, [max(row["grad_min"], 1e-300) for row in rows], [row["grad_max"] for row in rows],
                          color=color, alpha=0.15)
        ax_t.plot(lengths, [row["grad_share"] for row in rows], color=color, marker="o", ms=2.5, label=label, **style)
        w = r["window"]
        ax_t.axvspan(w["first"] - 0.5, w["last"] + 0.5, color=color, alpha=0.08)
    ax_n.set(xlabel="path length (units through their branch)", ylabel="share of all paths",
             title="(a) distribution of path length")
    ax_g.set(xlabel="path length", ylabel="gradient norm at the input", title="(b) gradient of one path")
    mass = results[0]["mass"]  # one mass per study: every net is measured with the same
    ax_t.set(xlabel="path length", ylabel="share of the total gradient",
             title=f"(c) total gradient per length (shaded: {100 * mass:.0f}%)")
    for ax in (ax_n, ax_g, ax_t):
        ax.legend(fontsize=7)
    fig.tight_layout()
    return figures.save(fig, path)
