"""Training throughput of ours against the textbook baseline, rounds alternating between them."""

from __future__ import annotations

import copy
import math
import statistics
from typing import Any

from .contention import Contention
from .jobs import Progress, bench_tree, check_spec, device_of, run_job, variant_label

CIFAR_TRAIN_IMAGES = 50_000  # for the projected length of a spec's schedule
BASELINE_WORKERS = 2  # what public CIFAR scripts use


def bench(spec, *, steps: int = 20, warmup: int = 5, rounds: int = 3, data_only: bool = False,
          with_baseline: bool = True, variants: list[dict[str, Any]] | None = None, name: str | None = None,
          progress: Progress | None = None, own_data: bool = False) -> list[dict[str, Any]]:
    """Training throughput (or, with data_only, the augmentation path alone) of ours under each
    variant against the baseline; one result dict per variant. Rounds alternate ours and baseline.
    `own_data`: ours alone on the spec's own dataset (digits nets too), no baseline."""
    from .. import spec as spec_mod

    if own_data:
        with_baseline = False
    else:
        check_spec(spec)
    if steps < 1 or warmup < 1 or rounds < 1:
        raise ValueError("steps, warmup and rounds must be at least 1")
    variants = variants or [{}]
    say = progress or (lambda _msg: None)
    device = device_of(spec)
    mode = "data" if data_only else "train"
    base_tree = spec_mod.to_tree(spec)
    ours_jobs = []
    for variant in variants:
        tree = copy.deepcopy(base_tree)
        for key, value in variant.items():
            spec_mod.set_dotted(tree, key, value)
        vspec = spec_mod.load(tree, name=f"--vary {variant_label(variant)}")
        ours_jobs.append({"side": "ours", "mode": mode, "device": device_of(vspec), "warmup": warmup,
                          "steps": steps, "spec": bench_tree(spec_mod.to_tree(vspec), warmup, steps),
                          **({"data": "spec"} if own_data else {})})
    base_job = {"side": "baseline", "mode": mode, "device": device, "warmup": warmup, "steps": steps,
                "spec": bench_tree(base_tree, warmup, steps), "workers": BASELINE_WORKERS}
    ours_runs: list[list[dict]] = [[] for _ in variants]
    base_runs: list[dict] = []
    watch = Contention()
    for r in range(rounds):
        order = [("ours", i) for i in range(len(variants))]
        if with_baseline:
            # Alternate who goes first, so a slow start of the machine does not always hit one side.
            order = order + [("baseline", -1)] if r % 2 == 0 else [("baseline", -1)] + order
        for side, i in order:
            job = ours_jobs[i] if side == "ours" else base_job
            label = "baseline" if side == "baseline" else ("ours " + variant_label(variants[i])).strip()
            result = run_job(job)
            (base_runs if side == "baseline" else ours_runs[i]).append(result)
            say(f"round {r + 1}/{rounds}  {label:<28} {result['images_per_s']:>10,.0f} img/s  "
                f"peak {result['peak_memory_mb']:,.0f} MB")
    contention = watch.stop()
    base = _aggregate(base_runs) if base_runs else None
    out = []
    for variant, job, runs in zip(variants, ours_jobs, ours_runs):
        ours = _aggregate(runs)
        row: dict[str, Any] = {"event": "bench", "mode": mode, "spec": name, "depth": spec.model.depth,
                               "block": spec.model.block, "unit": spec.model.unit,
                               "batch_size": spec.optim.batch_size, "variant": variant,
                               "label": ("ours " + variant_label(variant)).strip(), **_prefixed(ours, "")}
        if base is not None:
            row.update(_prefixed(base, "baseline_"))
            # Each round's pair ran back to back under the same load: the median of the per-round
            # ratios is robust to the load changing between rounds, which a ratio of medians is not.
            paired = [o["images_per_s"] / b["images_per_s"] for o, b in zip(runs, base_runs)]
            row["ratio"] = statistics.median(paired)
            row["per_round_ratio"] = [round(x, 3) for x in paired]
            row["cpu_ratio"] = (base["cpu_s_per_image"] / ours["cpu_s_per_image"]
                                if base.get("cpu_s_per_image") and ours.get("cpu_s_per_image") else None)
        else:
            row["ratio"] = None
        if mode == "train":
            vspec = spec_mod.load(job["spec"], name="bench spec")
            row["projected_schedule_h"] = _projected_hours(spec, ours["step_time_s"])
            row["schedule_iters"] = _schedule_iters(spec)
            row["compile"] = vspec.train.compile
        row.update({"steps": steps, "warmup": warmup, "rounds": rounds, "contention": contention})
        out.append(row)
    return out


def _aggregate(runs: list[dict]) -> dict[str, Any]:
    """Median over rounds for times and rates (robust to one disturbed round), max for peaks."""
    first = runs[0]
    agg: dict[str, Any] = {"images_per_s": statistics.median(r["images_per_s"] for r in runs),
                           "per_round_images_per_s": [round(r["images_per_s"], 1) for r in runs]}
    agg["step_time_s"] = statistics.median(r["step_time_s"] for r in runs)
    cpu = [r["cpu_s_per_image"] for r in runs if r.get("cpu_s_per_image")]
    agg["cpu_s_per_image"] = statistics.median(cpu) if cpu else None
    agg["first_step_s"] = statistics.median(r["first_step_s"] for r in runs)
    agg["peak_memory_mb"] = max(r["peak_memory_mb"] for r in runs)
    agg["peak_rss_mb"] = max(r["peak_rss_mb"] for r in runs)
    agg["start_rss_mb"] = max(r["start_rss_mb"] for r in runs)
    agg["flops_per_image"] = first.get("flops_per_image")
    agg["achieved_gflop_s"] = (agg["flops_per_image"] * agg["images_per_s"] / 1e9
                               if agg["flops_per_image"] else None)
    # Compile time, apart from step time: the first step minus an ordinary one.
    agg["compile_s"] = max(agg["first_step_s"] - agg["step_time_s"], 0.0) if first.get("compiled") else None
    agg["runtime"] = first.get("runtime")
    agg["device"] = first.get("device")
    return agg


def _prefixed(d: dict[str, Any], prefix: str) -> dict[str, Any]:
    return {prefix + k: v for k, v in d.items()}


def _schedule_iters(spec) -> int:
    from ..training import schedule

    n = CIFAR_TRAIN_IMAGES - spec.data.val_split
    return schedule.total_iters(spec.optim, math.ceil(n / spec.optim.batch_size))


def _projected_hours(spec, step_time_s: float) -> float:
    """Training time of the spec's whole schedule (the papers' 64k iterations) at the measured
    step time; evaluation passes not included."""
    return _schedule_iters(spec) * step_time_s / 3600
