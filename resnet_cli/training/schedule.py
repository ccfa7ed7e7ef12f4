"""The learning rate as a pure function of the iteration count.

Peers set a warm-up lr by hand and let a scheduler overwrite it (or never restore 0.1); computing
lr(iteration) from the spec alone makes the whole trace testable and resume exact.
"""

from __future__ import annotations

import math

from ..spec import OptimSpec


def total_iters(optim: OptimSpec, iters_per_epoch: int) -> int:
    return optim.iters if optim.iters is not None else optim.epochs * iters_per_epoch


def milestone_iters(optim: OptimSpec, iters_per_epoch: int) -> list[int]:
    """Milestones are written in the unit of the run's length; the loop counts iterations."""
    scale = 1 if optim.iters is not None else iters_per_epoch
    return [m * scale for m in (optim.milestones or [])]


def lr_at(iteration: int, optim: OptimSpec, iters_per_epoch: int) -> float:
    """He 2016b sec. 4: lr 0.01 until `warmup_iters`, then back to `lr`, divided by 1/gamma at
    each milestone (He 2016a: 0.1, /10 at 32k and 48k, stop at 64k).

    `schedule: cosine` keeps the same warm-up and then follows lr/2 (1 + cos(pi t / T)) over the
    whole run's T iterations (Loshchilov & Hutter 2017, one cycle, no restarts): t counts from the
    run's start, as the milestones do, so the warm-up only replaces the curve's first values."""
    if iteration < optim.warmup_iters:
        return optim.warmup_lr
    if optim.schedule == "cosine":
        total = total_iters(optim, iters_per_epoch)
        return 0.5 * optim.lr * (1.0 + math.cos(math.pi * iteration / total))
    passed = sum(1 for m in milestone_iters(optim, iters_per_epoch) if iteration >= m)
    return optim.lr * optim.gamma ** passed


def warmup_note(optim: OptimSpec, iters_per_epoch: int) -> str | None:
    """One line when the warm-up swallows the schedule: it reaches the first lr step (or, in a run
    without steps, half the run, where the papers' schedule first steps), so the run hardly ever
    trains at optim.lr. He 2016b's 400 iterations are 0.6% of a 64k-iteration run."""
    w = optim.warmup_iters
    if not w:
        return None
    total = total_iters(optim, iters_per_epoch)
    steps = milestone_iters(optim, iters_per_epoch)
    end = steps[0] if steps else total // 2
    if w < end:
        return None
    if steps:
        where, effect = f"the first lr step at iteration {end}", "the lr never returns to"
    else:
        where, effect = f"half of the run's {total} iterations", "the run spends most of it below"
    return (f"optim.warmup_iters {w} reaches past {where}: {effect} optim.lr {optim.lr:g}; "
            f"set optim.warmup_iters below {end} or train longer")
