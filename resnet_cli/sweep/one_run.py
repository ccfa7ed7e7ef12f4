"""One run of a sweep, whatever launches it: start, resume or skip it in this process, and what
became of it (Outcome). The launchers (launchers.py, slurm.py) and the engine build on this.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Callable

from .. import errors
from ..errors import DamagedFile, UserError
from ..runs.reader import RunRecord
from ..runs.writer import RunDir
from .plan import Plan, PlannedRun


@dataclass
class Outcome:
    """What became of one run in this invocation (the run directory holds the results)."""

    status: str  # completed | diverged | interrupted | error | skipped (finished before)
    message: str = ""
    wall_s: float = 0.0
    code: int = 0  # for errors: the exit code (2: bad input, such as a directory of another run)
    # For errors: whether the rest of the sweep would fail the same way (missing data, a full disk),
    # so it stops; a damaged file of this run alone (errors.DamagedFile) does not stop it.
    stops: bool = True

    @classmethod
    def failed(cls, exc: UserError, message: str | None = None, wall_s: float = 0.0) -> Outcome:
        return cls("error", message or exc.message, wall_s, exc.code, not isinstance(exc, DamagedFile))


class SweepStopped(UserError):
    """A run failed on bad input (missing data, unknown device): the sweep stops launching."""

    def __init__(self, run: PlannedRun, message: str, code: int = errors.USAGE):
        super().__init__(f"run {run.key} ({run.path.name}) failed, sweep stopped: {message}", code=code)
        self.run = run


def write_study_json(plan: Plan, run: PlannedRun) -> None:
    RunDir(run.path).write_study(run.record(plan))


def check_data(plan: Plan) -> None:
    """Every dataset the plan's runs read, read once here: one missing (or a download that cannot
    happen offline) is one line before any run directory exists, not the same error per run."""
    from ..data import check_readable

    seen: set[str] = set()
    for run in plan.runs:
        key = repr(run.spec.data)
        if key not in seen:
            seen.add(key)
            check_readable(run.spec.data)


def check_reusable(run: PlannedRun) -> None:
    """A directory that holds a run of another spec is never silently reused or resumed."""
    from ..training.session import reusable

    reusable(run.path, run.spec)


def is_finished(run: PlannedRun) -> bool:
    return RunRecord.read(run.path).finished


@dataclass
class Triage:
    """What a plan's run directories say before a launch, decided here for every launcher."""

    todo: list[PlannedRun] = field(default_factory=list)  # new or unfinished, in the plan's order
    running: list[PlannedRun] = field(default_factory=list)  # unfinished, and a process holds its lock now
    finished: dict[str, str] = field(default_factory=dict)  # key -> completed | diverged
    refused: dict[str, UserError] = field(default_factory=dict)  # key -> why (a directory of another spec)


def triage(plan: Plan) -> Triage:
    out = Triage()
    for run in plan.runs:
        try:
            check_reusable(run)
        except UserError as exc:
            out.refused[run.key] = exc
            continue
        rec = RunRecord.read(run.path)
        if rec.finished:
            out.finished[run.key] = rec.status
        else:
            (out.running if rec.locked else out.todo).append(run)
    return out


def run_one(plan: Plan, run: PlannedRun) -> Outcome:
    """Start, resume or skip one run in this process."""
    from ..training.session import open_run

    check_reusable(run)
    if (rec := RunRecord.read(run.path)).finished:
        return Outcome("skipped", rec.status)
    if rec.damaged:  # this run's alone: the sweep goes on with the others (launchers.py)
        raise DamagedFile(f"run {run.key} skipped: {rec.damaged}")
    write_study_json(plan, run)
    tick = time.perf_counter()
    with open_run(run.spec, run.path, resume="auto") as session:
        if session.finished is not None:  # another process finished it after the check above
            return Outcome("skipped", session.finished["status"])
        summary = session.train()
    return Outcome(summary["status"], wall_s=time.perf_counter() - tick)




Notify = Callable[[PlannedRun, Outcome | None], None]  # outcome None: the run has started
