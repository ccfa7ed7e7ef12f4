"""`resnet degrade`: plain vs residual twins across depths and seeds (He 2016a Fig. 6)."""

from __future__ import annotations

import signal
import time
from typing import Annotated

import typer
from rich.markup import escape

from .. import errors, output
from ..cli import command
from ..errors import UserError
from ..plots import degrade as plots
from ..results import degrade_grid
from ..results import degrade_view as view
from ..results.degrade import curve_bands
from ..results.degrade_grid import Grid
from ..runs.degrade_records import RUN_DIRS
from ..sweep import degrade_plan as deg
from ..spec.seeds import HELP as SEEDS_HELP
from ..spec.seeds import parse as parse_seeds
from ..spec.seeds import text as seeds_text
from ..runs.writer import make_dir
from ..sweep import engine as sweep
from . import cluster as launcher
from . import common


@command()
@launcher.options
def degrade(
    spec_file: Annotated[str | None, typer.Argument(
        metavar="SPEC", help="A degrade study (a grid of depths x plain/residual) or any spec file / bundled config as the base. "
             "Default: degrade/digits-8-26, the digits experiment of the encyclopedia-style \"Residual Connection\" "
             "article on residual connections (docs/reference.md): 8 and 26 layers, 10 seeds, 6 epochs.")] = None,
    depths: Annotated[list[str] | None, typer.Option(
        "--depths", help="Depths to compare: 8,26 (or repeat the flag). Default: the config's.")] = None,
    seeds: Annotated[str | None, typer.Option(
        "--seeds", help=f"Default: the config's. {SEEDS_HELP} (A count is a range now: 0..9 for ten.)")] = None,
    nets: Annotated[str | None, typer.Option("--nets", help="plain,residual (default both).")] = None,
    epochs: Annotated[int | None, typer.Option(
        "--epochs", min=1, help="optim.epochs for every run (lr steps: none if the base has none, else 50%/75%).")] = None,
    iters: Annotated[int | None, typer.Option(
        "--iters", min=1, help="optim.iters for every run (lr steps as for --epochs).")] = None,
    batch_size: common.BatchSize = None,
    lr: common.Lr = None,
    dataset: common.Dataset = None,
    data_dir: common.DataDir = None,
    device: common.Device = None,
    threads: common.Threads = None,
    out: Annotated[str | None, typer.Option(
        "--out", help="Output directory (runs/<net>-<depth>-seed<seed>/, degrade.json, degrade.png). Default: "
                      "runs/degrade/<config> (with a changed recipe, --epochs, --lr, --set ...: a folder of its own), "
                      "so the same command resumes. Finished runs found there are reused, interrupted ones resumed.")] = None,
    jobs: Annotated[int, typer.Option("--jobs", "-j", min=0, help="Runs at once, as for `resnet ablate` (1: in this "
                                                                  "process; 0: one per GPU, else one per free CPU core).")] = 1,
    list_: Annotated[bool, typer.Option("--list", help="Print one shell command per run (job arrays, GNU parallel) "
                                                       "and exit; each is safe to rerun.")] = False,
    only: Annotated[str | None, typer.Option("--only", help="Run a single ROW:SEED (what --list prints).")] = None,
    set_: common.Set = None,
    json_: common.Json = False,
    format_: common.StudyFormat = None,
    pairs: common.Pairs = False,
    output_file: common.OutputFile = None,
    *,
    cluster: launcher.Request,
) -> None:
    """Train plain and residual twins at several depths over several seeds; report the last epoch's
    training loss/accuracy, test accuracy and the first layer's gradient norm at step 1 (median and
    min-max over seeds, n shown), and draw training error against iteration."""
    fmt = output.choose(json_, format_)
    common.text_options(fmt, pairs, output_file)
    flags = dict(batch_size=batch_size, lr=lr, dataset=dataset, data_dir=data_dir, device=device, threads=threads)
    plan = deg.make_plan(
        spec_file, depths=deg.parse_depths(depths) if depths else None,
        seeds=parse_seeds(seeds) if seeds is not None else None, nets=deg.parse_nets(nets),
        overrides=deg.length_overrides(spec_file, epochs, iters) + common.flag_overrides(**flags),
        sets=set_ or [], out=out)
    if cluster.asked:
        return _on_cluster(plan, cluster, json_ or format_ is output.Format.JSON, fmt, pairs, output_file)
    replay = ["degrade", *deg.replay_args(spec_file, plan, epochs, iters, flags, set_ or []), "--out", str(plan.out)]
    if list_:
        return common.print_lines(sweep.list_commands(plan.study, replay))
    if only is not None:
        return _only(plan, only, fmt)
    make_dir(plan.out)  # a file in the way or an unwritable place: one line before any run starts
    log = output.stderr()
    n_runs = len(plan.depths) * len(plan.nets) * len(plan.seeds)
    log.print(f"degrade: {n_runs} run{'s' if n_runs != 1 else ''} "
              f"(depths {', '.join(map(str, plan.depths))}; {', '.join(plan.nets)}; seeds "
              f"{seeds_text(plan.seeds)}) from {plan.source} -> {plan.out}")
    # A resumed grid counts the runs left to train, not all it plans.
    grid = execute(plan, jobs=jobs or None, notify=view.Progress(log, sweep.to_train(plan.study)))
    # The command that resumes it, said if it is interrupted: the same grid, its folder named.
    resume = replay + (["--jobs", str(jobs)] if jobs != 1 else []) + (["--format", format_.value] if format_ else [])
    resume += (["--pairs"] if pairs else []) + (["--output", output_file] if output_file else [])
    _render(grid, fmt, log, pairs, output_file, common.rerun(resume))


