"""`resnet ablate`: a study (shipped name or YAML path) as many resumable runs and one honest table."""

from __future__ import annotations

import signal
import sys
import time
from dataclasses import replace
from typing import Annotated, Optional

import typer
from rich.live import Live
from rich.markup import escape

from .. import errors, figures, output, writable
from ..cli import command
from ..errors import UserError
from ..sweep import budgets as budgets_mod
from ..results import report
from ..sweep import engine as sweep
from ..plots import study_bars
from ..sweep import plan as study_mod
from ..sweep import study_file
from ..results import budget_claims, formats, power, registration, study, table as study_table
from ..sweep import asked as asked_mod
from ..sweep import family as family_mod
from ..spec.seeds import HELP as SEEDS_HELP
from ..spec.seeds import parse as parse_seeds
from ..spec.seeds import text as seeds_text
from . import cluster as launcher
from . import common


Figure = Annotated[Optional[str], typer.Option("--figure", help="Bar chart PNG (default RESULTS/STUDY.png).")]


@command()
@launcher.options
def ablate(
    study: Annotated[str, typer.Argument(help=f"A shipped study ({', '.join(study_file.shipped())}) "
                                              "or a study YAML file.")],
    preset: Annotated[str, typer.Option("--preset", help="paper: the papers' recipe (GPU-days); quick: a CPU budget "
                                                         "(8x8 digits: seconds to a few minutes a run; 5.9 min to 2 h 9 min a study "
                                                         "with --stack 16 --jobs 2 on 2 busy cores, docs/ablate.md; the first "
                                                         "line estimates yours); or a preset the study defines.")] = "paper",
    out: Annotated[Optional[str], typer.Option("--out", help="Results directory (default runs/ablate/STUDY-PRESET; "
                                                             "with --set, runs/ablate/STUDY-PRESET-set-..., a folder "
                                                             "of that recipe's own); one run directory per (row, "
                                                             "seed) inside.")] = None,
    jobs: Annotated[int, typer.Option("--jobs", "-j", min=0, help="Runs at once (0: one per GPU, else one per free CPU "
                                                                  "core, threads split).")] = 0,
    seeds: Annotated[Optional[str], typer.Option("--seeds", help=f"Override the study's seeds. {SEEDS_HELP}")] = None,
    list_: Annotated[bool, typer.Option("--list", help="Print one shell command per run (job arrays, GNU "
                                                       "parallel) and exit.")] = False,
    claims: Annotated[bool, typer.Option("--claims", help="Print the claims this preset will test (one Holm family), "
                                                          "what the paper states but the rule leaves untested, and "
                                                          "the power line; run nothing.")] = False,
    only: Annotated[Optional[str], typer.Option("--only", help="Run a single ROW:SEED (what --list prints).")] = None,
    threads: Annotated[Optional[str], typer.Option(
        "--threads", parser=common.thread_count, metavar="auto|N", help="CPU threads per run (run.threads; default auto: the "
                                                          "cores other processes leave free, split between the --jobs workers).")] = None,
    budgets: Annotated[Optional[str], typer.Option(
        "--budgets", help="Also run every row at these multiples of the preset's length (lr milestones "
                          "scaled), e.g. 1,2,4, and say per row: trains, slow, falling or fails.")] = None,
    threshold: Annotated[Optional[float], typer.Option(
        "--threshold", help="Test error % a row must reach for --budgets (default: the study's fail_above).")] = None,
    budget_rows: Annotated[budget_claims.Retrain, typer.Option(
        "--budget-rows", case_sensitive=False,
        help="With --budgets: retrain beyond 1x every row (all), or only the rows of the declared claims "
             "unresolved at 1x, or unresolved or reversed (not-in-order); needs the study's 1x runs finished.")]
    = budget_claims.Retrain.ALL,
    figure: Figure = None,
    set_: common.Set = None,
    json_: common.Json = False,
    format_: common.StudyFormat = None,
    pairs: common.Pairs = False,
    output_file: common.OutputFile = None,
    stack: common.Stack = None,
    *,
    cluster: launcher.Request,
) -> None:
    """Run a study: rows x seeds, each a resumable run directory; finished runs are skipped.
    Prints a table (or one JSON object per row) with the paper's figure beside ours."""

    # run.threads is resume-free (where a run executes, not what it is): finished runs are still reused.
    sets = list(set_ or []) + ([f"run.threads={threads}"] if threads is not None else [])
    fmt = output.choose(json_, format_)  # a clash of --json and --format is one line before anything runs
    common.text_options(fmt, pairs, output_file)
    if fmt in output.TEXT_FORMATS and (only is not None or (budgets is not None and fmt is output.Format.LATEX)):
        raise UserError(f"--format {fmt.value} renders a study's table; --only prints its own records (use --json), "
                        "and --budgets prints json, csv or markdown")
    plan = study_mod.plan(study, preset=preset, results=out, sets=sets, seeds=None if seeds is None else parse_seeds(seeds))
    writable.check_dir(plan.results)  # a file in the way: one line now, not a traceback per run later
    if claims:
        recs = registration.records(plan)
        return output.render(recs, fmt, output.View(draw=lambda width: registration.render(recs, plan.title, width)))
    if budgets is not None:
        plan = budgets_mod.expand(plan, budgets_mod.parse(budgets), _rows_to_retrain(plan, budget_rows.value))
    elif budget_rows is not budget_claims.Retrain.ALL:
        raise UserError("--budget-rows chooses which rows --budgets retrains: give --budgets too, e.g. --budgets 1,2,4")
    if list_:
        output.info(escape(_power_line(plan)))
    if cluster.asked:
        if stack is not None:
            output.info("--stack: a SLURM array task trains one run; the runs are not stacked")
        fig_path = figures.target(figure, plan.results / f"{plan.name}.png", "--figure") if cluster.wait else None

        def final(submitted, failed: dict[str, str]) -> None:  # --wait: the table a local sweep prints
            _study_table(plan, failed, fmt, fig_path, pairs=pairs, save=output_file)
            for key, message in failed.items():
                output.info(f"[red]run {key} failed[/]: {escape(message)}")
            if failed:
                raise typer.Exit(errors.FAILED)

        if not cluster.dry_run:
            plan = _record_family(plan)
        return launcher.run(plan, cluster, json_ or format_ is output.Format.JSON, final)
    if list_:
        replay = ["ablate", plan.source, "--preset", plan.preset, "--out", str(plan.results)]
        if plan.budgets != [1]:
            replay += ["--budgets", ",".join(str(b) for b in plan.budgets)]
        replay += [word for item in sets for word in ("--set", item)]
        # The seeds asked, so each line records them (asked.json), not the study file's defaults.
        replay += ["--seeds", seeds_text(plan.seeds)] if seeds is not None else []
        return common.print_lines(sweep.list_commands(plan, replay))
    if only is not None:
        return _only(plan, only, fmt)
    fig_path = figures.target(figure, plan.results / f"{plan.name}.png", "--figure")  # before hours of training
    # The command that resumes this sweep, said if it is interrupted: the same plan, its folder named.
    resume = ["ablate", plan.source, "--preset", plan.preset, "--out", str(plan.results)]
    resume += ["--seeds", seeds_text(plan.seeds)] if seeds is not None else []
    resume += [w for item in set_ or [] for w in ("--set", item)] + (["--threads", str(threads)] if threads is not None else [])
    resume += ["--budgets", budgets] if budgets is not None else []
    resume += (["--jobs", str(jobs)] if jobs else []) + (["--stack", stack] if stack not in (None, "all") else
                                                        ["--stack"] if stack == "all" else [])
    resume += (["--format", format_.value] if format_ is not None else []) + (["--pairs"] if pairs else [])
    resume += ["--output", output_file] if output_file is not None else []
    return _sweep(plan, jobs, fmt, fig_path, threshold, common.stack_cap(stack), pairs, output_file,
                  common.rerun(resume))


