"""Speed and memory measurements: our training path against the textbook baseline.

Every configuration runs in a fresh Python process (`python -m resnet_cli.bench`, the job as JSON
on stdin, the figures as one JSON line on stdout), so a peak resident-set size belongs to that one
configuration and nothing measured earlier pollutes it. Ours and the baseline alternate round by
round: on a shared machine the same contention falls on both. Rates are medians over rounds; the
speed-up is the median of the per-round ratios (each pair ran back to back under the same load).
CPU seconds per image (this process, its threads and its DataLoader workers) are reported beside
wall-clock rates: contention stretches the wall clock much more than the CPU time a step needs.

Ours is the real thing, not a copy tuned for the benchmark: `train.Trainer` with the spec's
runtime settings, `data.Batches` and the model from `build_model`, timed by a callback. The
baseline is `baseline.py`: NCHW, fp32, eager, torchvision's DataLoader with per-image PIL
transforms in 2 worker processes. Both see the same CIFAR-shaped images (`baseline.cifar_like`).

What a step includes: the time from the end of one step's backward to the end of the next one's,
i.e. optimizer update, fetching and augmenting the batch, forward and backward. Warm-up steps (the
DataLoader starting its workers, cuDNN autotuning, `torch.compile`) come before the timed window;
the first step's duration is reported apart (with compile on, that is mostly compile time).

FLOPs are counted by `torch.utils.flop_counter.FlopCounterMode` over one forward and backward
(convolutions and the linear layer; BN, ReLU and additions are not counted), without activation
recomputation, so achieved FLOP/s compares the same work whatever the settings.
"""

from __future__ import annotations

import contextlib
import copy
import itertools
import json
import math
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Callable, Iterable

MB = 2**20
CIFAR_TRAIN_IMAGES = 50_000  # for the projected length of a spec's schedule
BASELINE_WORKERS = 2  # what public CIFAR scripts use

Progress = Callable[[str], None]


class MeasureFailed(Exception):
    """A measuring process died or returned no figures (out of memory, a crash)."""


# ---------------------------------------------------------------------------------------------
# The parent side: build jobs, run them in fresh processes, aggregate


def bench_tree(spec_tree: dict, warmup: int, steps: int) -> dict:
    """The spec a timed run of ours uses: exactly warmup + steps + 1 iterations, no checkpoints,
    one evaluation at the end (after the timed window), never stopped as diverged (random labels)."""
    from .. import spec as spec_mod

    tree = copy.deepcopy(spec_tree)
    for key, value in [("optim.iters", warmup + steps + 1), ("optim.epochs", None), ("optim.milestones", None),
                       ("train.checkpoint_every", 0), ("train.eval_every", "end"),
                       ("train.grad_norm_every", 0), ("train.diverge_factor", 1e9)]:
        spec_mod.set_dotted(tree, key, value)
    return tree


def check_spec(spec) -> None:
    """bench feeds CIFAR-shaped images (3 x 32 x 32): only CIFAR-family nets apply."""
    from ..errors import UserError

    if spec.model.family != "cifar":
        raise UserError(f"bench measures CIFAR-family nets on 32x32 images; model.family is {spec.model.family} "
                        "(use a cifar/ or preact/ config)")


def device_of(spec) -> str:
    import torch

    d = spec.run.device
    if d == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    return d


def run_job(job: dict[str, Any], extra_env: dict[str, str] | None = None) -> dict[str, Any]:
    """Run one measurement in a fresh interpreter and return its figures."""
    env = {**os.environ, **(extra_env or {})}
    root = str(Path(__file__).resolve().parents[2])
    env["PYTHONPATH"] = root + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    proc = subprocess.run([sys.executable, "-m", "resnet_cli.bench"], input=json.dumps(job), env=env,
                          capture_output=True, text=True)
    if proc.returncode != 0:
        if proc.returncode < 0:
            why = f"killed by signal {-proc.returncode}"
            if -proc.returncode == signal.SIGKILL:
                why += " (out of memory?)"
        else:
            lines = [ln for ln in proc.stderr.strip().splitlines() if ln.strip()]
            why = lines[-1][:300] if lines else f"exit status {proc.returncode}"
        raise MeasureFailed(f"{job['side']} {job['mode']} measurement failed: {why}")
    lines = [ln for ln in proc.stdout.splitlines() if ln.strip()]
    if not lines:
        raise MeasureFailed(f"{job['side']} {job['mode']} measurement printed no figures")
    return json.loads(lines[-1])