def execute(plan: deg.Plan, jobs: int | None = 1, notify: sweep.Notify | None = None) -> Grid:
    """Train the grid's unfinished runs, then report every finished one (degrade.json, degrade.png)."""
    tick = time.perf_counter()
    result = deg.train(plan, jobs, notify)
    return finish(degrade_grid.collect(plan, result.outcomes, result.signum, tick))


def finish(grid: Grid) -> Grid:
    """The figure and degrade.json of a grid with finished runs."""
    if grid.records:
        grid.figure = plots.figure(grid.summaries, curve_bands(grid.records), grid.plan.out / degrade_grid.FIGURE_FILE)
        degrade_grid.write_result(grid)
    return grid


def _on_cluster(plan, request: launcher.Request, json_: bool, fmt, pairs: bool, save: str | None) -> None:
    """The grid's pending runs as one SLURM job array (docs/cluster.md), each task one run through
    the same lifecycle as here; with --wait, this command's own report once the array is done."""
    sp = plan.study
    if not request.dry_run:
        make_dir(plan.out)
        deg.adopt(sp)  # finished runs of an earlier version join the grid and are not resubmitted

    def report(submitted, failed: dict[str, str]) -> None:
        # What the array's tasks did, as a local sweep's outcomes: trained there, or failed (with the log).
        outcomes = {run.key: sweep.Outcome("completed") for run in (submitted.runs if submitted else [])}
        outcomes.update({key: sweep.Outcome("error", message, code=errors.FAILED) for key, message in failed.items()})
        _render(finish(degrade_grid.collect(plan, outcomes)), fmt, output.stderr(), pairs, save)

    # As `resnet ablate --launcher slurm`: the sbatch script (--dry-run) is printed as text unless --json.
    launcher.run(sp, request, json_, report)


def _only(plan, key: str, fmt) -> None:
    record, outcome = deg.only(plan, key)
    if outcome.status == "error":
        raise UserError(outcome.message, code=outcome.code or errors.USAGE)
    if record is not None:
        skipped = outcome.status == "skipped"
        line = {**{k: record.get(k) for k in view.RUN_KEYS}, "run_dir": str(plan.out / record["run_dir"]), "skipped": skipped}
        output.render([line], fmt, output.View(show=False, log=[view.run_text(record, skipped)]))
    if outcome.status == "interrupted":
        raise typer.Exit(errors.INTERRUPTED_INT)


def _render(grid, fmt, log, pairs: bool = False, save: str | None = None, resume: str | None = None) -> None:
    """The reused runs' lines, the grid (degrade_view.render), where its files went, and the exit code.
    Interrupted: no document goes to --output FILE (a partial table never replaces a whole one), and
    the line says the command that resumes (`resume`)."""
    outcomes = grid.outcomes
    reused = [r for r in grid.records
              if (o := outcomes.get(deg.key_of(grid.plan, r))) is None or o.status == "skipped"]
    for record in reused:
        log.print(view.run_text(record, True))
    interrupted = grid.signum is not None
    if interrupted and save is not None and fmt in output.TEXT_FORMATS:
        log.print(escape(f"{save} not written: the grid was interrupted ({len(grid.records)} of "
                         f"{grid.planned} runs finished), and a partial table never replaces a whole one"))
    else:
        view.render(grid, fmt, log, pairs=pairs, save=save)
    planned = len(grid.plan.depths) * len(grid.plan.nets) * len(grid.plan.seeds)
    done = sweep.tally(outcomes, planned, finished=len(reused), finished_words="reused")
    if grid.figure is not None:
        log.print(f"figure: {grid.figure}   results: {grid.plan.out / degrade_grid.RESULT_FILE}   {done}; wall time {grid.wall_s:.0f} s (training, every run's own time summed: "
                  f"{sum(r['wall_s'] or 0.0 for r in grid.records):.0f} s)")
        log.print(f"run directories (for resnet lesion, landscape, paths, report): "
                  f"{grid.plan.out / RUN_DIRS}/<net>-<depth>-seed<seed>")
    failed = {k: o for k, o in outcomes.items() if o.status == "error"}
    for key, o in failed.items():
        log.print(f"[red]run {key} failed[/]: {escape(o.message)}")
    if interrupted:
        log.print(escape(f"interrupted; to resume, rerun: {resume or grid.plan.out}"))
        log.print("finished runs are reused, a run cut off midway resumes from its last checkpoint")
        raise typer.Exit(errors.INTERRUPTED_TERM if grid.signum == signal.SIGTERM else errors.INTERRUPTED_INT)
    if failed:
        codes = {o.code for o in failed.values()}
        raise typer.Exit(errors.worst(codes))
