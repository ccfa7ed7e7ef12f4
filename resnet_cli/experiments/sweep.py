"""The sweep engine: every (row, seed) of a study plan is one run directory.

Re-running a sweep skips finished runs (summary.json says completed or diverged), resumes
unfinished ones from their checkpoint, and refuses to reuse a directory whose run had another spec.
With one job the runs execute in this process; with several, each is a child process

    python -m resnet_cli ablate STUDY --preset P --out RESULTS --only ROW:SEED --json

(the same command `--list` prints for job arrays), with the CPU threads split between them, or one
GPU each, round robin, when there are GPUs. A diverged run (NaN/Inf or exploding loss, exit code 3)
is the paper's "fail": its row is marked and the sweep goes on.
"""

from __future__ import annotations

import json
import os
import shlex
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from .. import errors, output
from ..errors import UserError
from ..signals import StopFlag
from .study import Plan, PlannedRun

FINAL = ("completed", "diverged")
STUDY_JSON = "study.json"
LOG = "ablate.log"


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
    run.path.mkdir(parents=True, exist_ok=True)
    target = run.path / STUDY_JSON
    tmp = run.path / f".{STUDY_JSON}.tmp"
    tmp.write_text(json.dumps(run.record(plan), indent=2) + "\n", encoding="utf-8")
    os.replace(tmp, target)


def _summary(path: Path) -> dict[str, Any] | None:
    try:
        return json.loads((path / "summary.json").read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError):
        return None


def check_reusable(run: PlannedRun) -> None:
    """A directory that holds a run of another spec is never silently reused or resumed."""
    from .. import spec as spec_mod
    from .. import yamlio

    spec_file = run.path / "spec.yaml"
    if not spec_file.is_file():
        return
    try:
        theirs = spec_mod.resolve(spec_mod.validate(yamlio.load_file(spec_file), str(spec_file)))
    except UserError as exc:
        raise UserError(f"{run.path} holds an unreadable run ({exc.message}); delete it or use another --out") from None
    # `run.precision: auto` is written into spec.yaml as resolved when the run started; whether it
    # still resolves the same here is the resume's check (it refuses a change in one line).
    changed = [k for k in spec_mod.diff(theirs, run.spec) if k not in spec_mod.RESUME_FREE
               and not (k == "run.precision" and run.spec.run.precision == "auto")]
    if changed:
        raise UserError(f"{run.path} holds a run with another spec ({', '.join(changed[:4])}); "
                        "delete it or use another --out")


def is_finished(run: PlannedRun) -> bool:
    summary = _summary(run.path)
    return summary is not None and summary.get("status") in FINAL


def run_one(plan: Plan, run: PlannedRun) -> Outcome:
    """Start, resume or skip one run in this process."""
    from ..commands.train import run as train_run

    check_reusable(run)
    if is_finished(run):
        return Outcome("skipped", _summary(run.path)["status"])
    write_study_json(plan, run)
    tick = time.perf_counter()
    summary = train_run(run.spec, fmt=output.Format.JSON, quiet=True, resume_dir=run.path, auto=True)
    return Outcome(summary["status"], wall_s=time.perf_counter() - tick)


# ---------------------------------------------------------------------------------------------
# Command lines (children and --list)


def command_for(plan: Plan, run: PlannedRun, sets: list[str], program: list[str]) -> list[str]:
    cmd = [*program, "ablate", plan.source, "--preset", plan.preset, "--out", str(plan.results),
           "--only", run.key, "--json"]
    for item in sets:
        cmd += ["--set", item]
    return cmd


def list_commands(plan: Plan, sets: list[str], program: str = "resnet") -> list[str]:
    """One shell line per run, for job arrays or `parallel < runs.txt`; each line is safe to rerun."""
    return [shlex.join(command_for(plan, run, sets, [program])) for run in plan.runs]


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


@dataclass
class SweepResult:
    outcomes: dict[str, Outcome]  # by run key (ROW:SEED)
    signum: int | None = None  # set when a signal stopped the sweep (rerun to resume)


def execute(plan: Plan, jobs: int | None = None, sets: list[str] = (), notify: Notify | None = None) -> SweepResult:
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
        if is_finished(run):
            outcomes[run.key] = Outcome("skipped", _summary(run.path)["status"])
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
            _children(plan, todo, outcomes, notify, sig, jobs, list(sets))
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


@dataclass
class _Child:
    run: PlannedRun
    proc: subprocess.Popen
    log: Any
    slot: int
    started: float


def _children(plan: Plan, todo: list[PlannedRun], outcomes: dict[str, Outcome], notify: Notify, sig: StopFlag,
              jobs: int, sets: list[str]) -> None:
    gpus = gpu_count()
    threads = max(1, cpu_cores() // jobs)
    program = [sys.executable, "-m", "resnet_cli"]
    pending = list(todo)
    active: list[_Child] = []
    free = list(range(jobs))
    forwarded = False
    stopped: SweepStopped | None = None
    while pending or active:
        if sig.signum is not None and not forwarded:
            # Children run in their own sessions (a terminal's Ctrl-C reaches only us), so each gets
            # exactly one signal: a trainer saves its checkpoint on the first and quits on a second.
            for child in active:
                child.proc.send_signal(sig.signum)
            forwarded = True
            pending.clear()
        while pending and free and sig.signum is None:
            run = pending.pop(0)
            slot = free.pop(0)
            env = dict(os.environ, OMP_NUM_THREADS=str(threads), MKL_NUM_THREADS=str(threads))
            if gpus:
                env["CUDA_VISIBLE_DEVICES"] = str(slot % gpus)
            run.path.mkdir(parents=True, exist_ok=True)
            log = open(run.path / LOG, "a", encoding="utf-8")
            proc = subprocess.Popen(command_for(plan, run, sets, program), stdout=log, stderr=subprocess.STDOUT,
                                    stdin=subprocess.DEVNULL, env=env, start_new_session=True)
            active.append(_Child(run, proc, log, slot, time.perf_counter()))
            notify(run, None)
        time.sleep(0.2)
        for child in list(active):
            rc = child.proc.poll()
            if rc is None:
                continue
            child.log.close()
            active.remove(child)
            free.append(child.slot)
            outcome = _from_exit(child, rc)
            outcomes[child.run.key] = outcome
            notify(child.run, outcome)
            if rc == errors.USAGE and stopped is None:
                stopped = SweepStopped(child.run, outcome.message)
                pending.clear()  # the same input error would stop every other run too
    if stopped is not None:
        raise stopped


def _from_exit(child: _Child, rc: int) -> Outcome:
    wall = time.perf_counter() - child.started
    if rc == errors.OK:
        summary = _summary(child.run.path) or {}
        return Outcome(summary.get("status", "completed"), wall_s=wall)
    if rc == errors.DIVERGED:
        return Outcome("diverged", wall_s=wall)
    if rc in (errors.INTERRUPTED_INT, errors.INTERRUPTED_TERM):
        return Outcome("interrupted", wall_s=wall)
    return Outcome("error", f"exit {rc}: {_last_line(child.run.path / LOG)} (log: {child.run.path / LOG})", wall, rc)


def _last_line(path: Path) -> str:
    try:
        lines = [ln for ln in path.read_text(encoding="utf-8", errors="replace").splitlines() if ln.strip()]
    except OSError:
        return ""
    return lines[-1] if lines else ""  # whole: a child's one-line error often ends in the URL or path that fixes it
