"""Activation checkpointing: peak memory and losses without and with it, each in its own process."""

from __future__ import annotations

import math
import tempfile
from pathlib import Path
from typing import Any

from .contention import Contention
from .jobs import Progress, bench_tree, check_spec, device_of, run_job

def default_segments(spec) -> int:
    """~sqrt(units) segments: stored boundaries and one recomputed segment then cost about the same
    (Chen et al. 2016, sec. 4)."""
    from ..spec import units_per_stage

    return max(1, round(math.sqrt(sum(units_per_stage(spec.model)))))


# glibc returns a freed block to the OS only when it was mmap()ed; once large blocks have been freed
# its threshold rises and later ones come from the heap, where fragmentation keeps them resident.
# A fixed low threshold makes the peak RSS follow the live tensors (at a page-fault cost per block).
RELEASED_ENV = {"MALLOC_MMAP_THRESHOLD_": "65536"}


def compare_checkpointing(spec, *, segments: int | None = None, steps: int = 2, name: str | None = None,
                          released: bool = True, progress: Progress | None = None) -> dict[str, Any]:
    """Peak memory and losses of `steps` training steps without and with activation checkpointing,
    each in its own process from the same initial weights and batches. On the CPU, `released` also
    measures both with freed blocks handed back to the OS (RELEASED_ENV): process RSS then shows the
    tensors' memory rather than what glibc's heap keeps."""
    import torch

    from .. import spec as spec_mod

    check_spec(spec)
    if steps < 2:
        raise ValueError("steps must be at least 2 (the first step is not timed)")
    k = segments or default_segments(spec)
    say = progress or (lambda _msg: None)
    device = device_of(spec)
    settings = [("", {})] + ([("released_", RELEASED_ENV)] if released and device == "cpu" else [])
    runs: dict[tuple[str, str], dict] = {}
    with tempfile.TemporaryDirectory(prefix="resnet-bench-") as tmp:
        watch = Contention()
        for prefix, env in settings:
            for label, segs in (("plain", 0), ("checkpointed", k)):
                tree = spec_mod.to_tree(spec)
                spec_mod.set_dotted(tree, "train.checkpoint_segments", segs)
                tree = bench_tree(tree, 0, steps - 1)  # `steps` iterations; steps 2.. are timed
                job = {"side": "ours", "mode": "memory", "device": device, "steps": steps - 1, "warmup": 0,
                       "spec": tree, "state_out": str(Path(tmp) / f"{prefix}{label}.pt")}
                r = runs[prefix, label] = run_job(job, env)
                say(f"{label:<13} K={segs:<3} {'freed blocks released' if env else 'runtime malloc policy':<22} "
                    f"peak {r['peak_memory_mb']:,.0f} MB  step {r['step_time_s']:.2f} s  "
                    f"losses {', '.join(f'{x:.6f}' for x in r['losses'])}")
        contention = watch.stop()
        a = torch.load(Path(tmp) / "plain.pt", weights_only=True)
        b = torch.load(Path(tmp) / "checkpointed.pt", weights_only=True)
    plain, ckpt = runs["", "plain"], runs["", "checkpointed"]
    diffs = [abs(x - y) for x, y in zip(plain["losses"], ckpt["losses"])]
    out: dict[str, Any] = {
        "event": "bench", "mode": "memory", "spec": name, "depth": spec.model.depth, "block": spec.model.block,
        "unit": spec.model.unit, "batch_size": spec.optim.batch_size, "segments": k,
        "units": sum(spec_mod.units_per_stage(spec.model)), "steps": steps, "device": plain["device"],
        "losses": ckpt["losses"], "baseline_losses": plain["losses"],
        "first_step_loss_diff": diffs[0], "max_loss_diff": max(diffs),
        "param_max_diff": _max_diff(a["params"], b["params"]),
        "bn_stats_max_diff": _max_diff(a["buffers"], b["buffers"]),
    }
    for prefix, _env in settings:
        plain, ckpt = runs[prefix, "plain"], runs[prefix, "checkpointed"]
        out.update({
            f"{prefix}peak_memory_mb": ckpt["peak_memory_mb"],
            f"{prefix}baseline_peak_memory_mb": plain["peak_memory_mb"],
            f"{prefix}memory_ratio": ckpt["peak_memory_mb"] / plain["peak_memory_mb"],
            # Memory the steps added on top of the process at start (libraries, weights, data).
            f"{prefix}step_memory_mb": ckpt["peak_memory_mb"] - ckpt["start_memory_mb"],
            f"{prefix}baseline_step_memory_mb": plain["peak_memory_mb"] - plain["start_memory_mb"],
            f"{prefix}step_time_s": ckpt["step_time_s"], f"{prefix}baseline_step_time_s": plain["step_time_s"],
        })
    out["released_env"] = RELEASED_ENV if len(settings) > 1 else None
    out["contention"] = contention
    return out


def _max_diff(a: dict, b: dict) -> float:
    return max((float((a[k].double() - b[k].double()).abs().max()) if a[k].numel() else 0.0) for k in a)
