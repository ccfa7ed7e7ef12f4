"""`resnet plot`: training curves of one or many runs, drawn as He 2016a draws them."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from .. import figures, output
from ..cli import command
from ..plots import curves
from . import common

RunDirs = Annotated[list[str], typer.Argument(metavar="RUN_DIR", help="Run directories (resnet train --out DIR).")]
FigOut = Annotated[str | None, typer.Option("--out",
    help="Figure path (PNG). Default: RUN_DIR/curves.png for one run, ./curves.png for several.")]


@command()
def plot(run_dirs: RunDirs, out: FigOut = None, json_: common.Json = False) -> None:
    """Error against iterations: training error thin, test error bold (He 2016a Fig. 1, 4, 6)."""
    fmt = output.choose(json_)
    fig_path = figures.target(out, Path(run_dirs[0]) / "curves.png" if len(run_dirs) == 1 else Path("curves.png"))
    runs = [curves.read_run(p) for p in run_dirs]
    curves.figure(runs, fig_path)
    keys = ("run", "label", "status", "dataset", "seed", "epochs", "iterations", "train_error", "test_error",
            "test_error_epoch")
    records = [{"event": "run", **{k: r[k] for k in keys}} for r in runs]
    # The directory the runs share is said once, below the table; the run column holds what differs.
    base, names = output.short_paths([r["run"] for r in runs])
    short = dict(zip([r["run"] for r in runs], names))
    output.render([*records, {"event": "figure", "path": str(fig_path)}], fmt, output.View(
        "training runs (last epoch)", ["net", "status", "epochs", "iters", "train\nerror %", "test\nerror %", "run"],
        lambda r: (r["label"], r["status"], str(r["epochs"]), r["iterations"], r["train_error"], r["test_error"],
                   short[r["run"]]),
        keep=lambda r: r["event"] == "run", justify_right=[False, False, True, True, True, True, False],
        caption=f"runs in {base}/" if base else None, log=[f"figure: {fig_path}"]))
