"""Stacked seeds against separate runs (`resnet bench --stack 1,4,8`): images per second per seed.

Separate: the real `Trainer`, one seed, in a fresh process: k seeds trained as separate runs at the
same threads take k times as long, so its rate per seed at k is its rate over k (and k processes
side by side at a k-th of the threads each do no better on a CPU whose threads are already busy).
Stacked: the k seeds as one net (training/stacked.py) in one fresh process at the same threads.
Both train on the spec's own dataset, so the quick studies' digits nets are measured on digits.
Rounds alternate the two sides; the ratio is the median of the per-round ratios. With
`train.compile: true` in the spec each round also times the stacked net with its forward under
torch.compile (the separate side stays eager, as the studies train), and each row gives compiled
against eager stacked and the first step's time (mostly compilation).
"""

from __future__ import annotations

import statistics
from typing import Any

from .contention import Contention
from .jobs import Progress, bench_tree, device_of, run_job


def parse(text: str) -> list[int]:
    """'1,4,8,16' -> [1, 4, 8, 16]: stack sizes, each at least 1."""
    from ..errors import UserError

    try:
        ks = [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise UserError(f"--stack {text}: expected stack sizes such as 1,4,8,16") from None
    if not ks or min(ks) < 1:
        raise UserError(f"--stack {text}: expected stack sizes of at least 1, such as 1,4,8,16")
    return list(dict.fromkeys(ks))


def bench_stack(spec, ks: list[int], *, steps: int = 20, warmup: int = 5, rounds: int = 3,
                name: str | None = None, progress: Progress | None = None) -> list[dict[str, Any]]:
    """One row per stack size k: images/s per seed stacked and separate, and their ratio."""
    from .. import spec as spec_mod

    say = progress or (lambda _msg: None)
    device = device_of(spec)
    compiled = spec.train.compile
    tree = bench_tree(spec_mod.to_tree(spec.model_copy(update={"train": spec.train.model_copy(
        update={"compile": False})})), warmup, steps)
    common = {"mode": "train", "device": device, "warmup": warmup, "steps": steps, "spec": tree, "data": "spec"}
    separate: list[float] = []
    stacked: dict[int, list[float]] = {k: [] for k in ks}
    ratios: dict[int, list[float]] = {k: [] for k in ks}
    fast: dict[int, list[float]] = {k: [] for k in ks}  # compiled over eager stacked, per round
    first: dict[int, list[float]] = {k: [] for k in ks}
    watch = Contention()
    for r in range(rounds):
        alone = run_job({**common, "side": "ours"})["images_per_s"]
        separate.append(alone)
        say(f"round {r + 1}/{rounds}  separate run (one seed)  {alone:>10,.0f} img/s")
        for k in ks:
            rate = run_job({**common, "side": "stacked", "members": k})["images_per_s"]
            stacked[k].append(rate)
            ratios[k].append(rate / alone)  # per seed: rate / k against alone / k
            say(f"round {r + 1}/{rounds}  stacked k={k:<3}             {rate / k:>10,.0f} img/s per seed")
            if compiled:
                got = run_job({**common, "side": "stacked", "members": k, "compile": True})
                fast[k].append(got["images_per_s"] / rate)
                first[k].append(got["first_step_s"])
                say(f"round {r + 1}/{rounds}  stacked k={k:<3} compiled    {got['images_per_s'] / k:>10,.0f} img/s "
                    f"per seed (first step {got['first_step_s']:.0f} s)")
    contention = watch.stop()
    base = statistics.median(separate)
    return [{"event": "stack", "spec": name or f"resnet{spec.model.depth}", "depth": spec.model.depth,
             "batch_size": spec.optim.batch_size, "dataset": spec.data.dataset, "device": device,
             "threads": spec.run.threads, "members": k, "separate_images_per_s_per_seed": base / k,
             "stacked_images_per_s_per_seed": statistics.median(stacked[k]) / k,
             "ratio": statistics.median(ratios[k]), "rounds": rounds, "steps": steps, "warmup": warmup,
             "contention": contention,
             **({"compiled_over_eager": statistics.median(fast[k]), "compiled_first_step_s": statistics.median(first[k])}
                if compiled else {})} for k in ks]
