"""`resnet gradnorm`: the gradient highway, measured (He 2016b sec. 3; He 2016a Fig. 7).

Three modes:
  resnet gradnorm [SPEC ...] [--variant V ...]   per-layer ||dE/dW|| and ||dE/dx_l|| at step 1 (or over K steps)
  resnet gradnorm --jacobian                     largest gain of d(output)/d(input), plain vs residual stacks
  resnet gradnorm --responses RUN_DIR ...        std of each layer's response after BN, trained runs
"""

from __future__ import annotations

import dataclasses
import statistics
from pathlib import Path
from typing import Annotated, Any

import typer

from .. import data as data_mod
from .. import figures, output
from .. import spec as spec_mod
from ..cli import command
from ..errors import UserError
from ..analysis.gradnorm import jacobian, layer_responses, norms
from ..analysis.gradnorm import signal as sig
from ..analysis.trained import open_runs
from . import common

DEFAULT_VARIANTS = ("plain", "original", "full_preact", "scale:0.5", "exclusive_gate")
# The base for --variant when no --base is given: ResNet-110 (He 2016b's net for Tables 1-2) with
# the papers' CIFAR recipe, on CIFAR-shaped synthetic data so that it runs offline.
DEFAULT_BASE: dict[str, Any] = {"model": {"family": "cifar", "depth": 110}, "data": {"dataset": "synthetic"}}
# Only the first steps are measured; the test split is evaluated once at the end by the trainer and
# is not part of this measurement, so a few images suffice.
_EVAL_IMAGES = 8


@command()
def gradnorm(
    specs: Annotated[list[str] | None, typer.Argument(
        metavar="SPEC|RUN_DIR",
        help="Spec files or bundled configs to compare (with --responses: trained run directories).")] = None,
    variant: Annotated[list[str] | None, typer.Option(
        "--variant", "-v",
        help="A variant of the base spec: a unit (original, full_preact, ...), a shortcut (plain, scale:0.5, "
             "exclusive_gate:-6, conv1x1, ...) or several joined by '+' (full_preact+scale:0.5). Repeatable. "
             f"Default when no SPEC is given: {', '.join(DEFAULT_VARIANTS)}.")] = None,
    base: Annotated[str | None, typer.Option(
        "--base", help="Base spec for --variant. Default: ResNet-110 on CIFAR-shaped synthetic data.")] = None,
    steps: Annotated[int, typer.Option("--steps", min=1, help="Average the norms over the first K steps.")] = 1,
    depth: common.Depth = None,
    dataset: common.Dataset = None,
    data_dir: common.DataDir = None,
    batch_size: common.BatchSize = None,
    seed: common.Seed = None,
    device: common.Device = None,
    threads: common.Threads = None,
    set_: common.Set = None,
    layers: Annotated[bool, typer.Option("--layers", help="Print every layer, specs side by side.")] = False,
    jacobian: Annotated[bool, typer.Option(
        "--jacobian", help="Largest singular value of d(output)/d(input) of plain and residual stacks of "
                           "conv-ReLU-conv blocks on one digit, by power iteration (the digits toy of the encyclopedia-style \"Residual Connection\" article on residual connections, "
                           "docs/reference.md; --seed draws "
                           "the kernels and the noise, default 0).")] = False,
    blocks: Annotated[list[int] | None, typer.Option(
        "--blocks", min=1, help="--jacobian: blocks in the stack (repeatable). Default 30.")] = None,
    kernel_std: Annotated[list[float] | None, typer.Option(
        "--kernel-std", min=0.0, help="--jacobian: std of the kernels (repeatable). Default 0.1 and 0.3.")] = None,
    responses: Annotated[bool, typer.Option(
        "--responses", help="Layer responses (He 2016a Fig. 7) of the trained RUN_DIRs given as arguments.")] = False,
    split: Annotated[str, typer.Option("--split", help="--responses: the split to run (test, train, val).")] = "test",
    out: Annotated[str | None, typer.Option(
        "--out", help="Figure path (PNG). Default: ./gradnorm.png; --responses: RUN_DIR/responses.png for one "
                      "run, ./responses.png for several. --jacobian draws no figure.")] = None,
    signal: Annotated[bool, typer.Option(
        "--signal", help="Signal propagation at init (Brock, De and Smith 2021) of the SPECs, or of ResNet-110 with "
                         "BN, without, Fixup, SkipInit and ReZero on digits; docs/normfree.md.")] = False,
    json_: common.Json = False,
) -> None:
    """Gradient norm of every weight layer and of each unit's input, side by side for several nets;
    the Jacobian gain of plain vs residual stacks; layer responses of trained runs."""

    fmt = output.choose(json_)
    if jacobian and responses:
        raise UserError("--jacobian and --responses are separate measurements: give one")
    if jacobian:
        if specs or variant:
            raise UserError("--jacobian measures the article's toy stacks; it takes no SPEC or --variant")
        seed_value = 0 if seed is None else seed
        # Single-channel 8x8 convolutions: more threads only add overhead, so 1 unless told otherwise.
        common.set_threads(threads, default=1)
        return _jacobian(fmt, blocks or [30], kernel_std or [0.1, 0.3], seed_value)
    if blocks or kernel_std:
        raise UserError("--blocks and --kernel-std belong to --jacobian")
    if responses:
        if not specs:
            raise UserError("--responses needs one or more RUN_DIRs (trained with `resnet train --out DIR`)")
        return _responses(fmt, specs, split, device or "cpu", out, layers, threads)
    overrides = common.flag_overrides(depth=depth, dataset=dataset, data_dir=data_dir, batch_size=batch_size,
                                      seed=seed, device=device, threads=threads)
    if signal:
        return _signal(fmt, specs or [], overrides, set_ or [], out)
    named = _named_specs(specs or [], variant or [], base, overrides, set_ or [])
    _norms(fmt, named, steps, out, layers)


