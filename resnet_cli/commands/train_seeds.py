"""`resnet train --seeds 0..7 [--stack]`: the seeds of one spec, each an ordinary run directory
(RUN_DIR/seed<N> under --out), trained one after another or, with --stack, as one stacked net
(training/stacked_run.py). docs/train.md, Seeds, lists when --stack runs the seeds separately.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from .. import errors, output
from ..errors import UserError
from ..runs.writer import default_path
from ..spec import Spec
from .progress import StackProgress, TerminalProgress
from .progress import exit_code as one

SEEDS_VIEW = output.View(
    title="resnet train: seeds", columns=["seed", "status", "test error %", "training loss", "run directory"],
    row=lambda s: (s.get("seed"), s.get("status"), output.fmt(s.get("test_error")), output.fmt(s.get("train_loss"), 4),
                   s.get("run_dir")),
    keep=lambda s: s.get("event") == "summary")


def member_spec(spec: Spec, seed: int, out: str | None) -> Spec:
    """The spec of seed `seed`'s own run: its seed, and RUN_DIR/seed<N> where the seeds share an --out."""
    run = {"seed": seed, "out": str(Path(out) / f"seed{seed}") if out else None}
    return spec.model_copy(update={"run": spec.run.model_copy(update=run)})


def paths_of(specs: list[Spec]) -> list[Path]:
    return [Path(s.run.out) if s.run.out else default_path(s) for s in specs]


def exit_code(summaries: list[dict[str, Any]]) -> int:
    """A signal's code if any run was stopped by one, else 3 if any diverged, else 0."""

    codes = [one(s["status"], s.get("signal")) for s in summaries]
    for code in (errors.INTERRUPTED_TERM, errors.INTERRUPTED_INT, errors.DIVERGED):
        if code in codes:
            return code
    return errors.OK


def run(spec: Spec, seeds: list[int], *, stack: int, fmt: output.Format, out: str | None, resume: bool) -> int:
    """Train every seed of `spec`, `stack` at a time as one stacked net (0: one after another);
    returns the exit code."""
    from ..training import stacked_run

    specs = [member_spec(spec, seed, out or spec.run.out) for seed in seeds]
    if resume and not (out or spec.run.out):
        raise UserError("--resume auto with --seeds needs --out DIR (the seeds' runs are DIR/seed<N>)")
    reason = stacked_run.why_not(spec) if stack else None
    if stack and reason is not None:
        output.info(f"--stack: {reason}; the seeds train one after another")
    summaries: list[dict[str, Any]]
    if stack and reason is None:
        summaries = stacked_run.train(specs, paths_of(specs), resume="auto" if resume else "never", cap=stack,
                                      callbacks=[StackProgress(fmt)], alone=[TerminalProgress(fmt, seeds=True)], say=output.info)
    else:
        from ..training.session import open_run

        summaries = []
        for member, path in zip(specs, paths_of(specs)):
            with open_run(member, path, resume="auto" if resume else "never",
                          callbacks=[TerminalProgress(fmt, seeds=True)], say=output.info) as session:
                summaries.append(session.train())
            if summaries[-1]["status"] == "interrupted":
                break  # a signal stops the seeds still to come as well
    output.render(summaries, fmt, SEEDS_VIEW)
    return exit_code(summaries)
