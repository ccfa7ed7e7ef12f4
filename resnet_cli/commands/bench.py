"""`resnet bench`: training speed and memory of a spec, beside the textbook baseline."""

from __future__ import annotations

from typing import Annotated, Any, Optional

import typer

from .. import bench as bench_mod
from .. import output
from ..bench import busy as busy_mod
from ..bench import contention
from ..bench import stack as stack_mod
from ..cli import command
from ..errors import FAILED, UserError
from ..training import cpu_threads, runtime
from . import common

Steps = Annotated[Optional[int], typer.Option(
    "--steps", min=1, help="Timed steps per measurement (default: 20; 50 with --data-only; 2 with --memory).")]
Warmup = Annotated[int, typer.Option(
    "--warmup", min=1, help="Untimed steps first (workers start, caches and autotuning warm up).")]
Rounds = Annotated[int, typer.Option(
    "--rounds", min=1, help="Measurements of each side, alternating ours and baseline; medians reported.")]
DataOnly = Annotated[bool, typer.Option(
    "--data-only", help="Time the augmentation path alone: our on-device batches vs the baseline's DataLoader.")]
Memory = Annotated[bool, typer.Option(
    "--memory", help="Peak memory and losses without and with activation checkpointing (train.checkpoint_segments).")]
Segments = Annotated[Optional[int], typer.Option(
    "--segments", min=1, help="With --memory: checkpoint segments K (default ~sqrt(residual units)).")]
Baseline = Annotated[bool, typer.Option(
    "--baseline/--no-baseline", help="Also measure the textbook baseline (NCHW fp32 eager, PIL DataLoader).")]
Stack = Annotated[Optional[str], typer.Option(
    "--stack", help="Stack sizes, e.g. 1,4,8,16: images/s per seed of k seeds trained as one stacked net against "
                    "separate runs, on the spec's own dataset (digits nets too).")]
Busy = Annotated[bool, typer.Option(
    "--busy", help="Measure each --vary variant on the machine as it is, then with every core kept busy by another "
                   "process (ours alone, on the spec's own dataset): --vary run.threads=auto,0,1 --busy.")]
Vary = Annotated[Optional[list[str]], typer.Option(
    "--vary", help="Measure ours under each value: --vary train.channels_last=on,off (repeatable: all combinations).")]


@command()
def bench(
    spec_file: common.SpecArg = None,
    depth: common.Depth = None,
    preact: common.Preact = False,
    batch_size: common.BatchSize = None,
    seed: common.Seed = None,
    device: common.Device = None,
    threads: common.Threads = None,
    set_: common.Set = None,
    json_: common.Json = False,
    steps: Steps = None,
    warmup: Warmup = 5,
    rounds: Rounds = 3,
    data_only: DataOnly = False,
    memory: Memory = False,
    segments: Segments = None,
    baseline: Baseline = True,
    vary: Vary = None,
    stack: Stack = None,
    busy: Busy = False,
) -> None:
    """Images/s, step time, peak memory, FLOPs of ours and of the textbook baseline, and their ratio.

    Each measurement runs in a fresh process; ours and baseline alternate. Examples:
    `resnet bench cifar/resnet56`, `resnet bench --data-only`,
    `resnet bench preact/resnet1001-cifar10 --batch-size 32 --memory`.
    """
    if sum((data_only, memory, stack is not None, busy)) > 1:
        raise UserError("--data-only, --memory, --stack and --busy are separate modes: give one")
    fmt = output.choose(json_)
    spec = common.build_spec(spec_file, set_, depth=depth, preact=preact, batch_size=batch_size, seed=seed,
                             device=device, threads=threads)
    ks = stack_mod.parse(stack) if stack is not None else None
    if ks is None and not busy:
        bench_mod.check_spec(spec)  # the baseline comparison feeds CIFAR-shaped images
    else:
        if spec_file is None and not any(item.startswith("data.") for item in set_ or []):
            # No spec named: CIFAR-shaped synthetic images, as the plain bench feeds, so it runs offline.
            spec = common.build_spec(None, ["data.dataset=synthetic", *(set_ or [])], depth=depth, preact=preact,
                                     batch_size=batch_size, seed=seed, device=device, threads=threads)
        from ..data import check_readable

        check_readable(spec.data)  # missing data is one line here, not a failure in each child
    if device is not None or spec.run.device != "auto":
        # An unavailable device is bad input: say so before measuring. `plan` without probing the
        # GPU: a CUDA context in this parent would hold GPU memory while the children measure.
        runtime.plan(spec.run, spec.train, probe_gpu=False)
    name = spec_file or f"resnet{spec.model.depth}"
    console = output.stderr()
    progress = console.print
    variants = bench_mod.variants_from(vary or [])  # bad input is refused before any warning
    load = cpu_threads.load_1min()
    warnings = [w for w in [contention.competes(spec.run.threads, load_1min=load)] if w and not busy]
    for w in warnings:  # before measuring: minutes may be saved by stopping now
        console.print(f"[yellow]warning[/]: {w}")
    try:
        if ks is not None:
            rows = bench_mod.bench_stack(spec, ks, steps=steps or 20, warmup=warmup, rounds=rounds, name=name,
                                         progress=progress)
            _record_load(console, rows, spec.run.threads, load, warnings)
            _render_stack(rows, fmt)
            return
        if busy:
            rows = busy_mod.bench_busy(spec, variants or [{}], steps=steps or 20, warmup=warmup, rounds=rounds,
                                       name=name, progress=progress)
            for row in rows:
                row["load_1min"] = load
            _render(rows, fmt, busy_mod.ratios(rows))
            return
        if memory:
            result = bench_mod.compare_checkpointing(spec, segments=segments, steps=steps or 2, name=name,
                                                     progress=progress)
            _record_load(console, [result], spec.run.threads, load, warnings)
            _render_memory(result, fmt)
            return
        rows = bench_mod.bench(spec, steps=steps or (50 if data_only else 20), warmup=warmup, rounds=rounds,
                               data_only=data_only, with_baseline=baseline, variants=variants, name=name,
                               progress=progress)
    except bench_mod.MeasureFailed as exc:
        raise UserError(str(exc), code=FAILED) from None
    _record_load(console, rows, spec.run.threads, load, warnings)
    _render(rows, fmt)