# ---------------------------------------------------------------------------------------------
# Gradient norms


def _named_specs(specs: list[str], variants: list[str], base: str | None, overrides, sets) -> list[tuple[str, Any]]:

    if not specs and not variants:
        variants = list(DEFAULT_VARIANTS)
    if base is not None and not variants:
        raise UserError("--base is the base of --variant; give at least one --variant")
    named = []
    for path in specs:
        s = spec_mod.load(path, overrides, sets)
        named.append((Path(path).stem if Path(path).suffix else path, s))
    base_tree = spec_mod.tree_of(base if base else DEFAULT_BASE, overrides, sets)
    base_tree.pop("degrade", None)  # a degrade config is a spec plus its experiment section
    for v in variants:
        named.append((v, spec_mod.load(norms.variant_tree(base_tree, v), name=f"--variant {v}")))
    names = [n for n, _ in named]
    dupes = sorted({n for n in names if names.count(n) > 1})
    if dupes:
        raise UserError(f"the same spec is named twice: {', '.join(dupes)}")
    return named


def _norms(fmt, named, steps: int, out: str | None, per_layer: bool) -> None:

    log = output.stderr()
    fig_path = figures.target(out, Path("gradnorm.png"))
    cache: dict[str, Any] = {}
    results = []
    for name, s in named:
        key = repr(s.data)
        if key not in cache:
            data = data_mod.load(s.data)
            if data.test is not None and len(data.test) > _EVAL_IMAGES:
                data = dataclasses.replace(data, test=data_mod.Split(data.test.x[:_EVAL_IMAGES],
                                                                     data.test.y[:_EVAL_IMAGES]))
            cache[key] = data
        log.print(f"gradnorm: {name}: {s.model.family} depth {s.model.depth}, unit {s.model.unit}, "
                  f"shortcut {s.model.shortcut.kind}, {steps} step(s) of batch {s.optim.batch_size} "
                  f"on {s.data.dataset}")
        results.append(norms.measure_spec(name, s, steps, data=cache[key]))
    norms.figure(results, fig_path)
    records = [{"event": "layer_grad_norm", **r} for r in norms.rows(results)]
    _render(records, fmt, [_summary_view(results, steps), _layer_view(results, per_layer)], fig_path)