def _rows_to_retrain(plan, which: str) -> set[str] | None:
    """--budget-rows: the rows of the claims not in order at 1x, read from the finished plain study
    (None: every row). One line where the 1x study is not finished or declares no claims."""
    if which == "all":
        return None
    if not plan.family.declared:
        raise UserError(f"--budget-rows {which}: study '{plan.name}' declares no claims; use --budget-rows all")
    records = report.planned(plan)
    left = [r for r in records if r.status not in ("completed", "diverged")]
    if left:
        raise UserError(f"--budget-rows {which}: {len(left)} of the study's {len(records)} runs at 1x are not finished; "
                        f"run `resnet ablate {plan.source} --preset {plan.preset} --out {plan.results}` first")
    (table,) = report.aggregate(records)
    table.family = _record_family(plan).family
    rows = budget_claims.rows_of_claims(study.compute(table), which)
    output.info(escape(f"--budget-rows {which}: {len(rows)} of {len(plan.rows)} rows retrained beyond 1x"
                       + (f" ({'; '.join(sorted(rows))})" if rows else ": every declared claim is in order at 1x")))
    return rows


def _power_line(plan) -> str:
    """Before any run: whether the plan's seeds can resolve its claims at all (results/power.py)."""
    m, what = plan.family_size()
    return f"{plan.title} [preset {plan.preset}]: {power.plan_line(len(plan.seeds), m, plan.family.effect, what)}"


