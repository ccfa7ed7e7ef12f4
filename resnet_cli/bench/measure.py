"""The child side: one measurement in this fresh process (`python -m resnet_cli.bench`).

Ours is timed by a callback on the real `train.Trainer`; the baseline is the loop of a typical public
CIFAR script over `baseline.loader`. A step is the time from the end of one step's backward to the end
of the next one's; warm-up steps come before the timed window.
"""

from __future__ import annotations

import contextlib
import json
import sys
import time
from pathlib import Path
from typing import Any

MB = 2**20


def _tree_cpu_seconds() -> float:
    """CPU seconds used so far by this process (all threads) and its live children (DataLoader
    workers): contention slows the wall clock, much less the CPU time a step needs. Spinning
    OpenMP threads count too, so compare it between settings with the same thread count."""
    from ..training.cpu_threads import own_cpu_seconds

    return own_cpu_seconds()


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


def job_data(job: dict, spec):
    """What a job trains on: CIFAR-shaped images made here (the baseline comparison: both sides the
    same images), or with `"data": "spec"` the spec's own dataset (`--stack`: digits nets too)."""
    if job.get("data") == "spec":
        from .. import data as data_mod

        return data_mod.load(spec.data)
    images, labels = _images_for(spec, spec.optim.iters * spec.optim.batch_size)
    return _our_data(images, labels, spec.model.num_classes or 10, min(spec.optim.batch_size, 256))


def _train_ours(job: dict) -> dict:
    import torch

    from .. import spec as spec_mod
    from ..training.callbacks import Callback
    from ..training.trainer import Trainer

    spec = spec_mod.load(job["spec"], name="bench spec")
    warmup, steps, bs = job["warmup"], job["steps"], spec.optim.batch_size
    data = job_data(job, spec)
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
        out["flops_per_image"] = flops_per_image(trainer.model, (data.in_channels, data.image_size, data.image_size),
                                                 trainer.rt.device, memory_format=trainer.rt.memory_format)
    return out


def _train_stacked(job: dict) -> dict:
    """`job["members"]` seeds of the spec as one stacked net: the steps of `resnet train --seeds
    --stack` (training/stacked_run.py), each member a Trainer of its seed. Timed over whole steps:
    the start of step `warmup` to the start of step `warmup + steps`."""
    import torch

    from .. import spec as spec_mod
    from ..training.stacked_run import StackedRun
    from ..training.trainer import Trainer

    spec = spec_mod.load(job["spec"], name="bench spec")
    _same_threads(spec)
    warmup, steps, bs, k, device = job["warmup"], job["steps"], spec.optim.batch_size, job["members"], job["device"]
    data = job_data(job, spec)
    members = [Trainer(spec.model_copy(update={"run": spec.run.model_copy(update={"seed": spec.run.seed + i})}),
                       data=data) for i in range(k)]
    run = StackedRun(members)
    if job.get("compile"):  # the stacked forward (vmap over functional_call) under torch.compile
        run.net.forward = torch.compile(run.net.forward)
    everyone = list(range(k))
    start_rss = _memory_now()[0]
    marks, cpu, step, epoch = [], [], 0, 0
    t_start = time.perf_counter()
    while step <= warmup + steps:
        for x, y in run.batches.epoch(epoch):
            if step == 1:
                first = time.perf_counter() - t_start  # with compile on, mostly compile time
            if step in (warmup, warmup + steps):
                _sync(device)
                marks.append(time.perf_counter())
                cpu.append(_tree_cpu_seconds())
            if step == warmup + steps:
                break
            run._step(x, y, everyone)
            for m in members:  # the schedule reads the members' position, as in StackedRun's loop
                m.p.iteration += 1
            step += 1
        epoch += 1
        if len(marks) == 2:
            break
    peak = _memory_now()[1]
    return {"side": "stacked", "members": k, "images_per_s": steps * bs * k / (marks[1] - marks[0]),
            "compiled": bool(job.get("compile")), "first_step_s": first, "step_time_s": (marks[1] - marks[0]) / steps, "cpu_s_per_image": (cpu[1] - cpu[0]) / (steps * bs * k),
            "start_rss_mb": start_rss, "peak_rss_mb": peak, "peak_memory_mb": peak,
            "threads": torch.get_num_threads()}


def _baseline_model(spec, device):
    from . import baseline

    m = spec.model
    return baseline.resnet_cifar(m.depth, m.block, tuple(m.widths), m.num_classes or 10).to(device)


def _same_threads(spec) -> None:
    """The baseline runs with the thread count ours is given (run.threads, `--threads`), so a ratio
    compares the code, not the thread counts; 0 leaves torch's default, as a public script has it."""
    import torch

    from ..training import cpu_threads

    n = cpu_threads.count(spec.run.threads)
    if n:
        torch.set_num_threads(n)


def _train_baseline(job: dict) -> dict:
    """The loop of a typical public CIFAR script, step for step."""
    import torch
    from torch import nn

    from . import baseline
    from .. import spec as spec_mod

    spec = spec_mod.load(job["spec"], name="bench spec")
    _same_threads(spec)
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
    from ..training import runtime as runtime_mod
    from .. import spec as spec_mod

    spec = spec_mod.load(job["spec"], name="bench spec")
    rt = runtime_mod.select(spec.run, spec.train)
    warmup, steps, bs = job["warmup"], job["steps"], spec.optim.batch_size
    images, labels = _images_for(spec, (warmup + steps) * bs)
    data = _our_data(images, labels, spec.model.num_classes or 10, 1)
    start_rss = _memory_now()[0]
    batches = data_mod.batches_for(data, "train", bs, spec.data.augment, spec.data.pad, rt.device, spec.run.seed,
                                   cutout=spec.data.cutout)
    return _time_batches(batches.epoch(0), warmup, steps, bs, rt.device, start_rss,
                         {"side": "ours", "runtime": {**rt.describe(), "augment": spec.data.augment}})


def _data_baseline(job: dict) -> dict:
    import torch

    from . import baseline
    from .. import spec as spec_mod

    spec = spec_mod.load(job["spec"], name="bench spec")
    _same_threads(spec)
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
           ("baseline", "data"): _data_baseline, ("stacked", "train"): _train_stacked}
    return run[(job["side"], job["mode"])](job)


def child_main() -> None:
    job = json.loads(sys.stdin.read())
    from ..training import cpu_threads

    # run.threads auto chooses here, before torch loads, as `resnet train` does (its wait policy too).
    cpu_threads.early(job.get("spec", {}).get("run", {}).get("threads", "auto"))
    real_stdout = sys.stdout
    # Only the figures go to stdout; anything a library prints goes to stderr.
    with contextlib.redirect_stdout(sys.stderr):
        result = measure(job)
    real_stdout.write(json.dumps(result) + "\n")
    real_stdout.flush()
