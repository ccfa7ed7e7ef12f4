"""One run's lifecycle, in one place: `resnet train`, the sweep engine (`resnet ablate`, `resnet
degrade`) and everything else that trains a run directory start it here.

`open_run` owns what surrounds the loop: where the run executes (planned once, `auto` precision
pinned into the spec), the run directory and its lock, the reuse check (a directory that holds a run
of another spec is never silently reused), resume from the checkpoint (orphaned temp files cleaned,
metrics written after the checkpoint dropped, the spec's change recorded under --force-resume),
meta.json, and the clean-up of a run that never reached its first checkpoint (nothing half-made is
left for a corrected rerun to trip on). The trainer only trains.

    with open_run(spec, path, resume="auto") as session:
        summary = session.train()

Library code never prints: what a person should know (a resume, a precision choice) goes to `say`.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator, Literal

import torch

from .. import data as data_mod
from .. import spec as spec_mod
from ..errors import UserError
from . import checkpoint as ckpt
from . import cpu_threads, distributed, runtime, schedule, testhook
from .callbacks import Callback, GradNormCallback
from .curve import CurveProbe
from .launch import refuse_under_ddp
from ..runs.files import CHECKPOINT, SPEC, TENSORBOARD
from ..runs.reader import spec_as_written
from ..runs.writer import RunDir, default_path
from .signals import StopFlag
from .trainer import Trainer

# never: a fresh run, refused where a run already is. must: continue from the checkpoint there.
# auto: continue if there is a checkpoint, else start (over) in place, as the sweeps and
# `--resume auto` do.
Resume = Literal["never", "must", "auto"]


def spec_callbacks(spec: spec_mod.Spec, run_dir: RunDir | None, is_main: bool) -> list[Callback]:
    """The callbacks a spec asks for, each on rank 0 alone (after DDP's all-reduce every rank holds
    the same gradients, and only rank 0 writes files)."""
    if not is_main:
        return []
    out: list[Callback] = []
    if spec.train.grad_norm_every:  # per-layer gradient norms into metrics.jsonl (He 2016b sec. 3)
        out.append(GradNormCallback(spec.train.grad_norm_every, keep=False))
    if spec.train.tensorboard and run_dir is not None:
        from .tensorboard_log import TensorBoardCallback  # torch.utils.tensorboard imports slowly

        out.append(TensorBoardCallback(run_dir.file(TENSORBOARD)))
    if "degrade" in spec.train.probes:  # He 2016a Fig. 6's curve (curve.py)
        out.append(CurveProbe())
    return out


def _silent(message: str) -> None:
    pass


@dataclass
class Session:
    """An opened run: its directory (locked), the trainer built for it, and where it stands."""

    spec: spec_mod.Spec
    run_dir: RunDir
    trainer: Trainer
    fresh: bool  # this process created the run directory's files
    finished: dict[str, Any] | None = None  # the summary of a run already at its last iteration
    say: Callable[[str], None] = field(default=_silent, repr=False)

    def train(self) -> dict[str, Any]:
        """Train to the end (or a signal, or divergence); returns the summary, also on disk."""
        if self.finished is not None:
            return self.finished
        summary = self.trainer.run()
        if self.fresh and summary["status"] == "interrupted" and not self.run_dir.file(CHECKPOINT).exists():
            self.run_dir.remove_unstarted()  # signalled before its first step: leave nothing a rerun trips on
        distributed.shutdown(clean=True)
        return summary


def reusable(path: Path, spec: spec_mod.Spec) -> None:
    """Refuse a directory that holds a run of another spec (its spec.yaml, read as this version reads
    it). Keys that may change between a run and its resume (spec.RESUME_FREE) do not count, nor
    `run.precision: auto`, which spec.yaml records as resolved when the run started: whether it
    still resolves the same is the resume's own check."""
    spec_file = path / SPEC
    if not spec_file.is_file():
        return
    try:
        theirs = spec_mod.load(spec_as_written(path), name=str(spec_file))  # as the run was written
    except UserError as exc:
        raise UserError(f"{path} holds an unreadable run ({exc.message}); delete it or use another --out") from None
    changed = [k for k in spec_mod.diff(theirs, spec) if k not in spec_mod.RESUME_FREE
               and not (k == "run.precision" and spec.run.precision == "auto")]
    if changed:
        # Never "delete it": what is there may be hours of finished runs of another recipe.
        raise UserError(f"{path} holds a run with another spec ({', '.join(changed[:4])}), kept as it is; "
                        "give this one another --out (a sweep's default --out for a changed --set recipe "
                        "is a folder of its own)")