def _render(records: list[dict], fmt: output.Format, views, fig_path: Path) -> None:
    """The rows, then where the figure went: a `figure` object in JSON (as lesion, paths and plot
    write it), a line on stderr under the tables on a terminal."""
    output.render([*records, {"event": "figure", "path": str(fig_path)}] if fmt is output.Format.JSON else records,
                  fmt, views)
    if fmt is not output.Format.JSON:
        output.stderr().print(f"figure: {fig_path}")


def _summary_view(results, steps: int) -> output.View:

    def sci(v):  # the exponent is the point (1e-39 against 1.7): never cut, so these columns do not wrap
        return "-" if v is None else f"{v:.1e}"

    rows = []
    for r in results:
        s = norms.summary_row(r)
        rows.append((s["spec"], str(s["depth"]), output.params_str(s["params"]), sci(s["first_layer"]),
                     f"{sci(s['median_layer'])}\n{sci(s['min_layer'])}\n{sci(s['max_layer'])}", sci(s["last_layer"]),
                     sci(s["input_ratio"]), sci(s["direct_term"]), output.fmt(s["loss"], 3)))
    when = "at step 1" if steps == 1 else f"averaged over the first {steps} steps"
    return output.View(
        f"gradient norms {when}",
        ["spec", "depth", "params", "dW\nfirst", "dW med\nmin\nmax", "dW\nfc", "dx_0/\ndx_L", "lambda\n^L", "loss"],
        rows=lambda records: rows, compact=True,
        caption="dW: ||dE/dW|| of the first conv, of every weight layer, shortcut gates and projections included "
                "(median, min, max), of the fc "
                "layer; dx_0/dx_L: ||dE/dx_0|| / ||dE/dx_L||, at the first unit's input vs the last unit's output; "
                "lambda^L: the shortcut-only term of dx_L/dx_0 for scaled shortcuts (He 2016b eq. 5)")


def _layer_view(results, shown: bool) -> output.View:

    by_spec = [{layer["index"]: layer for layer in r.layers if layer["path"] == "main"} for r in results]
    indices = sorted(set().union(*[set(d) for d in by_spec]))
    rows = []
    for i in indices:
        name = next(d[i]["label"] for d in by_spec if i in d)
        rows.append((str(i), name, *[f"{d[i]['grad_norm']:.2e}" if i in d and d[i]["grad_norm"] else "-"
                                      for d in by_spec]))
    depth_rows = max(len(r.inputs) for r in results)
    for l in range(depth_rows):
        rows.append((str(l), f"dE/dx_{l}", *[f"{r.inputs[l]:.2e}" if l < len(r.inputs) and r.inputs[l]
                                                          else "-" for r in results]))
    return output.View("||dE/dW|| per main-path weight layer, then ||dE/dx_l|| at each unit's input",
                       ["index", "layer", *[output.fold(r.name) for r in results]], rows=lambda records: rows,
                       show=shown)


# ---------------------------------------------------------------------------------------------
# Jacobian gains


def _jacobian(fmt, blocks: list[int], stds: list[float], seed: int) -> None:

    output.stderr().print(f"gradnorm --jacobian: stacks of {', '.join(map(str, sorted(set(blocks))))} "
                          f"conv-ReLU-conv blocks on one 8x8 digit, kernel std {', '.join(map(str, stds))}, "
                          f"seed {seed}, float64 power iteration")
    results = [{"event": "jacobian_gain", **r} for r in jacobian.toy_gains(blocks=blocks, stds=stds, seed=seed)]
    for r in results:
        seed_fig = jacobian.SEED_GAINS.get((r["net"], r["kernel_std"])) if r["blocks"] == 30 else None
        r["seed_gain"] = seed_fig
    output.render(results, fmt, output.View(
        "largest gain of d(output)/d(input), at initialisation", ["net", "blocks", "kernel std", "gain", "article"],
        lambda r: (r["net"], str(r["blocks"]), f"{r['kernel_std']:g}", f"{r['gain']:.2e}",
                   f"{r['seed_gain']:.1e}" if r["seed_gain"] is not None else "-"),
        caption="spectral norm by power iteration on J^T J (JVP + VJP; J never built). article: the "
                      "\"Residual Connection\" article's digits toy, its own random draws (over its seeds 1-9: plain <= 1e-39 and 1e-13..1e-10, "
                      "residual 1.3-1.9 and 23-280)"))


