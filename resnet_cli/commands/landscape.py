"""`resnet landscape`: loss and accuracy around trained weights along filter-normalised random
directions (Li et al. 2018)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from .. import figures, output
from ..cli import command
from . import common

# The analysis modules import torch: they are imported where the command runs, so `--help` answers
# without loading it.

RunDirs = Annotated[list[str], typer.Argument(metavar="RUN_DIR",
    help="Run directories of trained nets (resnet train --out DIR).")]
Dims = Annotated[int, typer.Option("--dims", min=1, max=2,
    help="1: a line along d1 (line plot); 2: a plane over d1, d2 (contour plot).")]
Range = Annotated[tuple[float, float], typer.Option("--range",
    help="Steps along each direction, from LO to HI (1 = the weights' own filter norms).")]
Points = Annotated[int, typer.Option("--points", min=3,
    help="Grid points along each direction (2-D evaluates points^2).")]
Samples = Annotated[int, typer.Option("--samples", min=1,
    help="Training images the loss is measured on (a fixed subset).")]
Seed = Annotated[int, typer.Option("--seed", min=0, help="Seed of the random directions.")]
Device = Annotated[str, typer.Option("--device", help="auto, cpu, cuda or cuda:N.")]
FigOut = Annotated[str | None, typer.Option("--out",
    help="Figure path (PNG). Default: RUN_DIR/landscape-<dims>d.png for one run, ./landscape-<dims>d.png for several.")]

PAPER = ("Li et al. 2018 (CIFAR-10): without shortcuts the surface turns chaotic from 56 layers on "
         "(ResNet-56-noshort, -110-noshort); with shortcuts it stays smooth and nearly convex.")


@command()
def landscape(run_dirs: RunDirs, dims: Dims = 1, range_: Range = (-1.0, 1.0), points: Points = 21,
              samples: Samples = 1000, seed: Seed = 0, device: Device = "auto", threads: common.RunThreads = None,
              out: FigOut = None, json_: common.Json = False) -> None:
    """Training loss and accuracy on a grid around the trained weights; BN in eval mode (running stats)."""
    from ..analysis import landscape as land
    from ..analysis.trained import open_runs

    fmt = output.choose(json_)
    name = f"landscape-{dims}d.png"
    fig_path = figures.target(out, Path(run_dirs[0]) / name if len(run_dirs) == 1 else Path(name))
    trained = open_runs(run_dirs, device, threads)
    lo, hi = range_
    results = [land.scan(t, dims=dims, lo=lo, hi=hi, points=points, samples=samples, seed=seed, log=output.info)
               for t in trained]
    land.figure(results, fig_path)
    output.render(records(results, fig_path), fmt, view(results, fig_path, lo, hi))


def records(results: list[dict], fig_path: Path) -> list[dict]:
    """The JSON lines: every grid point of every run, then each run's summary; then the figure."""
    out = []
    for r in results:
        head = {"run": r["run"], "label": r["label"]}
        out += [{"event": "landscape_point", **head, **pt} for pt in r["points"]]
        out.append({"event": "landscape_summary", **head, "dims": r["dims"], "points": len(r["points"]),
                    "samples": r["samples"], "seed": r["seed"], "bn": r["bn"],
                    "loss_center": r["center"]["loss"], "accuracy_center": r["center"]["accuracy"],
                    **r["measures"], "wall_s": r["wall_s"]})
    return [*out, {"event": "figure", "path": str(fig_path)}]


def view(results: list[dict], fig_path: Path, lo: float, hi: float) -> output.View:
    return output.View(
        f"landscape {results[0]['dims']}-D: {len(results[0]['points'])} points in {lo:g}..{hi:g}, "
        f"{results[0]['samples']} train images, BN eval",
        ["net", "loss@0", "acc@0 %", "max loss", "minima", "TV/range", "nonconvex %"],
        lambda s: (s["label"], s["loss_center"], s["accuracy_center"], f"{s['loss_max']:.3g}",
                   str(s["local_minima"]), s["tv_ratio"], f"{100 * s['nonconvex_fraction']:.0f}"),
        keep=lambda rec: rec["event"] == "landscape_summary",
        caption="loss@0, acc@0: at the trained weights; minima: strict local minima of the loss on the grid; "
                "TV/range: total variation of log(loss) along each grid line over its range (1-2 for one valley, "
                "each extra bump adds about twice its height); nonconvex %: grid points where the loss curves "
                "downward (negative finite-difference curvature). One valley: 1 minimum, TV/range 1-2; "
                "chaotic: more of both", notes=[PAPER],
        log=[f"figure: {fig_path} ({sum(r['wall_s'] for r in results):.1f} s)"])