def _record_load(console, rows: list[dict[str, Any]], threads: int, load: float | None, warnings: list[str]) -> None:
    """The 1-minute load before measuring and any contention warning go into every result object;
    a warning the measurement itself raises (other processes' CPU use) is printed now."""
    if not warnings:
        for row in rows:
            n = (row.get("runtime") or {}).get("threads", threads)
            w = contention.competes(n if isinstance(n, int) else threads, contention=row.get("contention"))
            if w and w not in warnings:
                console.print(f"[yellow]warning[/]: {w}")
                warnings.append(w)
    for row in rows:
        row["load_1min"] = load
        row["warnings"] = list(warnings)


def _render(rows: list[dict[str, Any]], fmt, extra: list[str] = ()) -> None:
    first = rows[0]
    what = "augmentation path alone" if first["mode"] == "data" else "training, whole steps"
    title = (f"resnet bench: {first['spec']} (depth {first['depth']}, batch {first['batch_size']}, "
             f"{first['device']}): {what}")
    cols = ["", "img/s", "step ms", "CPU ms/img", "peak MB", "GFLOP/s", "x base"]
    table_rows = [_line(r["label"], r, "", r["ratio"]) for r in rows]
    if first.get("baseline_images_per_s") is not None:
        table_rows.append(_line("textbook baseline", first, "baseline_", 1.0))
    notes = [f"median of {first['rounds']} rounds x {first['steps']} steps after {first['warmup']} warm-up; "
             "x base: median of the per-round ratios"]
    notes += [f"{r['label']}: {_settings(r.get('runtime'))}" for r in rows]
    flops = [(r["label"], r.get("flops_per_image")) for r in rows]
    if first.get("baseline_flops_per_image"):
        flops.append(("baseline", first["baseline_flops_per_image"]))
    if any(f for _, f in flops):
        notes.append("FLOPs per image, forward + backward: "
                     + ", ".join(f"{label} {f / 1e9:.3f} G" for label, f in flops if f))
    if first["mode"] == "train":
        notes.append("projected " + ", ".join(f"{r['label']}: {r['projected_schedule_h']:.2f} h" for r in rows)
                     + f" for the spec's {first['schedule_iters']:,} iterations (training steps only)")
        for r in rows:
            if r.get("compile_s") is not None:
                notes.append(f"{r['label']}: compile {r['compile_s']:.1f} s (first step minus a step)")
    # --busy: each half measured its own contention
    notes += list(dict.fromkeys((f"{r['load']}: " if "load" in r else "") + _contention_line(r["contention"])
                                for r in rows))
    notes += [f"warning: {w}" for w in first.get("warnings", [])]
    notes += extra
    output.render(rows, fmt, output.View(title, cols, rows=lambda records: table_rows, caption="\n".join(notes),
                                         no_wrap_first=True))