def variants_from(items: Iterable[str]) -> list[dict[str, Any]]:
    """`--vary key=v1,v2 --vary other=a,b` -> the product of the settings, in order."""
    from .. import spec as spec_mod
    from ..errors import UserError

    axes = []
    for item in items:
        key, _, text = item.partition("=")
        if not key or not text:
            raise UserError(f"--vary {item}: expected dotted.key=v1,v2, e.g. --vary train.channels_last=on,off")
        axes.append([(key.strip(), spec_mod.parse_set(f"{key}={v}")[1]) for v in text.split(",")])
    return [dict(combo) for combo in itertools.product(*axes)] if axes else [{}]


def _variant_label(variant: dict[str, Any]) -> str:
    return " ".join(f"{k.split('.')[-1]}={_show(v)}" for k, v in variant.items())


def _show(v: Any) -> str:
    return str(v).lower() if isinstance(v, bool) else str(v)


def bench(spec, *, steps: int = 20, warmup: int = 5, rounds: int = 3, data_only: bool = False,
          with_baseline: bool = True, variants: list[dict[str, Any]] | None = None, name: str | None = None,
          progress: Progress | None = None) -> list[dict[str, Any]]:
    """Training throughput (or, with data_only, the augmentation path alone) of ours under each
    variant against the baseline; one result dict per variant. Rounds alternate ours and baseline."""
    from .. import spec as spec_mod

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
        vspec = spec_mod.resolve(spec_mod.validate(tree, f"--vary {_variant_label(variant)}"))
        ours_jobs.append({"side": "ours", "mode": mode, "device": device_of(vspec), "warmup": warmup,
                          "steps": steps, "spec": bench_tree(spec_mod.to_tree(vspec), warmup, steps)})
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
            label = "baseline" if side == "baseline" else ("ours " + _variant_label(variants[i])).strip()
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
                               "label": ("ours " + _variant_label(variant)).strip(), **_prefixed(ours, "")}
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
            vspec = spec_mod.validate(job["spec"])
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
    from .. import schedule

    n = CIFAR_TRAIN_IMAGES - spec.data.val_split
    return schedule.total_iters(spec.optim, math.ceil(n / spec.optim.batch_size))


def _projected_hours(spec, step_time_s: float) -> float:
    """Training time of the spec's whole schedule (the papers' 64k iterations) at the measured
    step time; evaluation passes not included."""
    return _schedule_iters(spec) * step_time_s / 3600


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


# ---------------------------------------------------------------------------------------------
# What else ran on the machine while we measured


class Contention:
    """CPU used by other processes during a measurement: the machine-wide busy time from
    /proc/stat minus our own (this process and its waited-for descendants), plus the busiest
    long-lived other processes by name. Empty figures where /proc is absent."""

    def __init__(self) -> None:
        self.t0 = time.time()
        self.busy0 = _busy_seconds()
        self.own0 = _own_seconds()
        self.procs0 = _proc_seconds()
        self.load0 = _loadavg()

    def stop(self) -> dict[str, Any]:
        wall = max(time.time() - self.t0, 1e-9)
        out: dict[str, Any] = {"wall_s": round(wall, 1), "cores": os.cpu_count(), "loadavg_start": self.load0,
                               "loadavg_end": _loadavg()}
        busy = _busy_seconds()
        if busy is not None and self.busy0 is not None:
            own = _own_seconds() - self.own0
            out["own_cores"] = round(own / wall, 2)
            out["other_cores"] = round(max(busy - self.busy0 - own, 0.0) / wall, 2)
        procs = _proc_seconds()
        me = os.getpid()
        others = []
        for pid, (comm, secs) in procs.items():
            if pid == me or pid not in self.procs0:
                continue
            used = secs - self.procs0[pid][1]
            if used / wall >= 0.05:
                others.append({"name": comm, "cores": round(used / wall, 2)})
        out["other_processes"] = sorted(others, key=lambda p: -p["cores"])[:8]
        return out


def _busy_seconds() -> float | None:
    try:
        fields = Path("/proc/stat").read_text().splitlines()[0].split()[1:]
    except OSError:
        return None
    ticks = [int(x) for x in fields]
    idle = ticks[3] + (ticks[4] if len(ticks) > 4 else 0)
    return (sum(ticks[:8]) - idle) / os.sysconf("SC_CLK_TCK")


