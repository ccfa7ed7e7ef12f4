"""The sweep engine: every (row, seed) of a study plan is one run directory.

Re-running a sweep skips finished runs (summary.json says completed or diverged), resumes
unfinished ones from their checkpoint, and refuses to reuse a directory whose run had another spec.
The runs left execute where a launcher puts them (launchers.py: in this process, on local
workers, or as a SLURM job array); SIGINT/SIGTERM make every running run save its checkpoint and
stop (rerun to resume). For job arrays, `--list` prints one command per run:

    /path/to/venv/bin/python -m resnet_cli ablate STUDY --preset P --out RESULTS --only ROW:SEED --json

A diverged run (NaN/Inf or exploding loss, exit code 3) is the paper's "fail": its row is marked
and the sweep goes on.
"""

from __future__ import annotations

import os
import shlex
import sys
import statistics
from collections import Counter
from dataclasses import dataclass

from ..runs.reader import RunRecord
from ..training.signals import StopFlag
from .launchers import Launcher, auto_jobs, local
from .one_run import (Notify, Outcome, SweepStopped, check_data, check_reusable, is_finished,  # noqa: F401
                      run_one, triage, write_study_json)  # (re-exported: the engine's API for the commands)
from .plan import Plan


# ---------------------------------------------------------------------------------------------
# Command lines (children and --list)


def program() -> list[str]:
    """How a --list line starts: $RESNET, split as a shell splits it, where it is set (`RESNET=resnet`
    for nodes with resnet on PATH, `RESNET="srun python -m resnet_cli"`); else this interpreter's
    absolute path and `-m resnet_cli`, which runs where the venv is not on PATH (a bare `resnet`
    failed there with "command not found")."""
    given = os.environ.get("RESNET", "").strip()
    return shlex.split(given) if given else [sys.executable, "-m", "resnet_cli"]


def list_commands(plan: Plan, replay: list[str]) -> list[str]:
    """One shell line per run, for job arrays or `parallel < runs.txt`; each line is safe to rerun (a
    finished run is reused, an interrupted one resumes). `replay`: the command and flags that make
    this plan (`ablate STUDY --preset P --out R ...`, `degrade ... --out OUT`), whichever command
    planned it; each line adds `--only ROW:SEED --json`."""
    return [shlex.join([*program(), *replay, "--only", run.key, "--json"]) for run in plan.runs]


# ---------------------------------------------------------------------------------------------
# Many runs


def preview(plan: Plan, jobs: int | None = None) -> str:
    """What is about to run, in one line for before anything starts: the runs, how many are left,
    and how long where that is known. Known means measured: the median wall time of this plan's
    finished runs here, else the docs' measurement of this study and preset (estimates.py). A paper
    preset with nothing finished says the papers' scale instead."""
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
    from .estimates import estimate

    shipped = estimate(plan.name, plan.preset, todo, workers, changed=bool(plan.sets),
                       threads=plan.runs[0].spec.run.threads)
    if shipped is not None:  # nothing finished here yet: the docs' measurement of this study
        return f"{head}; {shipped}"
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


def execute(plan: Plan, jobs: int | None = None, notify: Notify | None = None,
            launcher: Launcher | None = None, stack: int = 0) -> SweepResult:
    """Run every unfinished run of the plan: where `launcher` puts them, by default in this process
    for one job and on `jobs` local workers for more (None: auto_jobs), up to `stack` runs of a row
    as one stacked net (0: none; stacks.py)."""
    notify = notify or (lambda run, outcome: None)
    outcomes: dict[str, Outcome] = {}
    now = triage(plan)
    for run in plan.runs:
        if (exc := now.refused.get(run.key)) is not None:
            outcomes[run.key] = Outcome("error", exc.message, code=exc.code)
            notify(run, outcomes[run.key])
        elif run.key in now.finished:
            outcomes[run.key] = Outcome("skipped", now.finished[run.key])
    # A run another process holds is the launcher's to decide: a local one tries it and reports the
    # lock (exit 4), the SLURM array leaves it out.
    todo = [run for run in plan.runs if run.key not in outcomes]
    if not todo:
        return SweepResult(outcomes)
    launcher = launcher or local(jobs, len(todo), stack)
    with StopFlag() as sig:
        launcher.launch(plan, todo, outcomes, notify, sig)
    return SweepResult(outcomes, sig.signum)