def _line(label: str, r: dict[str, Any], p: str, ratio: float | None) -> list[str]:
    achieved = r.get(p + "achieved_gflop_s")
    cpu = r.get(p + "cpu_s_per_image")
    return [label, f"{r[p + 'images_per_s']:,.0f}", f"{1000 * r[p + 'step_time_s']:.1f}",
            f"{1000 * cpu:.3f}" if cpu else "-", f"{r[p + 'peak_memory_mb']:,.0f}",
            f"{achieved:.1f}" if achieved else "-", f"{ratio:.2f}x" if ratio is not None else "-"]


def _settings(runtime: dict[str, Any] | None) -> str:
    if not runtime:
        return "-"
    keys = ("channels_last", "bf16", "threads", "compile", "checkpoint_segments", "augment")
    return ", ".join(f"{k}={runtime[k]}" for k in keys if k in runtime)


def _contention_line(c: dict[str, Any]) -> str:
    parts = [f"machine: {c.get('cores')} cores, load {c.get('loadavg_start')} -> {c.get('loadavg_end')}"]
    if "other_cores" in c:
        parts.append(f"other processes used {c['other_cores']:.2f} cores on average")
    if c.get("other_processes"):
        parts.append("busiest: " + ", ".join(f"{p['name']} {p['cores']:.2f}" for p in c["other_processes"][:4]))
    return "; ".join(parts)


def _render_stack(rows: list[dict[str, Any]], fmt) -> None:
    first = rows[0]
    title = (f"resnet bench --stack: {first['spec']} (depth {first['depth']}, batch {first['batch_size']}, "
             f"{first['dataset']}, {first['device']}): seeds stacked as one net against separate runs")
    cols = ["k", "separate img/s per seed", "stacked img/s per seed", "x separate"]
    lines = [[str(r["members"]), f"{r['separate_images_per_s_per_seed']:,.0f}",
              f"{r['stacked_images_per_s_per_seed']:,.0f}", f"{r['ratio']:.2f}x"] for r in rows]
    if "compiled_over_eager" in first:  # train.compile: the stacked forward compiled, against eager
        cols += ["compiled x eager", "first step (compiling)"]
        for line, r in zip(lines, rows):
            line += [f"{r['compiled_over_eager']:.2f}x", f"{r['compiled_first_step_s']:.0f} s"]
    notes = [f"median of {first['rounds']} rounds x {first['steps']} steps after {first['warmup']} warm-up, each "
             "side in a fresh process at the same threads; x separate: median of the per-round ratios",
             _contention_line(first["contention"])]
    notes += [f"warning: {w}" for w in first.get("warnings", [])]
    output.render(rows, fmt, output.View(title, cols, rows=lambda records: lines, caption="\n".join(notes)))


def _render_memory(r: dict[str, Any], fmt) -> None:
    title = (f"resnet bench --memory: {r['spec']} (depth {r['depth']}, batch {r['batch_size']}, {r['device']}, "
             f"{r['units']} units)")
    cols = ["", "peak MB", "step MB", "step s", "losses"]
    rows = []
    for prefix, how in (("", ""), ("released_", ", freed blocks released")):
        if f"{prefix}peak_memory_mb" not in r:
            continue
        rows += [
            [f"no checkpointing{how}", f"{r[prefix + 'baseline_peak_memory_mb']:,.0f}",
             f"{r[prefix + 'baseline_step_memory_mb']:,.0f}", f"{r[prefix + 'baseline_step_time_s']:.2f}",
             ", ".join(f"{x:.6f}" for x in r["baseline_losses"])],
            [f"checkpointing K={r['segments']}{how}", f"{r[prefix + 'peak_memory_mb']:,.0f}",
             f"{r[prefix + 'step_memory_mb']:,.0f}", f"{r[prefix + 'step_time_s']:.2f}",
             ", ".join(f"{x:.6f}" for x in r["losses"])],
        ]
    released = r.get("released_memory_ratio")
    notes = [f"peak ratio {r['memory_ratio']:.1%}"
             + (f" ({released:.1%} with freed blocks released)" if released is not None else "")
             + f"; first-step loss difference {r['first_step_loss_diff']:.2e}, largest over {r['steps']} steps "
             f"{r['max_loss_diff']:.2e}",
             f"after {r['steps']} steps: weights differ by at most {r['param_max_diff']:.2e}, "
             f"BN statistics by {r['bn_stats_max_diff']:.2e}",
             "peak = process peak RSS on the CPU (max allocated on CUDA); step MB = peak minus memory at start"]
    if r.get("released_env"):
        notes.append("freed blocks released: " + " ".join(f"{k}={v}" for k, v in r["released_env"].items())
                     + " (glibc hands large freed blocks back to the OS, so RSS follows live tensors)")
    notes.append(_contention_line(r["contention"]))
    output.render([r], fmt, output.View(title, cols, rows=lambda records: rows, caption="\n".join(notes),
                                        no_wrap_first=True))