def _own_seconds() -> float:
    import resource

    s, c = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return s.ru_utime + s.ru_stime + c.ru_utime + c.ru_stime


def _proc_seconds() -> dict[int, tuple[str, float]]:
    out = {}
    tck = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
    for entry in Path("/proc").glob("[0-9]*") if Path("/proc").is_dir() else []:
        try:
            text = (entry / "stat").read_text()
        except OSError:
            continue
        # comm is in parentheses and may contain spaces: split after the last ')'.
        comm = text[text.find("(") + 1:text.rfind(")")]
        rest = text[text.rfind(")") + 2:].split()
        out[int(entry.name)] = (comm, (int(rest[11]) + int(rest[12])) / tck)
    return out


def _loadavg() -> list[float] | None:
    try:
        return [round(x, 2) for x in os.getloadavg()]
    except OSError:
        return None


# ---------------------------------------------------------------------------------------------
# The child side: one measurement in this fresh process


def _tree_cpu_seconds() -> float:
    """CPU seconds used so far by this process (all threads) and its live children (DataLoader
    workers): contention slows the wall clock, much less the CPU time a step needs. Spinning
    OpenMP threads count too, so compare it between settings with the same thread count."""
    total = time.process_time()
    tck = os.sysconf("SC_CLK_TCK")
    for children in Path(f"/proc/{os.getpid()}/task").glob("*/children"):
        try:
            pids = children.read_text().split()
        except OSError:
            continue
        for pid in pids:
            try:
                text = Path(f"/proc/{pid}/stat").read_text()
            except OSError:
                continue
            rest = text[text.rfind(")") + 2:].split()
            total += (int(rest[11]) + int(rest[12])) / tck
    return total


def _memory_now() -> tuple[float, float]:
    """(current RSS, peak RSS) of this process in MB: /proc's VmRSS and VmHWM, else getrusage."""
    try:
        status = Path("/proc/self/status").read_text().splitlines()
        vals = {ln.split(":")[0]: int(ln.split()[1]) / 1024 for ln in status if ln.startswith(("VmRSS", "VmHWM"))}
        return vals["VmRSS"], vals["VmHWM"]
    except (OSError, KeyError):
        import resource

        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        peak_mb = peak / MB if sys.platform == "darwin" else peak / 1024
        return peak_mb, peak_mb


def flops_per_image(model, input_shape: tuple[int, ...], device="cpu", batch: int = 2,
                    memory_format=None) -> float:
    """Forward + backward FLOPs of one image, counted by FlopCounterMode on a batch of `batch`."""
    import torch
    from torch.utils.flop_counter import FlopCounterMode

    x = torch.randn(batch, *input_shape, device=device)
    if memory_format is not None:
        x = x.contiguous(memory_format=memory_format)
    segments = getattr(model, "checkpoint_segments", 0)
    if segments:
        model.checkpoint_segments = 0  # count the model's work, not the recomputation
    try:
        with FlopCounterMode(display=False) as counter:
            model(x).float().sum().backward()
    finally:
        if segments:
            model.checkpoint_segments = segments
    model.zero_grad(set_to_none=True)
    return counter.get_total_flops() / batch


def _sync(device) -> None:
    import torch

    if torch.device(device).type == "cuda":
        torch.cuda.synchronize(device)


def _our_data(images, labels, num_classes: int, n_test: int):
    """The images as `data.load` delivers CIFAR: NCHW float32, normalised with the training
    images' per-channel statistics; a small test split for the trainer's final evaluation."""
    import torch

    from .. import data as data_mod

    x = torch.from_numpy(images).permute(0, 3, 1, 2).float().div_(255)  # (N, 3, 32, 32)
    var, mean = torch.var_mean(x, dim=(0, 2, 3), correction=0)
    x = ((x - mean.view(1, -1, 1, 1)) / var.sqrt().view(1, -1, 1, 1)).contiguous()
    y = torch.from_numpy(labels)
    train = data_mod.Split(x, y)
    test = data_mod.Split(x[:n_test].clone(), y[:n_test].clone())
    return data_mod.Data("cifar-like", train, test, None, num_classes, 3, x.shape[-1])


def _images_for(spec, n: int):
    from . import baseline

    return baseline.cifar_like(n, spec.model.num_classes or 10, seed=spec.run.seed)