def _record_family(plan):
    """The claims fixed in the results directory before the first run (sweep/family.py); where they
    were fixed by an earlier start, those decide, and a changed study file is said in one line."""
    writable.check_dir(plan.results)
    claims = plan.results / family_mod.FILE
    # A full disk: one line naming claims.json (record_once removes its own temporary file).
    with errors.writing(claims):
        recorded = family_mod.record_once(plan.results, plan.family, plan.name, plan.preset, plan.source)
    with errors.writing(plan.results / asked_mod.FILE):  # what `resnet report` judges the directory by
        asked_mod.record(plan.results, plan.name, plan.preset, plan.source, plan.seeds, plan.sets)
    if recorded.note:
        output.info(escape(recorded.note))
    return replace(plan, family=recorded)


def _only(plan, key: str, fmt) -> None:

    run = plan.find(key)
    plan = _record_family(plan)
    outcome = sweep.run_one(plan, run)
    rec = report.seed_result(run.path)
    record = {"event": "run", "study": plan.name, "preset": plan.preset, "index": run.row.index,
              "row": run.row.label, "seed": run.seed, "status": rec.status if rec else outcome.status,
              "test_error": rec.test_error if rec else None, "train_loss": rec.train_loss if rec else None,
              "run_dir": str(run.path), "skipped": outcome.status == "skipped"}
    tables = report.aggregate([rec] if rec else [])
    for table in tables:
        table.family = plan.family
    output.render([record], fmt, [output.View(draw=lambda width, r=study.compute(table): study_table.render_all(r, width=width))
                                  for table in tables])
    status = rec.status if rec else outcome.status
    if status == "diverged":
        raise typer.Exit(errors.DIVERGED)
    if outcome.status == "interrupted":
        raise typer.Exit(errors.INTERRUPTED_INT)
    if outcome.status == "error":
        raise UserError(outcome.message)


class _Progress:
    """The sweep as it goes, on stderr: a live table on a terminal, one line per finished run
    otherwise. stdout stays for the final table or JSON."""

    def __init__(self, plan, console):
        self.plan, self.console = plan, console
        self.running: set[str] = set()
        self.failed: dict[str, str] = {}
        # Each run's record, read once here and again only when an event names it; each row's statistics
        # recomputed only when its runs changed (study.compute's `previous`).
        self.records = {run.key: rec for run, rec in zip(plan.runs, report.planned(plan))}
        self.result = None
        self.finished = 0
        self.total = sweep.to_train(plan)  # a resumed sweep counts what is left, not what was planned
        self.live = None
        if sys.stderr.isatty():
            # redirect_stdout=False: rich's Live would otherwise capture stdout while it runs.
            self.live = Live(self.table(), console=console, refresh_per_second=2, transient=True,
                             redirect_stdout=False, redirect_stderr=False)

    def table(self):
        self.result = study.compute(report.aggregate(list(self.records.values()))[0], live=True, previous=self.result)
        return study_table.render(self.result, live=True, width=self.console.width)

    def __call__(self, run, outcome) -> None:
        self._update(run, outcome)
        if self.live is not None:
            self.live.update(self.table())

    def _update(self, run, outcome) -> None:
        if outcome is None:
            self.running.add(run.key)
        else:
            self.running.discard(run.key)
            self.finished += 1
            if outcome.status == "error":
                self.failed[run.key] = outcome.message
            if self.live is None:
                rec = report.seed_result(run.path) if outcome.status != "error" else None  # not another spec's
                err = f", test error {rec.test_error:.2f}%" if rec and rec.test_error is not None else ""
                extra = f": {outcome.message}" if outcome.status == "error" else ""
                self.console.print(escape(f"[{self.finished}/{self.total}] {run.path.name}: "
                                          f"{outcome.status}{err} ({outcome.wall_s:.0f} s){extra}"))
        self.records[run.key] = report.planned_run(self.plan, run, run.key in self.running, self.failed.get(run.key))


