"""`--launcher slurm`: a sweep's pending runs as one SLURM job array, submitted through submitit.

Each array task runs one run directory through the same lifecycle as a local run (one_run.run_one:
reuse check, lock, resume), so submitting a partly done study again submits only what is missing:
finished runs are skipped, runs whose lock is held (running now) are left alone, and the rest
resume from their checkpoints.

Preemption and time limits. The array asks SLURM for SIGUSR2 `signal_delay_s` seconds before the
kill (`--signal=USR2@120`, submitit's convention). On it the run stops between two steps, saves its
checkpoint (the training loop's stop flag: saving inside a signal handler is what breaks other
frameworks) and then hands over to submitit's protocol (`submitit.helpers.Checkpointable`): the same
task is pickled again and the job requeued, at most `requeues` times past its time limit; a run
over that budget is marked failed in RUN/slurm.json with its checkpoint kept, and a resubmission
goes on from it. SIGTERM (scancel, `scontrol requeue`, a preemption with PreemptMode=REQUEUE) also
saves and ends the task; SLURM decides whether it comes back. A task killed with no grace (SIGKILL)
resumes from its last periodic checkpoint on resubmission.

Each task writes RUN/slurm.json (job id, log path, state), so `resnet report DIR` can tell running,
failed and pending runs apart from the run directories alone, with no scheduler query.
"""

from __future__ import annotations

import os
import shlex
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any, Callable, ClassVar

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from .. import errors
from ..errors import UserError
from ..runs.reader import RunRecord
from ..runs.writer import RunDir
from ..spec import yamlio
from ..spec.messages import one_line
from ..training.signals import StopFlag
from . import one_run
from .one_run import Notify, Outcome
from .plan import Plan, PlannedRun



class SlurmSettings(BaseModel):
    """The `slurm:` section of a cluster file, and the flags of the same names."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    noun: ClassVar[str] = "the slurm section"

    partition: str | None = None
    time: Annotated[int, Field(ge=1)] = 240  # minutes per task (sbatch --time)
    cpus_per_run: Annotated[int, Field(ge=1)] = 1  # sbatch --cpus-per-task; also the run's threads
    gpus_per_run: Annotated[int, Field(ge=0)] = 0  # sbatch --gpus-per-node
    mem: Annotated[str | None, Field(pattern=r"^[0-9]+[KMGT]?B?$")] = None  # sbatch --mem, e.g. 16G
    account: str | None = None
    qos: str | None = None
    array_parallelism: Annotated[int, Field(ge=1)] = 256  # tasks running at once (--array=0-N%P)
    signal_delay_s: Annotated[int, Field(ge=10)] = 120  # SIGUSR2 this long before the time limit
    requeues: Annotated[int, Field(ge=0)] = 3  # requeues after a time limit (submitit's max_num_timeout)
    sbatch: list[str] = []  # extra sbatch options, e.g. ["--constraint=a100", "--mail-type=END"]
    setup: list[str] = []  # shell lines before the task starts, e.g. ["module load cuda/12.4"]


def settings(file: str | None, flags: dict[str, Any]) -> SlurmSettings:
    """The `slurm:` section of `file` (if given), with the flags that were given over it."""
    tree: dict[str, Any] = {}
    source = "--launcher slurm"
    if file is not None:
        source = file
        if not Path(file).is_file():
            raise UserError(f"{file}: no such file")
        loaded = yamlio.load_file(file)
        if not isinstance(loaded, dict) or not isinstance(loaded.get("slurm", {}), dict) or set(loaded) - {"slurm"}:
            raise UserError(f"{file}: expected one top-level key, slurm: (a mapping of cluster settings)")
        tree = dict(loaded.get("slurm") or {})
    tree.update({k: v for k, v in flags.items() if v not in (None, [], ())})
    try:
        return SlurmSettings.model_validate(tree)
    except ValidationError as err:
        raise UserError(one_line(err, source, SlurmSettings, ("slurm",))) from None


def _extra_options(lines: list[str]) -> dict[str, Any]:
    """["--constraint=a100", "--exclusive", "#SBATCH --mail-type END"] as submitit's additional_parameters."""
    out: dict[str, Any] = {}
    for line in lines:
        words = shlex.split(line.removeprefix("#SBATCH").strip())
        if not words or not words[0].startswith("--"):
            raise UserError(f"slurm.sbatch: {line!r}: expected a long sbatch option, e.g. --constraint=a100")
        key, eq, value = words[0][2:].partition("=")
        if not eq and len(words) > 1:
            value = " ".join(words[1:])
        out[key.replace("-", "_")] = value if (eq or len(words) > 1) else True
    return out