def _train_ours(job: dict) -> dict:
    import torch

    from .. import spec as spec_mod
    from ..train import Callback, Trainer

    spec = spec_mod.resolve(spec_mod.validate(job["spec"], "bench spec"))
    warmup, steps, bs = job["warmup"], job["steps"], spec.optim.batch_size
    images, labels = _images_for(spec, spec.optim.iters * bs)
    data = _our_data(images, labels, spec.model.num_classes or 10, min(bs, 256))
    device = job["device"]

    class Clock(Callback):
        """Timestamps at the end of backward: step i's mark minus step i-1's is one whole step."""

        def __init__(self) -> None:
            self.marks: list[float] = []
            self.cpu: list[float] = []
            self.losses: list[float] = []

        def on_start(self, t) -> None:
            self.start_rss = _memory_now()[0]
            if torch.device(device).type == "cuda":
                torch.cuda.reset_peak_memory_stats(device)
            self.start_cuda = torch.cuda.memory_allocated(device) / MB if torch.device(device).type == "cuda" else 0
            self.t_start = time.perf_counter()

        def after_backward(self, t) -> None:
            i = t.p.iteration
            if job["mode"] == "memory":
                self.losses.append(float(t.last_loss))
            if i in (0, warmup, warmup + steps):
                _sync(device)
                self.marks.append(time.perf_counter())
                self.cpu.append(_tree_cpu_seconds())

    clock = Clock()
    trainer = Trainer(spec, callbacks=[clock], data=data)
    summary = trainer.run()
    if summary["status"] != "completed" or len(clock.marks) != (2 if warmup == 0 else 3):
        raise RuntimeError(f"the timed run ended as {summary['status']} after {trainer.p.iteration} steps")
    first, t0, t1 = clock.marks[0], clock.marks[-2], clock.marks[-1]
    rss, peak_rss = _memory_now()
    cuda = torch.device(device).type == "cuda"
    out = {"side": "ours", "device": str(trainer.rt.device), "runtime": {**trainer.rt.describe(),
           "compile": spec.train.compile, "checkpoint_segments": spec.train.checkpoint_segments},
           "compiled": spec.train.compile,
           "images_per_s": steps * bs / (t1 - t0), "step_time_s": (t1 - t0) / steps,
           "cpu_s_per_image": (clock.cpu[-1] - clock.cpu[-2]) / (steps * bs) if steps else None,
           "first_step_s": first - clock.t_start, "start_rss_mb": clock.start_rss, "peak_rss_mb": peak_rss,
           "peak_memory_mb": torch.cuda.max_memory_allocated(device) / MB if cuda else peak_rss,
           "start_memory_mb": clock.start_cuda if cuda else clock.start_rss, "losses": clock.losses}
    if job["mode"] == "memory":
        model = trainer.model
        torch.save({"params": {k: v.detach().cpu() for k, v in model.named_parameters()},
                    "buffers": {k: v.detach().cpu() for k, v in model.named_buffers()}}, job["state_out"])
    else:
        out["flops_per_image"] = flops_per_image(trainer.model, (3, 32, 32), trainer.rt.device,
                                                 memory_format=trainer.rt.memory_format)
    return out


def _baseline_model(spec, device):
    from . import baseline

    m = spec.model
    return baseline.resnet_cifar(m.depth, m.block, tuple(m.widths), m.num_classes or 10).to(device)


def _train_baseline(job: dict) -> dict:
    """The loop of a typical public CIFAR script, step for step."""
    import torch
    from torch import nn

    from . import baseline
    from .. import spec as spec_mod

    spec = spec_mod.resolve(spec_mod.validate(job["spec"], "bench spec"))
    warmup, steps, bs, device = job["warmup"], job["steps"], spec.optim.batch_size, torch.device(job["device"])
    images, labels = _images_for(spec, spec.optim.iters * bs)
    aug = spec.data.augment
    loader = baseline.loader(images, labels, bs, job["workers"], pin_memory=device.type == "cuda",
                             crop="crop" in aug, flip="flip" in aug, pad=spec.data.pad, seed=spec.run.seed)
    torch.manual_seed(spec.run.seed)
    model = _baseline_model(spec, device)
    o = spec.optim
    optimizer = torch.optim.SGD(model.parameters(), lr=o.lr, momentum=o.momentum, weight_decay=o.weight_decay)
    criterion = nn.CrossEntropyLoss()
    start_rss = _memory_now()[0]
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
    model.train()

    def textbook_steps():  # the loop most public CIFAR code has, one yield per step
        running_loss = 0.0
        for inputs, targets in loader:
            inputs, targets = inputs.to(device), targets.to(device)
            outputs = model(inputs)
            loss = criterion(outputs, targets)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            running_loss += loss.item()
            yield running_loss

    timed = _time_batches(textbook_steps(), warmup, steps, bs, device, start_rss, {})
    cuda = device.type == "cuda"
    return {**timed, "side": "baseline",
            "runtime": {"device": str(device), "layout": "NCHW", "precision": "fp32", "eager": True,
                        "dataloader_workers": job["workers"], "threads": torch.get_num_threads()},
            "peak_memory_mb": torch.cuda.max_memory_allocated(device) / MB if cuda else timed["peak_rss_mb"],
            "flops_per_image": flops_per_image(model, (3, 32, 32), device)}


