"""`resnet paths`: which path lengths carry the gradient (Veit et al. 2016 sec. 5)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import torch
import typer

from .. import data as data_mod
from .. import figures, output
from .. import spec as spec_mod
from ..cli import command
from ..errors import UserError
from ..analysis import paths as paths_mod
from ..analysis.trained import check_dir, open_runs, pick_device, run_label
from ..model import build_model
from ..runs.files import SPEC
from ..runs.reader import spec_as_written
from . import common

Sources = Annotated[list[str], typer.Argument(metavar="RUN_DIR|SPEC",
    help="Run directories of trained nets (resnet train --out DIR); with --init also spec files or bundled configs.")]
Init = Annotated[bool, typer.Option("--init",
    help="Measure the nets at initialisation: a run directory's spec (or a SPEC), fresh weights from run.seed.")]
WithInit = Annotated[bool, typer.Option("--with-init",
    help="Beside each trained run, its net at initialisation (weights drawn from its run.seed): one table, one figure.")]
Samples = Annotated[int, typer.Option("--samples", min=1,
    help="Samples per path length: each a training batch and a fresh random set of k units (Veit et al.: 1,000).")]
Mass = Annotated[float, typer.Option("--mass",
    help="Report the shortest window of path lengths that carries this share of the total gradient.")]
BatchSize = Annotated[int | None, typer.Option("--batch-size", min=1,
    help="Images per batch (default: the spec's optim.batch_size).")]
Seed = Annotated[int, typer.Option("--seed", min=0, help="Seed of the batches and of the random unit sets.")]
Device = Annotated[str, typer.Option("--device", help="auto, cpu, cuda or cuda:N.")]
FigOut = Annotated[str | None, typer.Option("--out",
    help="Figure path (PNG). Default: RUN_DIR/paths.png for one run directory, ./paths.png otherwise.")]

PAPER = ("Veit et al. 2016, ResNet-110 on CIFAR-10 (54 units): almost all of the gradient comes from paths "
         "5-17 units long, 0.45% of all paths.")


@command()
def paths(sources: Sources, init: Init = False, with_init: WithInit = False, samples: Samples = 50, mass: Mass = 0.9,
          batch_size: BatchSize = None, seed: Seed = 0, device: Device = "auto", threads: common.RunThreads = None,
          set_: common.Set = None, out: FigOut = None, json_: common.Json = False) -> None:
    """Gradient carried by paths of each length: backward through k units' branches, the other units' shortcuts."""
    fmt = output.choose(json_)
    if not 0 < mass <= 1:
        raise UserError(f"--mass {mass}: give a share of the total gradient in (0, 1], e.g. 0.9")
    if init and with_init:
        raise UserError("--init measures the nets at initialisation only; --with-init adds them beside trained "
                        "runs: give one")
    if set_ and not init:
        raise UserError("--set changes the spec of a net at initialisation: give it with --init")
    single_dir = len(sources) == 1 and Path(sources[0]).is_dir()
    fig_path = figures.target(out, Path(sources[0]) / "paths.png" if single_dir else Path("paths.png"))
    if init:  # specs or run directories, fresh weights: nothing trained is opened
        dev = pick_device(device)
        nets = [("init", *_at_init(s, set_ or [], dev)) for s in sources]
        common.set_threads(threads, default=nets[0][4].run.threads)  # before the first backward pass
    else:
        trained = open_runs(sources, device, threads)
        dev = trained[0].device
        nets = []
        for source, t in zip(sources, trained):
            nets.append(("trained", t.label, str(t.path), t.model, t.spec, t.data))
            if with_init:
                nets.append(("init", *_at_init(source, [], dev)))
    results = []
    for state, label, source, model, spec, data in nets:
        if data.train is None:
            raise UserError(f"{source}: paths needs in-memory data (digits, synthetic, cifar); "
                            f"{spec.data.dataset} image folders are not supported")
        results.append(paths_mod.study(model, data.train, label=label, source=source, state=state,
                                       batch_size=batch_size or spec.optim.batch_size, samples=samples, mass=mass,
                                       seed=seed, device=dev, log=output.info))
    paths_mod.figure(results, fig_path)
    output.render(records(results, fig_path), fmt, views(results, fig_path))


def _at_init(source: str, sets: list[str], device):
    """(label, source, model, spec, data) of a net at initialisation, from a spec or a run directory's spec."""
    p = Path(source)
    if p.is_dir():
        spec = spec_mod.load(spec_as_written(check_dir(p)), [], sets, name=str(p / SPEC))
    else:
        spec = spec_mod.load(source, [], sets)
    data = data_mod.load(spec.data)
    torch.manual_seed(spec.run.seed)  # as `resnet train` draws its initial weights
    model = build_model(spec.model, data.in_channels, spec.model.num_classes or data.num_classes).to(device)
    return run_label(spec), source, model, spec, data


def records(results: list[dict], fig_path: Path) -> list[dict]:
    """The JSON lines: per net each path length, then its summary; then the figure."""
    out = []
    for r in results:
        head = {"run": r["run"], "label": r["label"], "state": r["state"]}
        out += [{"event": "paths_k", **head, **row} for row in r["rows"]]
        out.append({"event": "paths_summary", **head, "units": r["n"] + r["fixed"], "routable": r["n"],
                    "mass": r["mass"], "window": r["window"], "unit_window": r["unit_window"],
                    "full_grad": r["full_grad"], "full_unit_grad": r["full_unit_grad"],
                    "samples": r["samples"], "batch_size": r["batch_size"], "seed": r["seed"],
                    "wall_s": r["wall_s"]})
    return [*out, {"event": "figure", "path": str(fig_path)}]


def views(results: list[dict], fig_path: Path) -> list[output.View]:
    out = []
    for r in results:
        w, uw = r["window"], r["unit_window"]
        out.append(output.View(
            f"{r['label']}, {r['state']} ({r['run']}): {r['n']} units with a shortcut, {r['samples']} samples per length",
            ["length", "log10 paths", "grad/path", "std", "total %", "unit grad/path", "unit total %"],
            lambda row: (str(row["length"]), f"{row['log_paths'] / 2.302585092994046:.1f}",
                         f"{row['grad_mean']:.3g}", f"{row['grad_std']:.2g}", f"{100 * row['grad_share']:.1f}",
                         f"{row['unit_grad_mean']:.3g}", f"{100 * row['unit_grad_share']:.1f}"),
            keep=lambda rec, r=r: rec["event"] == "paths_k" and (rec["run"], rec["state"]) == (r["run"], r["state"]),
            caption=f"{100 * r['mass']:.0f}% of the total gradient at the input: lengths {w['first']}-{w['last']} "
                    f"({100 * w['paths_fraction']:.3g}% of all paths), peak {w['peak']}, mean {w['mean_length']:.1f} "
                    f"(all paths: {r['fixed'] + r['n'] / 2:g}); at the first unit: {uw['first']}-{uw['last']}",
            notes=[f"{r['label']} has no shortcuts: one path, through all {r['fixed']} units"] if r["n"] == 0 else []))
    return [*out, output.View(show=False, notes=[PAPER], log=[f"figure: {fig_path}"])]