def parameters(s: SlurmSettings, name: str) -> dict[str, Any]:
    """The sbatch parameters in submitit's names (submitit.slurm.slurm._make_sbatch_string)."""
    p: dict[str, Any] = {"job_name": name, "time": s.time, "cpus_per_task": s.cpus_per_run,
                         "array_parallelism": s.array_parallelism, "signal_delay_s": s.signal_delay_s}
    for key in ("partition", "mem", "account", "qos"):
        if getattr(s, key) is not None:
            p[key] = getattr(s, key)
    if s.gpus_per_run:
        p["gpus_per_node"] = s.gpus_per_run
    if s.setup:
        p["setup"] = list(s.setup)
    if s.sbatch:
        p["additional_parameters"] = _extra_options(s.sbatch)
    return p


def _submitit():
    try:
        import submitit
    except ImportError:
        raise UserError("--launcher slurm needs submitit: pip install 'resnet-cli[slurm]' (or pip install submitit)"
                        ) from None
    return submitit


def log_folder(plan: Plan) -> Path:
    return plan.results.resolve() / "slurm" / "%j"


def script(plan: Plan, s: SlurmSettings, count: int) -> str:
    """The sbatch script `submit` would hand to sbatch for `count` tasks (what --dry-run prints)."""
    _submitit()
    from submitit.slurm.slurm import _make_sbatch_string

    command = " ".join([shlex.quote(sys.executable), "-u -m submitit.core._submit",
                        shlex.quote(str(log_folder(plan)))])  # SlurmExecutor._submitit_command_str
    return _make_sbatch_string(command=command, folder=log_folder(plan), map_count=count,
                               **parameters(s, f"resnet-{plan.name}"))


# ---------------------------------------------------------------------------------------------
# What is pending, and what a run directory says about its task


def _write_state(path: Path, **state: Any) -> None:
    RunDir(path).write_task_state(**state)


# ---------------------------------------------------------------------------------------------
# One array task


def _checkpointable():
    return _submitit().helpers.Checkpointable


class RunTask:
    """The callable each array task runs: one planned run, through one_run.run_one. Built as a
    submitit Checkpointable by `task()`, so submitit requeues it after a time-limit signal."""

    def __init__(self, plan: Plan, sets_threads: bool = True):
        self.plan = plan
        self.sets_threads = sets_threads

    def __call__(self, run: PlannedRun) -> str:
        submitit = _submitit()
        env = submitit.JobEnvironment()
        job = env.job_id
        log = str(env.paths.stderr)
        if self.sets_threads and run.spec.run.threads in (0, "auto"):  # the task's CPUs, not the node's
            threads = int(os.environ.get("SLURM_CPUS_PER_TASK", "1"))
            run = _with_threads(run, threads)
        requeue = signal.getsignal(signal.SIGUSR2)  # submitit's checkpoint_and_try_requeue
        usr2: list[int] = []

        def on_usr2(signum, frame) -> None:
            # The time limit (or `scancel --signal=USR2`) is near: stop as on SIGTERM, at the
            # next step boundary, with a checkpoint; the requeue follows once it is saved.
            usr2.append(signum)
            handler = signal.getsignal(signal.SIGTERM)  # the trainer's stop flag while it trains
            if callable(handler):
                handler(signal.SIGTERM, frame)

        run.path.mkdir(parents=True, exist_ok=True)
        starts = (RunRecord.read(run.path).task or {}).get("starts", 0) + 1  # this task's, and earlier ones' (requeues)
        _write_state(run.path, job=job, log=log, host=socket.gethostname(), state="running", message="",
                     starts=starts)
        try:
            with StopFlag():
                signal.signal(signal.SIGUSR2, on_usr2)
                outcome = one_run.run_one(self.plan, run)
        except BaseException as exc:
            _write_state(run.path, state="failed", message=f"{type(exc).__name__}: {exc}".replace("\n", " "))
            raise
        if outcome.status != "interrupted":
            _write_state(run.path, state="done" if outcome.status != "error" else "failed", message=outcome.message)
            return outcome.status
        if not usr2 or not callable(requeue):
            _write_state(run.path, state="stopped", message="stopped by a signal; checkpoint saved")
            return outcome.status
        _write_state(run.path, state="requeued", message="time limit: checkpoint saved, requeued")
        try:
            requeue(signal.SIGUSR2, None)  # pickles checkpoint()'s task, scontrol requeue, exits
        except Exception as exc:  # over the requeue budget: reported, the checkpoint kept
            _write_state(run.path, state="failed", message=f"{exc}; checkpoint kept: submit again to go on")
            raise
        return outcome.status  # pragma: no cover - requeue exits

    def checkpoint(self, run: PlannedRun):
        """submitit's protocol: what to run when the job comes back. The run directory holds the
        state, so it is the same task."""
        return _submitit().helpers.DelayedSubmission(self, run)


def _with_threads(run: PlannedRun, threads: int) -> PlannedRun:
    from dataclasses import replace

    spec = run.spec.model_copy(update={"run": run.spec.run.model_copy(update={"threads": threads})})
    return replace(run, spec=spec)


