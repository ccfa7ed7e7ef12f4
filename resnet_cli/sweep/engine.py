"""The sweep engine: every (row, seed) of a study plan is one run directory.

Re-running a sweep skips finished runs (summary.json says completed or diverged), resumes
unfinished ones from their checkpoint, and refuses to reuse a directory whose run had another spec.
With one job the runs execute in this process; with several, on that many long-lived worker
processes (sweep/workers.py) that import torch once and take runs from a queue, longest
first, until it is empty. Each worker has its share of the CPU threads, or one GPU (round robin
over the GPUs this process may use). Each run keeps its own log (RUN/ablate.log); a run that raises
fails alone, a worker that dies is replaced, and SIGINT/SIGTERM make every running run save its
checkpoint and stop (rerun to resume). For job arrays, `--list` prints one command per run:

    resnet ablate STUDY --preset P --out RESULTS --only ROW:SEED --json

A diverged run (NaN/Inf or exploding loss, exit code 3) is the paper's "fail": its row is marked
and the sweep goes on.
"""

from __future__ import annotations

import os
import shlex
import signal
import statistics
import sys
import time
import traceback
from collections import Counter
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterator

from .. import errors
from ..errors import UserError
from ..runs.files import LOG
from ..runs.reader import RunRecord
from ..runs.writer import RunDir
from ..training.signals import StopFlag
from .plan import Plan, PlannedRun



@dataclass
class Outcome:
    """What became of one run in this invocation (the run directory holds the results)."""

    status: str  # completed | diverged | interrupted | error | skipped (finished before)
    message: str = ""
    wall_s: float = 0.0
    code: int = 0  # for errors: the exit code (2: bad input, such as a directory of another run)


class SweepStopped(UserError):
    """A run failed on bad input (missing data, unknown device): the sweep stops launching."""

    def __init__(self, run: PlannedRun, message: str):
        super().__init__(f"run {run.key} ({run.path.name}) failed, sweep stopped: {message}")
        self.run = run


# ---------------------------------------------------------------------------------------------
# One run


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


def run_one(plan: Plan, run: PlannedRun) -> Outcome:
    """Start, resume or skip one run in this process."""
    from ..training.session import open_run

    check_reusable(run)
    if (rec := RunRecord.read(run.path)).finished:
        return Outcome("skipped", rec.status)
    write_study_json(plan, run)
    tick = time.perf_counter()
    with open_run(run.spec, run.path, resume="auto") as session:
        summary = session.train()
    return Outcome(summary["status"], wall_s=time.perf_counter() - tick)


# ---------------------------------------------------------------------------------------------
# Command lines (children and --list)


def list_commands(plan: Plan, replay: list[str], program: str = "resnet") -> list[str]:
    """One shell line per run, for job arrays or `parallel < runs.txt`; each line is safe to rerun (a
    finished run is reused, an interrupted one resumes). `replay`: the command and flags that make
    this plan (`ablate STUDY --preset P --out R ...`, `degrade ... --out OUT`), whichever command
    planned it; each line adds `--only ROW:SEED --json`."""
    return [shlex.join([program, *replay, "--only", run.key, "--json"]) for run in plan.runs]


# ---------------------------------------------------------------------------------------------
# Many runs


def cpu_cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - not Linux
        return os.cpu_count() or 1


def gpu_count() -> int:
    import torch

    return torch.cuda.device_count() if torch.cuda.is_available() else 0


def auto_jobs(todo: int) -> int:
    """One run per GPU where there are GPUs; otherwise one single-threaded run per CPU core (for the
    small nets of a quick study that is faster than one run using every core)."""
    slots = gpu_count() or cpu_cores()
    return max(1, min(slots, todo))


Notify = Callable[[PlannedRun, Outcome | None], None]  # outcome None: the run has started