# ---------------------------------------------------------------------------------------------
# Layer responses


def _responses(fmt, run_dirs: list[str], split: str, device: str, out: str | None, per_layer: bool,
               threads: int | None = None) -> None:
    if split not in ("train", "val", "test"):
        raise UserError(f"--split {split}: valid splits are train, val, test")
    fig_path = figures.target(out, Path(run_dirs[0]) / "responses.png" if len(run_dirs) == 1 else Path("responses.png"))
    runs = []
    for path, trained in zip(run_dirs, open_runs(run_dirs, device, threads)):
        output.stderr().print(f"gradnorm --responses: {path} ({split} split)")
        runs.append(layer_responses.responses(trained, split=split))
    labels = [r["label"] for r in runs]
    for r in runs:
        r["name"] = r["label"] if labels.count(r["label"]) == 1 else f"{r['label']} ({Path(r['run']).name})"
    layer_responses.responses_figure(runs, fig_path)
    records = [{"event": "layer_response", "spec": r["name"], "run": r["run"], **layer}
               for r in runs for layer in r["layers"]]
    _render(records, fmt, _response_views(runs, split, per_layer), fig_path)


def _response_views(runs: list[dict], split: str, per_layer: bool) -> list[output.View]:
    rows = []
    for r in runs:
        stds = [layer["std"] for layer in r["layers"]]
        rows.append((r["name"], str(len(stds)), f"{statistics.mean(stds):.3f}", f"{statistics.median(stds):.3f}",
                     f"{min(stds):.3f}", f"{max(stds):.3f}"))
    n = max(len(r["layers"]) for r in runs)
    layer_rows = [(str(i + 1), *[f"{r['layers'][i]['std']:.3f}" if i < len(r["layers"]) else "-" for r in runs])
                  for i in range(n)]
    return [output.View(f"layer responses after BN ({split} split)",
                        ["run", "layers", "mean std", "median std", "min", "max"], rows=lambda records: rows,
                        caption="He 2016a Fig. 7: ResNets respond with smaller std than plain nets, "
                                "and smaller still as they deepen"),
            output.View("std of each layer's response", ["index", *[output.fold(r["name"]) for r in runs]],
                        rows=lambda records: layer_rows, show=per_layer)]


def _signal(fmt: output.Format, specs: list[str], overrides: list[tuple[str, Any]], sets: list[str],
           out: str | None) -> None:
    """Signal-propagation plots at initialisation (Brock, De and Smith 2021), for the nets given as
    SPECs or, by default, for the five nets of analysis/gradnorm/signal.py."""
    fig_path = figures.target(out, Path("signal.png"))
    if specs:
        named = [(Path(p).stem if Path(p).suffix else p, spec_mod.load(p, overrides, sets)) for p in specs]
    else:
        base = spec_mod.merge(sig.BASE, {"optim": {"batch_size": sig.BATCH}})
        named = [(name, spec_mod.load(base, [*net.items(), *overrides], sets, name=f"--signal {name}"))
                 for name, net in sig.NETS.items()]
    cache: dict[str, Any] = {}
    results = []
    for name, s in named:
        key = repr(s.data)
        if key not in cache:
            cache[key] = data_mod.load(s.data)
        results.append(sig.measure_spec(name, s, cache[key]))
    sig.figure(results, fig_path)
    last = {(r.name, len(r.units)) for r in results}
    records = [{"event": "signal_unit", **r} for r in sig.rows(results)]
    _render(records, fmt, output.View(
        "signal propagation at initialisation, at the last residual unit",
        ["spec", "units", "sq. mean", "variance", "branch var."],
        row=lambda r: (r["spec"], str(r["unit"]), f"{r['sq_mean']:.3g}", f"{r['var']:.3g}", f"{r['branch_var']:.3g}"),
        keep=lambda r: (r["spec"], r["unit"]) in last,
        caption="per unit, over one batch: the average channel squared mean and variance of the unit's output "
                "and the variance of what its branch adds (--json: every unit)"), fig_path)