def task(plan: Plan) -> RunTask:
    """A RunTask that is also a submitit Checkpointable (submitit imported only here)."""
    cls = type("CheckpointableRunTask", (RunTask, _checkpointable()), {})
    return cls(plan)


# ---------------------------------------------------------------------------------------------
# Submit and wait


@dataclass
class Submitted:
    job_id: str  # the array's id (a single run goes as a plain job: submitit submits one item so)
    runs: list[PlannedRun]
    folder: Path  # submitit's folder: the pickles and each task's logs
    logs: list[Path] = field(default_factory=list)  # each task's stderr, in the order of runs


def submit(plan: Plan, s: SlurmSettings, runs: list[PlannedRun]) -> Submitted:
    """Submit `runs` as one job array; each run directory gets its study.json now, so `resnet
    report` lists the run as pending before its task starts."""
    submitit = _submitit()
    if not runs:
        raise UserError("nothing to submit")
    for run in runs:
        one_run.write_study_json(plan, run)
    try:
        executor = submitit.SlurmExecutor(folder=log_folder(plan), max_num_timeout=s.requeues)
    except RuntimeError as exc:  # no srun here
        raise UserError(f"--launcher slurm: {exc}") from None
    executor.update_parameters(**parameters(s, f"resnet-{plan.name}"))
    try:
        jobs = executor.map_array(task(plan), runs)
    except (submitit.core.utils.FailedJobError, submitit.core.utils.FailedSubmissionError) as exc:
        raise UserError(f"sbatch refused the array: {str(exc).strip().splitlines()[-1]}", code=errors.USAGE) from None
    return Submitted(jobs[0].job_id.split("_")[0], runs, log_folder(plan), [Path(job.paths.stderr) for job in jobs])


def queued(job_id: str) -> set[int]:
    """The tasks of job `job_id` SLURM still holds (pending, running, requeued), by array index
    (0 for a plain job)."""
    r = subprocess.run(["squeue", "-h", "-r", "-j", job_id, "-o", "%i"], capture_output=True, text=True, timeout=60)
    if r.returncode != 0:
        if "Invalid job id" in r.stderr:
            return set()  # the job has left the queue
        raise UserError(f"squeue -j {job_id}: {r.stderr.strip()}")
    return {int(i.partition("_")[2] or 0) for i in r.stdout.split() if i.partition("_")[2].isdigit() or i == job_id}


def wait(sub: Submitted, poll_s: float = 5.0, on_done: Callable[[int, PlannedRun], None] = lambda i, run: None,
         stop: Callable[[], bool] = lambda: False) -> None:
    """Until no task of the array is queued (or `stop()`: the tasks go on without us); `on_done(index,
    run)` as each leaves the queue."""
    left = set(range(len(sub.runs)))
    while left and not stop():
        time.sleep(poll_s)
        now = queued(sub.job_id)
        for index in sorted(left - now):
            on_done(index, sub.runs[index])
        left &= now


def task_outcome(sub: Submitted, index: int) -> Outcome:
    """What became of a task that left the queue: its run's status if it finished, else how its
    task ended (slurm.json) and its log."""
    run = sub.runs[index]
    rec = RunRecord.read(run.path)
    if rec.finished:
        return Outcome(rec.status)
    state = rec.task or {}
    if state.get("job") not in (sub.job_id, f"{sub.job_id}_{index}"):
        state = {"state": "not started"}  # what slurm.json says is an earlier task's
    log = state.get("log") or str(sub.logs[index])
    message = (f"task {state.get('job', f'{sub.job_id}_{index}')} {state.get('state', 'failed')}"
               + (f": {state['message']}" if state.get("message") else "") + f"; log: {log}")
    return Outcome("error", message, code=errors.FAILED)


class Slurm:
    """The sweep's launcher for `--launcher slurm` (launchers.py): the runs left, less those a
    process is training now, go as one job array; with `wait`, each run's outcome as its task leaves
    the queue. `on_submit(submitted, running)` hears of the array before the wait begins."""

    def __init__(self, settings: SlurmSettings, wait: bool,
                 on_submit: Callable[[Submitted, list[PlannedRun]], None] = lambda sub, running: None):
        self.settings, self.wait, self.on_submit = settings, wait, on_submit
        self.submitted: Submitted | None = None
        self.running: list[PlannedRun] = []

    def launch(self, plan: Plan, todo: list[PlannedRun], outcomes: dict[str, Outcome], notify: Notify,
               sig: StopFlag) -> None:
        self.running = [run for run in todo if RunRecord.read(run.path).locked]
        todo = [run for run in todo if run not in self.running]
        if not todo:
            return
        self.submitted = sub = submit(plan, self.settings, todo)
        self.on_submit(sub, self.running)
        if not self.wait:
            return

        def done(index: int, run: PlannedRun) -> None:
            outcomes[run.key] = task_outcome(sub, index)
            notify(run, outcomes[run.key])

        wait(sub, on_done=done, stop=lambda: sig.signum is not None)
