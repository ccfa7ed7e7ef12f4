"""`resnet ablate STUDY --stack [K]`: a row's seeds trained as one stacked net (training/stacked_run.py),
each still its own run directory, so everything after the training reads them as separate runs.

A launcher runs units: one run, or a stack of up to K runs of one row (at one budget). A row that
cannot be stacked (stacked_run.why_not: dropout, mixup, ...) keeps one unit per run, and the command
says why in one line.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from ..errors import UserError
from ..runs.reader import RunRecord
from . import one_run
from .one_run import Outcome, check_reusable, write_study_json
from .plan import Plan, PlannedRun


@dataclass(frozen=True)
class Unit:
    """What one launch trains: `runs` one after another, or (`stacked`) as one stacked net."""

    runs: tuple[PlannedRun, ...]
    stacked: bool = False


def units(todo: list[PlannedRun], cap: int) -> tuple[list[Unit], dict[str, str]]:
    """The runs as units, at most `cap` runs of one row in a stack (0: no stacking), and why each row
    that cannot be stacked is not (by row label)."""
    if not cap:
        return [Unit((run,)) for run in todo], {}
    from ..training.stacked_run import why_not

    rows: dict[tuple[int, int], list[PlannedRun]] = {}
    for run in todo:
        rows.setdefault((run.row.index, run.budget), []).append(run)
    out: list[Unit] = []
    reasons: dict[str, str] = {}
    for runs in rows.values():
        reason = why_not(runs[0].spec)
        if reason is not None:
            reasons[runs[0].row.label] = reason
            out += [Unit((run,)) for run in runs]
        else:
            out += [Unit(tuple(runs[at:at + cap]), stacked=True) for at in range(0, len(runs), cap)]
    return out, reasons


def run_unit(plan: Plan, unit: Unit) -> dict[str, Outcome]:
    """Train a unit in this process; each run's outcome by its key."""
    if not unit.stacked:
        return {run.key: one_run.run_one(plan, run) for run in unit.runs}
    from ..training import stacked_run

    for run in unit.runs:
        check_reusable(run)
    todo = [run for run in unit.runs if not RunRecord.read(run.path).finished]
    outcomes = {run.key: Outcome("skipped", RunRecord.read(run.path).status) for run in unit.runs if run not in todo}
    for run in todo:
        write_study_json(plan, run)
    tick = time.perf_counter()
    try:
        summaries = stacked_run.train([run.spec for run in todo], [run.path for run in todo], resume="auto")
    except UserError as exc:
        return {**outcomes, **{run.key: Outcome("error", exc.message, code=exc.code) for run in todo}}
    wall = time.perf_counter() - tick
    return {**outcomes, **{run.key: Outcome(s["status"], wall_s=wall) for run, s in zip(todo, summaries)}}
