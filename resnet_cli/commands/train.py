"""`resnet train`: one run, the papers' CIFAR recipe by default."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Annotated, Any, Optional

import typer

from .. import errors, output
from ..cli import command
from ..errors import DamagedFile, UserError
from ..spec import shape_of, to_tree, to_yaml
from ..training import cpu_threads
from ..training.launch import launch_torchrun, precheck
from ..runs.files import CHECKPOINT, SPEC
from ..runs.reader import spec_as_written
from ..spec.seeds import HELP as SEEDS_HELP
from ..spec.seeds import parse as parse_seeds
from . import common
from .progress import TerminalProgress, exit_code

# The modules that import torch (model, session, runtime, distributed) are imported inside the
# functions that use them: `resnet train --help` then answers in a fraction of a second instead of
# waiting 2-3 s for torch to load.


def _summary_rows(summary: dict[str, Any]) -> list[tuple[str, str]]:
    rows = [
        ("status", summary["status"]),
        ("test error %", output.fmt(summary.get("test_error"))),
        ("training loss", output.fmt(summary.get("train_loss"), 4)),
        ("training error %", output.fmt(summary.get("train_error"))),
    ]
    if summary.get("val_error") is not None:
        rows.append(("validation error %", output.fmt(summary["val_error"])))
    rows += [
        ("parameters", f"{summary['params']:,} ({output.params_str(summary['params'])})"),
        ("iterations / epochs", f"{summary['iterations']:,} / {summary['epochs']}"),
        ("wall time", f"{summary['wall_time_s']:.1f} s"),
        ("images/s", f"{summary['images_per_s']:.0f}"),
        ("device", summary["device"]),
        ("run directory", str(summary.get("run_dir"))),
    ]
    return rows


SUMMARY_VIEW = output.View(title="resnet train", columns=["", "value"], rows=lambda kept: _summary_rows(kept[0]))


def _resume_dir(resume: str, out: str | None) -> Path:
    if resume == "auto":
        if out is None:
            raise UserError("--resume auto needs --out RUN_DIR (the run to continue)")
        return Path(out)
    path = Path(resume)
    path = path.parent if path.is_file() else path
    # Checked before the spec is built: with no run there, the default spec would go on to look
    # for (and download) CIFAR-10 before saying so.
    if not path.is_dir():
        raise UserError(f"--resume {resume}: no such run directory; give one that `resnet train` wrote "
                        "(or --resume auto --out RUN_DIR to start it fresh)")
    if not (path / CHECKPOINT).is_file():
        raise UserError(f"{path}: no checkpoint to resume from")
    return path


@command()
def train(
    spec_file: common.SpecArg = None,
    depth: common.Depth = None,
    preact: common.Preact = False,
    dataset: common.Dataset = None,
    data_dir: common.DataDir = None,
    epochs: common.Epochs = None,
    iters: common.Iters = None,
    batch_size: common.BatchSize = None,
    lr: common.Lr = None,
    seed: common.Seed = None,
    device: common.Device = None,
    threads: common.Threads = None,
    out: common.Out = None,
    set_: common.Set = None,
    json_: common.Json = False,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Validate, build, print the resolved spec and params; train nothing.")] = False,
    resume: Annotated[Optional[str], typer.Option("--resume", help="RUN_DIR (or checkpoint) to continue; 'auto': the --out directory, fresh if it has no checkpoint.")] = None,
    force_resume: Annotated[bool, typer.Option("--force-resume", help="Resume even when the spec differs from the run's: spec.yaml becomes the new spec, the old one kept as spec.before-<time>.yaml.")] = False,
    nproc: Annotated[int, typer.Option("--nproc", min=1, help="Start N processes on this machine with torchrun (DistributedDataParallel).")] = 1,
    tensorboard: Annotated[bool, typer.Option("--tensorboard", help="train.tensorboard=true: scalars into RUN_DIR/tensorboard/ too (pip install 'resnet-cli[tensorboard]').")] = False,
    seeds: Annotated[Optional[str], typer.Option("--seeds", help=f"Train these seeds of the spec, each its own run (--out DIR: DIR/seed<N>). {SEEDS_HELP}")] = None,
    stack: common.Stack = None,
) -> None:
    """Train one net. Progress on stderr; a result table (or JSON lines) on stdout."""
    fmt = output.choose(json_)
    flags = dict(depth=depth, preact=preact, dataset=dataset, data_dir=data_dir, epochs=epochs, iters=iters,
                 batch_size=batch_size, lr=lr, seed=seed, device=device, threads=threads, out=out)
    resume_dir = _resume_dir(resume, out) if resume else None
    spec_name = None
    if resume_dir is not None and spec_file is None and (resume_dir / SPEC).is_file():
        spec_file, spec_name = spec_as_written(resume_dir), str(resume_dir / SPEC)  # as the run was written
    elif resume_dir is not None and spec_file is None and (resume_dir / CHECKPOINT).is_file():
        # Never the default spec instead: it would look for CIFAR-10 and then refuse the checkpoint.
        raise DamagedFile(f"{resume_dir / SPEC}: missing, and the run is rebuilt from it; restore it, or name the "
                          f"run's spec: resnet train SPEC --resume {resume_dir}")
    if tensorboard:
        set_ = [*(set_ or []), "train.tensorboard=true"]
    spec = common.build_spec(spec_file, set_, name=spec_name, **flags)
    if not dry_run and nproc <= 1:  # run.threads auto: measured before torch loads, so OpenMP's wait can follow
        cpu_threads.early(spec.run.threads)
    if seeds is not None or stack is not None:
        raise typer.Exit(_seeds(spec, seeds, common.stack_cap(stack), fmt, out, resume, seed, nproc, dry_run))
    if nproc > 1 and "RANK" not in os.environ:
        precheck(spec, nproc, resume_dir)  # what one process can see is checked before any is started
        raise typer.Exit(launch_torchrun(nproc))
    if dry_run:
        return _dry_run(spec, fmt)
    summary = run(spec, fmt=fmt, resume_dir=resume_dir, auto=resume == "auto", force_resume=force_resume)
    raise typer.Exit(exit_code(summary["status"], summary.get("signal")))


def _seeds(spec, seeds: str | None, stack: int, fmt: output.Format, out: str | None, resume: str | None,
           seed: int | None, nproc: int, dry_run: bool) -> int:
    from . import train_seeds

    if seeds is not None and seed is not None:
        raise UserError("give --seed or --seeds, not both")
    if nproc > 1:
        raise UserError("--seeds and --stack train in one process; --nproc runs one seed over several (drop one)")
    if resume not in (None, "auto"):
        raise UserError("with --seeds resume as --resume auto --out DIR: each seed continues from DIR/seed<N>")
    chosen = parse_seeds(seeds) if seeds is not None else [spec.run.seed]  # checked under --dry-run too
    if dry_run:
        _dry_run(spec, fmt)
        return errors.OK
    return train_seeds.run(spec, chosen, stack=stack, fmt=fmt,
                           out=out, resume=resume == "auto")


def _dry_run(spec, fmt: output.Format) -> None:
    from ..model import build_model, count_params
    from ..training import runtime

    spec = runtime.pinned(spec, runtime.plan(spec.run, spec.train))  # an unusable device fails here, as in training
    channels, classes = shape_of(spec.data)
    model = build_model(spec.model, channels, spec.model.num_classes or classes)
    params = count_params(model)
    record = {"event": "dry_run", "params": params, "units": len(model.units), "spec": to_tree(spec)}
    # For people: the resolved spec as YAML (what spec.yaml would hold), then the size of the net.
    yaml_view = output.View(draw=lambda width: to_yaml(spec).rstrip("\n"), notes=[
        f"# params: {params:,} ({output.params_str(params)}), residual units: {len(model.units)}"])
    output.render([record], fmt, yaml_view)


def run(spec, *, fmt: output.Format, resume_dir: Path | None = None, auto: bool = False,
        force_resume: bool = False) -> dict[str, Any]:
    """Start or continue a run in its run directory and report it; returns the summary (also on disk)."""
    from ..training.session import open_run

    resume = "never" if resume_dir is None else "auto" if auto else "must"
    path = None
    try:
        with open_run(spec, resume_dir, resume=resume, force_resume=force_resume,
                      callbacks=[TerminalProgress(fmt)], say=output.info) as session:
            path = session.run_dir.path
            if session.finished is not None:
                done = session.finished
                output.info(f"{session.run_dir.path}: nothing to train, the run had already ended "
                            f"({done.get('status')} at iteration {done.get('iterations')}); its summary:")
            summary = session.train()
    except UserError as exc:
        # A full disk after a checkpoint: the same `train` would refuse the directory; --resume goes on.
        if exc.code == errors.RESOURCES and path is not None and (path / CHECKPOINT).is_file():
            raise UserError(exc.message.replace(errors.RERUN, f"resume with: resnet train --resume {path}"),
                            code=exc.code) from None
        raise
    _report(summary, fmt)
    return summary


def _report(summary: dict[str, Any], fmt: output.Format) -> None:
    from ..training import distributed

    if not distributed.from_env().is_main:  # under torchrun rank 0 reports for all
        return
    output.render([summary], fmt, SUMMARY_VIEW)
    if summary["status"] == "diverged":
        output.info(f"[red]diverged[/] at iteration {summary['diverged_at']['iter']} "
                    f"(loss {summary['diverged_at']['loss']}); last good checkpoint kept in {summary['run_dir']}")
    elif summary["status"] == "interrupted":
        output.info(f"interrupted; resume with: resnet train --resume {summary['run_dir']}")