def preview(plan: Plan, jobs: int | None = None) -> str:
    """What is about to run, in one line for before anything starts: the runs, how many are left,
    and how long where that is known. Known means measured here: the median wall time of this
    plan's finished runs. A paper preset with nothing finished says the papers' scale instead."""
    from ..output import duration
    from ..spec.datasets import DATASETS

    done = [rec.summary for run in plan.runs if (rec := RunRecord.read(run.path)).finished]
    todo = len(plan.runs) - len(done)
    head = f"{len(plan.runs)} runs, {todo} to train"
    if not todo:
        return f"{head}: every run has finished"
    workers = jobs or auto_jobs(todo)
    walls = sorted(s["wall_time_s"] for s in done if isinstance(s.get("wall_time_s"), (int, float)))
    if walls:
        each = statistics.median(walls)
        rounds = -(-todo // workers)
        return (f"{head}; {duration(each)} a run here (median of {len(walls)} finished), about "
                f"{duration(each * rounds)} at {workers} at once")
    if plan.preset == "paper" and any(DATASETS[run.spec.data.dataset].reads_files for run in plan.runs):
        return f"{head}; paper scale: the papers' recipe, GPU days (--preset quick runs on a CPU)"
    return f"{head}; time a run: not measured here yet (the first to finish tells)"


def to_train(plan: Plan) -> int:
    """The runs of the plan not yet finished: what a progress counter counts to."""
    return sum(not is_finished(run) for run in plan.runs)


def tally(outcomes: dict[str, Outcome], planned: int, finished: int | None = None,
          finished_words: str = "already finished") -> str:
    """How a sweep ended, in words: runs trained to their end (completed or diverged), interrupted
    (they resume from their checkpoints), failed, never started, and finished before it began
    (`finished`: that count where the caller knows it better than the skipped outcomes do)."""
    counts = Counter(outcome.status for outcome in outcomes.values())
    finished = counts["skipped"] if finished is None else finished
    parts = [f"{counts['completed'] + counts['diverged']} run(s) trained"]
    parts += [f"{counts[status]} {words}" for status, words in (("interrupted", "interrupted"), ("error", "failed"))
              if counts[status]]
    started = len(outcomes) - counts["skipped"]
    if planned > started + finished:
        parts.append(f"{planned - started - finished} not started")
    parts.append(f"{finished} {finished_words}")
    return ", ".join(parts)


@dataclass
class SweepResult:
    outcomes: dict[str, Outcome]  # by run key (ROW:SEED)
    signum: int | None = None  # set when a signal stopped the sweep (rerun to resume)


def execute(plan: Plan, jobs: int | None = None, notify: Notify | None = None) -> SweepResult:
    """Run every unfinished run of the plan."""
    notify = notify or (lambda run, outcome: None)
    outcomes: dict[str, Outcome] = {}
    todo: list[PlannedRun] = []
    for run in plan.runs:
        try:
            check_reusable(run)
        except UserError as exc:
            outcomes[run.key] = Outcome("error", exc.message, code=exc.code)
            notify(run, outcomes[run.key])
            continue
        if (rec := RunRecord.read(run.path)).finished:
            outcomes[run.key] = Outcome("skipped", rec.status)
        else:
            todo.append(run)
    if not todo:
        return SweepResult(outcomes)
    jobs = jobs or auto_jobs(len(todo))
    if jobs > 1:
        # Longest first (LPT): a 1202-layer run started last would leave the other workers idle.
        todo.sort(key=lambda run: -_cost(run))
    with StopFlag() as sig:
        if jobs == 1:
            _in_process(plan, todo, outcomes, notify, sig)
        else:
            _workers(plan, todo, outcomes, notify, sig, jobs)
    return SweepResult(outcomes, sig.signum)


def _cost(run: PlannedRun) -> float:
    """Relative cost of a run: layers x length. On small inputs the time per layer is mostly fixed
    overhead, so depth predicts it better than FLOPs."""
    o = run.spec.optim
    return run.spec.model.depth * (o.iters if o.iters is not None else o.epochs * 100)


def _in_process(plan: Plan, todo: list[PlannedRun], outcomes: dict[str, Outcome], notify: Notify,
                sig: StopFlag) -> None:
    for run in todo:
        if sig.signum is not None:
            break
        notify(run, None)
        try:
            outcome = run_one(plan, run)
        except UserError as exc:
            outcome = Outcome("error", exc.message, code=exc.code)
        outcomes[run.key] = outcome
        notify(run, outcome)
        if outcome.status == "error":
            # A run that cannot start (data missing, no such device) says the same for the rest.
            raise SweepStopped(run, outcome.message)
        if outcome.status == "interrupted":  # the trainer caught the signal, saved and returned
            sig.signum = sig.signum or signal.SIGINT
            break


def _workers(plan: Plan, todo: list[PlannedRun], outcomes: dict[str, Outcome], notify: Notify, sig: StopFlag,
             jobs: int) -> None:
    from . import workers

    shares = workers.shares(jobs, cpu_cores(), gpu_count(), os.environ.get("CUDA_VISIBLE_DEVICES"))
    stopped: list[SweepStopped] = []

    def done(run: PlannedRun, result: workers.Done) -> bool:
        if not result.started:
            return False  # stopped before it began: nothing to report, rerun to start it
        if result.error is None:
            outcome = result.result
        elif result.died and sig.signum is not None:
            outcome = Outcome("interrupted")  # ended by the stop (a second Ctrl-C): resumes from its checkpoint
        else:
            outcome = Outcome("error", f"{result.error}; log: {run.path / LOG}", code=errors.FAILED)
        outcomes[run.key] = outcome
        notify(run, outcome)
        if outcome.status == "error" and outcome.code == errors.USAGE and not stopped:
            stopped.append(SweepStopped(run, outcome.message))
            return True  # the same input error would stop every other run too
        return False

    workers.run_queue([(plan, run) for run in todo], _run_logged, shares, sig,
                      on_start=lambda item: notify(item[1], None), on_done=lambda item, result: done(item[1], result))
    if stopped:
        raise stopped[0]


def _run_logged(item: tuple[Plan, PlannedRun]) -> Outcome:
    """One run inside a worker process, its output (warnings, errors, a traceback) in its own log."""
    plan, run = item
    log = run.path / LOG
    run.path.mkdir(parents=True, exist_ok=True)
    tick = time.perf_counter()
    with _output_to(log):
        print(f"resnet ablate: run {run.key} in worker process {os.getpid()}", file=sys.stderr, flush=True)
        try:
            return run_one(plan, run)
        except UserError as exc:
            print(f"resnet: error: {exc.message}", file=sys.stderr, flush=True)
            return Outcome("error", f"{exc.message} (log: {log})", time.perf_counter() - tick, exc.code)
        except Exception as exc:  # a bug: the traceback goes to the run's log, the worker goes on
            traceback.print_exc(file=sys.stderr)
            sys.stderr.flush()
            return Outcome("error", f"{type(exc).__name__}: {exc} (traceback in {log})".replace("\n", " "),
                           time.perf_counter() - tick, errors.FAILED)


@contextmanager
def _output_to(path: Path) -> Iterator[None]:
    """Point this process's stdout and stderr (the file descriptors, so C extensions' output too) at
    a file for the duration."""
    sys.stdout.flush()
    sys.stderr.flush()
    saved = [os.dup(1), os.dup(2)]
    with open(path, "a", encoding="utf-8") as log:
        os.dup2(log.fileno(), 1)
        os.dup2(log.fileno(), 2)
        try:
            yield
        finally:
            sys.stdout.flush()
            sys.stderr.flush()
            for fd, copy in zip((1, 2), saved):
                os.dup2(copy, fd)
                os.close(copy)
