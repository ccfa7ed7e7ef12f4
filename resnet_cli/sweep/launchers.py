"""Where a sweep's runs execute: one interface, three places.

A Launcher takes the runs the engine found left to train (checked reusable, not finished) and
launches them: `notify(run, None)` as a run starts, `outcomes[run.key]` and `notify(run, outcome)`
as it ends; a signal (Ctrl-C, SIGTERM) sets `sig.signum` and the launcher stops starting runs.

- InProcess: one run after another in this process (`--jobs 1`).
- Workers: long-lived worker processes (workers.py) that import torch once and take runs from a
  queue, longest first, each with its share of the CPU threads or one GPU; each run keeps its own
  log (RUN/ablate.log), a run that raises fails alone, a worker that dies is replaced.
- slurm.Slurm: the runs as one SLURM job array (`--launcher slurm`), waited for with `--wait`.
"""

from __future__ import annotations

import os
import signal
import sys
import time
import traceback
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator, Protocol

from .. import errors
from ..errors import UserError
from ..runs.files import LOG
from ..training import cpu_threads
from ..training.signals import StopFlag
from . import stacks
from .one_run import Notify, Outcome, SweepStopped
from .plan import Plan, PlannedRun


class Launcher(Protocol):
    def launch(self, plan: Plan, todo: list[PlannedRun], outcomes: dict[str, Outcome], notify: Notify,
               sig: StopFlag) -> None: ...


def cpu_cores() -> int:
    """The cores a sweep may split between its workers: those free of other processes' work now,
    by the rule of `run.threads: auto` (training/cpu_threads.py; OMP_NUM_THREADS pins a run's
    threads, not the sweep's cores)."""
    return cpu_threads.choose(cpu_threads.measure(obey_pin=False)).threads


def gpu_count() -> int:
    import torch

    return torch.cuda.device_count() if torch.cuda.is_available() else 0


def auto_jobs(todo: int) -> int:
    """One run per GPU where there are GPUs; otherwise one single-threaded run per free CPU core (for
    the small nets of a quick study that is faster than one run using every core)."""
    slots = gpu_count() or cpu_cores()
    return max(1, min(slots, todo))



def local(jobs: int | None, todo: int, stack: int = 0) -> Launcher:
    """In this process for one job, else that many workers (None: auto_jobs); `stack`: at most that
    many runs of a row as one stacked net (0: none, stacks.py)."""
    jobs = jobs or auto_jobs(todo)
    return InProcess(stack) if jobs == 1 else Workers(jobs, stack)


class InProcess:
    """One run (or stack, stacks.py) after another in this process (`--jobs 1`)."""

    def __init__(self, stack: int = 0):
        self.stack = stack

    def launch(self, plan: Plan, todo: list[PlannedRun], outcomes: dict[str, Outcome], notify: Notify,
               sig: StopFlag) -> None:
        for unit in stacks.units(todo, self.stack)[0]:
            if sig.signum is not None:
                break
            for run in unit.runs:
                notify(run, None)
            try:
                results = stacks.run_unit(plan, unit)
            except UserError as exc:
                results = {run.key: Outcome.failed(exc) for run in unit.runs}
            except (OSError, MemoryError, RuntimeError) as exc:  # the machine's refusal, met unnamed
                if (refused := errors.resource_error(exc)) is None:
                    raise
                results = {run.key: Outcome.failed(refused) for run in unit.runs}
            for run in unit.runs:
                outcome = outcomes[run.key] = results[run.key]
                notify(run, outcome)
            for run in unit.runs:
                if results[run.key].status == "error" and results[run.key].stops:
                    # A run that cannot start (data missing, no such device, a full disk) says the same
                    # for the rest; one run's damaged file is that run's alone (its error is reported).
                    raise SweepStopped(run, results[run.key].message, results[run.key].code)
            if any(o.status == "interrupted" for o in results.values()):  # the trainer caught the signal
                sig.signum = sig.signum or signal.SIGINT
                break