@contextlib.contextmanager
def open_run(spec: spec_mod.Spec, path: Path | None = None, *, resume: Resume = "never", force_resume: bool = False,
             callbacks: Iterable[Callback] = (), data: data_mod.Data | None = None,
             say: Callable[[str], None] = _silent) -> Iterator[Session]:
    """Open (create, or resume) the run of `spec` in `path` (None: run.out, else a fresh name under
    runs/). A resumed run is checked against its checkpoint's spec (--force-resume to go on under a
    changed one); the sweeps check their planned directories with `reusable` before they start any.
    The lock is held until the block ends.
    Under torchrun only rank 0 writes and speaks: other ranks get no `callbacks` and no `say`."""
    testhook.phase("spec")
    d = distributed.from_env()
    if not d.is_main:
        callbacks, say = (), _silent
    if d.active and path is None and spec.run.out is None:
        raise UserError("under torchrun give --out RUN_DIR, so every rank (and a restart) finds the same run")
    if d.active:
        refuse_under_ddp(spec)
    # What can be checked is checked before the run directory exists: a run that cannot start
    # leaves nothing behind (no half-made directory that a corrected rerun would refuse).
    rt = runtime.select(spec.run, spec.train, d.local_rank, torchrun=d.active)
    if cpu_threads.worth_saying(rt.threads_auto):
        say(rt.threads_auto.line)
    if spec.run.precision == "auto" and rt.precision == "fp16":
        say("run.precision auto: fp16 autocast with a GradScaler (this GPU has no native bf16); "
            "--set run.precision=fp32 for the papers' numerics")
    spec = runtime.pinned(spec, rt)
    if data is None:
        data = data_mod.load(spec.data)
    testhook.phase("data")
    path = Path(path or spec.run.out or default_path(spec))
    if spec.run.out != str(path):
        spec = spec.model_copy(update={"run": spec.run.model_copy(update={"out": str(path)})})
    run_dir = RunDir(path)
    if d.is_main:  # only rank 0 writes
        run_dir.lock()
    fresh = d.is_main and not any((path / name).exists() for name in (SPEC, CHECKPOINT))
    # The trainer's SIGINT/SIGTERM flag is this block's: put back here whatever happens, since a
    # run that fails before training (a checkpoint that does not fit) never reaches Trainer.run's
    # own restore, and a handler left behind would swallow the next Ctrl-C of the process.
    stop = StopFlag()
    try:
        state = _checkpoint_state(path, resume)
        if state is None and d.is_main:
            if resume != "never" and (path / SPEC).exists():
                # A run that never reached its first checkpoint: start it over in place rather than
                # refuse, and its partial records with it (its epochs would be logged twice).
                run_dir.clear_records()
            run_dir.create(spec, runtime={})
        testhook.phase("rundir")
        trainer = Trainer(spec, run_dir, callbacks=[*callbacks, *spec_callbacks(spec, run_dir, d.is_main)],
                          stop=stop.install(), data=data, rt=rt)
        trainer.say = say  # the automatic thread count's changes at epochs (cpu_threads.EpochWatch)
        session = Session(trainer.spec, run_dir, trainer, fresh, say=say)
        if state is not None:
            _resume(session, state, force_resume, d.is_main)
        if d.is_main and session.finished is None:
            run_dir.update_meta({**trainer.rt.describe(), "params": trainer.params,
                                 "iters_per_epoch": trainer.iters_per_epoch, "total_iters": trainer.total,
                                 # where the images were actually read from: the real path, or how they were made
                                 "data_source": trainer.data.source})
            note = schedule.warmup_note(spec.optim, trainer.iters_per_epoch)
            if note:
                say(f"[yellow]note[/]: {note}")
        yield session
    except BaseException:
        if fresh and not (path / CHECKPOINT).exists():
            run_dir.remove_unstarted()  # it never trained a checkpoint's worth: nothing to resume or report
        raise
    finally:
        stop.restore()
        run_dir.unlock()
        distributed.shutdown(clean=False)


def _checkpoint_state(path: Path, resume: Resume) -> dict[str, Any] | None:
    if resume == "never":
        return None
    ckpt.clean_orphans(path)
    if (path / CHECKPOINT).exists():
        return ckpt.load(path / CHECKPOINT)
    if resume == "must":
        raise UserError(f"{path}: no checkpoint to resume from")
    return None


def _resume(session: Session, state: dict[str, Any], force_resume: bool, is_main: bool) -> None:
    trainer, run_dir = session.trainer, session.run_dir
    changed = trainer.restore(state, allow_spec_change=force_resume)
    if trainer.p.iteration >= trainer.total and run_dir.summary():
        session.finished = run_dir.summary()  # nothing left to train: its summary stands
        return
    if not is_main:
        return
    if changed:  # --force-resume: the run goes on under the new spec, so spec.yaml says so
        kept = run_dir.replace_spec(session.spec, changed, trainer.p.iteration)
        session.say(f"spec changed in {', '.join(changed)}: {run_dir.file(SPEC)} rewritten, "
                    f"the previous one kept as {run_dir.file(kept)}")
    run_dir.truncate_metrics(trainer.p.iteration)
    before = run_dir.meta().get("threads")
    if before is not None and before != torch.get_num_threads():
        # A convolution's sums are split across threads: another count gives other bits (docs/train.md).
        session.say(f"[yellow]note[/]: this run trained at {before} CPU threads and resumes at "
                    f"{torch.get_num_threads()}: it will not repeat a run kept at one count bit for bit "
                    "(--threads N pins the count)")
    session.say(f"resuming {run_dir.path} at iteration {trainer.p.iteration} (epoch {trainer.p.epoch + 1})")