def _data_ours(job: dict) -> dict:
    """The augmentation path alone: `data.Batches` (resident on the device, whole-batch crop and
    flip) as the trainer iterates it."""
    from .. import data as data_mod
    from .. import runtime as runtime_mod
    from .. import spec as spec_mod

    spec = spec_mod.resolve(spec_mod.validate(job["spec"], "bench spec"))
    rt = runtime_mod.select(spec.run, spec.train)
    warmup, steps, bs = job["warmup"], job["steps"], spec.optim.batch_size
    images, labels = _images_for(spec, (warmup + steps) * bs)
    data = _our_data(images, labels, spec.model.num_classes or 10, 1)
    start_rss = _memory_now()[0]
    batches = data_mod.batches_for(data, "train", bs, spec.data.augment, spec.data.pad, rt.device, spec.run.seed)
    return _time_batches(batches.epoch(0), warmup, steps, bs, rt.device, start_rss,
                         {"side": "ours", "runtime": {**rt.describe(), "augment": spec.data.augment}})


def _data_baseline(job: dict) -> dict:
    import torch

    from . import baseline
    from .. import spec as spec_mod

    spec = spec_mod.resolve(spec_mod.validate(job["spec"], "bench spec"))
    warmup, steps, bs, device = job["warmup"], job["steps"], spec.optim.batch_size, torch.device(job["device"])
    images, labels = _images_for(spec, (warmup + steps) * bs)
    start_rss = _memory_now()[0]
    aug = spec.data.augment
    loader = baseline.loader(images, labels, bs, job["workers"], pin_memory=device.type == "cuda",
                             crop="crop" in aug, flip="flip" in aug, pad=spec.data.pad, seed=spec.run.seed)
    moved = ((x.to(device), y.to(device)) for x, y in loader)
    return _time_batches(moved, warmup, steps, bs, device, start_rss,
                         {"side": "baseline", "runtime": {"device": str(device), "augment": "per-image PIL",
                                                          "dataloader_workers": job["workers"]}})


def _time_batches(it, warmup: int, steps: int, bs: int, device, start_rss: float, extra: dict) -> dict:
    marks, cpu = [], []
    t_start = time.perf_counter()
    for i, _batch in enumerate(it):
        if i in (0, warmup - 1, warmup + steps - 1):
            _sync(device)
            marks.append(time.perf_counter())
            cpu.append(_tree_cpu_seconds())
        if i == warmup + steps - 1:
            break
    t0, t1 = marks[-2], marks[-1]
    _rss, peak = _memory_now()
    return {**extra, "device": str(device), "images_per_s": steps * bs / (t1 - t0),
            "step_time_s": (t1 - t0) / steps, "first_step_s": marks[0] - t_start,
            "cpu_s_per_image": (cpu[-1] - cpu[-2]) / (steps * bs), "start_rss_mb": start_rss,
            "peak_rss_mb": peak, "peak_memory_mb": peak, "flops_per_image": None}


def measure(job: dict[str, Any]) -> dict[str, Any]:
    """Run one job in this process (the child's entry point)."""
    run = {("ours", "train"): _train_ours, ("baseline", "train"): _train_baseline,
           ("ours", "memory"): _train_ours, ("ours", "data"): _data_ours,
           ("baseline", "data"): _data_baseline}
    return run[(job["side"], job["mode"])](job)


def _child_main() -> None:
    job = json.loads(sys.stdin.read())
    real_stdout = sys.stdout
    # Only the figures go to stdout; anything a library prints goes to stderr.
    with contextlib.redirect_stdout(sys.stderr):
        result = measure(job)
    real_stdout.write(json.dumps(result) + "\n")
    real_stdout.flush()