class Workers:
    """`jobs` worker processes (workers.py), the longest runs (or stacks) first."""

    def __init__(self, jobs: int, stack: int = 0):
        self.jobs = jobs
        self.stack = stack

    def launch(self, plan: Plan, todo: list[PlannedRun], outcomes: dict[str, Outcome], notify: Notify,
               sig: StopFlag) -> None:
        from . import workers

        # Longest first (LPT): a 1202-layer run started last would leave the other workers idle.
        todo_units = sorted(stacks.units(todo, self.stack)[0], key=lambda unit: -sum(map(_cost, unit.runs)))
        shares = workers.shares(self.jobs, cpu_cores(), gpu_count(), os.environ.get("CUDA_VISIBLE_DEVICES"))
        stopped: list[SweepStopped] = []

        def done(unit: stacks.Unit, result: workers.Done) -> bool:
            if not result.started:
                return False  # stopped before it began: nothing to report, rerun to start it
            for run in unit.runs:
                if result.error is None:
                    outcome = result.result[run.key]
                elif result.died and sig.signum is not None:
                    outcome = Outcome("interrupted")  # ended by the stop (a second Ctrl-C): resumes from its checkpoint
                else:
                    outcome = Outcome("error", f"{result.error}; log: {unit.runs[0].path / LOG}", code=errors.FAILED)
                outcomes[run.key] = outcome
                notify(run, outcome)
                if (outcome.status == "error" and outcome.stops and outcome.code in (errors.USAGE, errors.RESOURCES)
                        and not stopped):
                    stopped.append(SweepStopped(run, outcome.message, outcome.code))
            return bool(stopped)  # the same input error would stop every other run too

        def started(unit: stacks.Unit) -> None:
            for run in unit.runs:
                notify(run, None)

        workers.run_queue([(plan, unit) for unit in todo_units], _run_logged, shares, sig,
                          on_start=lambda item: started(item[1]),
                          on_done=lambda item, result: done(item[1], result))
        if stopped:
            raise stopped[0]


def _cost(run: PlannedRun) -> float:
    """Relative cost of a run: layers x length. On small inputs the time per layer is mostly fixed
    overhead, so depth predicts it better than FLOPs."""
    o = run.spec.optim
    return run.spec.model.depth * (o.iters if o.iters is not None else o.epochs * 100)


def _run_logged(item: tuple[Plan, stacks.Unit]) -> dict[str, Outcome]:
    """One unit inside a worker process, its output (warnings, errors, a traceback) in its first
    run's log (a stack's other runs name that log in theirs)."""
    plan, unit = item
    log = unit.runs[0].path / LOG
    for run in unit.runs:
        run.path.mkdir(parents=True, exist_ok=True)
        if run is not unit.runs[0]:
            with open(run.path / LOG, "a", encoding="utf-8") as own:
                print(f"resnet ablate: run {run.key} trained in a stack; its output is in {log}", file=own)
    tick = time.perf_counter()
    keys = ", ".join(run.key for run in unit.runs)
    with _output_to(log):
        print(f"resnet ablate: run{'s' if len(unit.runs) > 1 else ''} {keys} in worker process {os.getpid()}",
              file=sys.stderr, flush=True)
        try:
            return stacks.run_unit(plan, unit)
        except UserError as exc:
            print(f"resnet: error: {exc.message}", file=sys.stderr, flush=True)
            return {run.key: Outcome.failed(exc, f"{exc.message} (log: {log})", time.perf_counter() - tick)
                    for run in unit.runs}
        except Exception as exc:  # a bug: the traceback goes to the run's log, the worker goes on
            if (refused := errors.resource_error(exc)) is not None:  # a full disk, no memory: not a bug
                print(f"resnet: error: {refused.message}", file=sys.stderr, flush=True)
                return {run.key: Outcome.failed(refused, wall_s=time.perf_counter() - tick) for run in unit.runs}
            traceback.print_exc(file=sys.stderr)
            sys.stderr.flush()
            message = f"{type(exc).__name__}: {exc} (traceback in {log})".replace("\n", " ")
            return {run.key: Outcome("error", message, time.perf_counter() - tick, errors.FAILED) for run in unit.runs}


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