def _sweep(plan, jobs: int, fmt, figure_path, threshold: float | None = None, stack: int = 0,
           pairs: bool = False, save: str | None = None, resume: str = "") -> None:

    sweep.check_data(plan)  # before any run directory is made
    plan = _record_family(plan)
    console = output.stderr()
    about = plan.preset_about or "as the study defines it"
    if plan.changed:  # the recipe actually run, not only the preset's text
        about += f"; run here with {plan.changed}"
    console.print(escape(f"{plan.title} [preset {plan.preset}: {about}]: {len(plan.rows)} rows x "
                         f"{len(plan.seeds)} seeds in {plan.results}: {sweep.preview(plan, jobs)}"))
    console.print(escape(_power_line(plan)))
    if stack:
        from ..sweep.stacks import units

        for row, reason in units(plan.runs, stack)[1].items():
            console.print(escape(f"--stack: row {row} trains its seeds one after another: {reason}"))
    progress = _Progress(plan, console)
    tick = time.perf_counter()
    if progress.live is not None:
        progress.live.start()
    try:
        result = sweep.execute(plan, jobs=jobs or None, notify=progress, stack=stack)
    finally:
        if progress.live is not None:
            progress.live.stop()
    outcomes = result.outcomes.values()
    console.print(f"{sweep.tally(result.outcomes, len(plan.runs))}, in {time.perf_counter() - tick:.0f} s")

    interrupted = result.signum is not None
    _study_table(plan, progress.failed, fmt, figure_path, threshold, pairs, save,
                 document=not (interrupted and save is not None))
    if interrupted and save is not None and fmt in output.TEXT_FORMATS:
        console.print(escape(f"{save} not written: the sweep was interrupted, and a partial table never "
                             "replaces a whole one"))
    if progress.live is not None:  # its table has gone; without it, each run's line has said so already
        for key, message in progress.failed.items():
            console.print(f"[red]run {key} failed[/]: {escape(message)}")
    if interrupted:
        console.print(escape(f"interrupted; to resume, rerun: {resume}"))
        console.print("finished runs are reused, a run cut off midway resumes from its last checkpoint")
        raise typer.Exit(errors.INTERRUPTED_TERM if result.signum == signal.SIGTERM else errors.INTERRUPTED_INT)
    codes = {o.code for o in outcomes if o.status == "error"}
    if codes:
        raise typer.Exit(errors.worst(codes))


def _study_table(plan, failed: dict[str, str], fmt, figure_path, threshold: float | None = None,
                 pairs: bool = False, save: str | None = None, document: bool = True) -> None:
    """The study's table from its run directories (`failed`: ROW:SEED -> why), and its figure."""
    tables = report.aggregate(report.planned(plan, set(), failed))
    for table in tables:
        table.family = plan.family
    if plan.budgets != [1]:
        _budget_table(tables, threshold, fmt, plan, save)
        return
    result = study.compute(tables[0])  # every statistic once; the table, the JSON and the figure compute none
    if fmt in output.TEXT_FORMATS:
        if not document:  # interrupted with --output FILE: nothing written (the caller says so)
            return
        output.write(formats.studies_text([study_table.records(result, exact=True)], fmt.value, pairs,
                                          recipe=plan.changed), save)
    else:
        output.render(study_table.records(result), fmt,
                      output.View(draw=lambda width: study_table.render_all(result, width=width)))
    if any(row.n or row.diverged for row in result.rows):
        output.info(f"figure: {study_bars.figure(result, figure_path)}")


def _budget_table(tables, threshold: float | None, fmt, plan, save: str | None = None) -> None:

    (btable,) = budgets_mod.build(tables, threshold)
    if btable.threshold is None:  # the claims across budgets need no threshold; the rows' verdicts do
        if not plan.family.declared:
            raise UserError(f"--budgets: study '{plan.name}' states no fail_above; give --threshold PERCENT, "
                            "e.g. --threshold 20")
        output.info(f"--budgets: study '{plan.name}' states no fail_above: the rows' slow-or-fails verdicts need "
                    "--threshold PERCENT; its claims are decided at each budget all the same")
    budget_claims.show(btable, tables, plan.family if plan.family.declared else None, fmt, save)
