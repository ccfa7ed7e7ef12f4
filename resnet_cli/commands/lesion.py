"""`resnet lesion`: delete residual units from a trained net at test time (Veit et al. 2016)."""

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
Compare = Annotated[str | None, typer.Option("--compare",
    help="Another run directory to set beside the first (e.g. the plain net).")]
MaxK = Annotated[int | None, typer.Option("--max-k", min=1,
    help="Delete up to K random units (default: all deletable units).")]
Draws = Annotated[int, typer.Option("--draws", min=1,
    help="Random draws of k units for each k (distinct subsets; all of them when fewer exist).")]
Seed = Annotated[int, typer.Option("--seed", min=0, help="Seed of the random draws.")]
Device = Annotated[str, typer.Option("--device", help="auto, cpu, cuda or cuda:N.")]
FigOut = Annotated[str | None, typer.Option("--out",
    help="Figure path (PNG). Default: RUN_DIR/lesion.png for one run, ./lesion.png for several.")]

# Veit et al. 2016 (ResNet-110 and VGG-15 on CIFAR-10), beside our numbers.
PAPER = ("Veit et al. 2016, ResNet-110 on CIFAR-10: deleting one unit barely changes the error except at "
         "downsampling units; deleting k units raises it smoothly. VGG (plain): any deleted layer -> chance (90%).")


@command()
def lesion(run_dirs: RunDirs, compare: Compare = None, max_k: MaxK = None, draws: Draws = 20, seed: Seed = 0,
           device: Device = "auto", threads: common.RunThreads = None, out: FigOut = None,
           json_: common.Json = False) -> None:
    """Delete each unit in turn (branch -> 0, shortcut kept), then k random units; test error each time."""
    from ..analysis import lesion as lesion_mod
    from ..analysis.trained import open_runs

    fmt = output.choose(json_)
    paths = list(run_dirs) + ([compare] if compare else [])
    fig_path = figures.target(out, Path(paths[0]) / "lesion.png" if len(paths) == 1 else Path("lesion.png"))
    trained = open_runs(paths, device, threads)
    results = [lesion_mod.study(t, max_k=max_k, draws=draws, seed=seed, log=output.info) for t in trained]
    lesion_mod.figure(results, fig_path)
    output.render(records(results, fig_path), fmt, views(results, fig_path))


def records(results: list[dict], fig_path: Path) -> list[dict]:
    """The JSON lines: per run its baseline, each unit deleted alone, each k; then the figure."""
    out = []
    for r in results:
        head = {"run": r["run"], "label": r["label"]}
        out.append({"event": "lesion_baseline", **head, **r["baseline"], "wall_s": r["wall_s"]})
        out += [{"event": "lesion_unit", **head, **u} for u in r["units"]]
        out += [{"event": "lesion_k", **head, **row} for row in r["k"]]
    return [*out, {"event": "figure", "path": str(fig_path)}]


def _where(u: dict) -> str:
    """A conv net's stage; a unit that names itself (ViT: block3.attn) by its name."""
    return f"stage {u['stage']}" if u["name"] == f"unit{u['unit'] - 1}" else u["name"]


def views(results: list[dict], fig_path: Path) -> list[output.View]:
    out = []
    for r in results:
        def mine(event: str, run: str = r["run"]):
            return lambda rec: rec["event"] == event and rec["run"] == run

        base = r["baseline"]["test_error"]
        out.append(output.View(
            f"{r['label']} ({r['run']}): one unit deleted; test error {base:.2f}% with none",
            ["unit", "where", "downsampling", "deletion", "test error %", "change"],
            lambda u: (str(u["unit"]), _where(u), "yes" if u["downsampling"] else "",
                       u["deletion"] or "cannot (shape changes)", u["test_error"],
                       f"{u['delta']:+.2f}" if u["delta"] is not None else "-"),
            keep=mine("lesion_unit")))
        undeletable = ([f"units {', '.join(map(str, r['undeletable']))} change shape and have no shortcut: not deleted"]
                       if r["undeletable"] else [])
        out.append(output.View(
            f"{r['label']}: k units deleted at random", ["k", "draws", "median %", "min %", "max %"],
            lambda k: (str(k["k"]), str(k["draws"]), k["median"], k["min"], k["max"]),
            keep=mine("lesion_k"), notes=undeletable))
    return [*out, output.View(show=False, notes=[PAPER], log=[f"figure: {fig_path}"])]
