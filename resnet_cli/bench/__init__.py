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
baseline is `bench/baseline.py`: NCHW, fp32, eager, torchvision's DataLoader with per-image PIL
transforms in 2 worker processes. Both see the same CIFAR-shaped images (`baseline.cifar_like`).

What a step includes: the time from the end of one step's backward to the end of the next one's,
i.e. optimizer update, fetching and augmenting the batch, forward and backward. Warm-up steps (the
DataLoader starting its workers, cuDNN autotuning, `torch.compile`) come before the timed window;
the first step's duration is reported apart (with compile on, that is mostly compile time).

FLOPs are counted by `torch.utils.flop_counter.FlopCounterMode` over one forward and backward
(convolutions and the linear layer; BN, ReLU and additions are not counted), without activation
recomputation, so achieved FLOP/s compares the same work whatever the settings.

Where things live:
    throughput.py  bench(): images/s of ours under each --vary variant against the baseline
    memory.py      compare_checkpointing(): peak memory with and without activation checkpointing
    stack.py       bench_stack(): k seeds stacked as one net against separate runs (--stack)
    jobs.py        a measurement job and run_job(), which runs it in a fresh interpreter
    measure.py     the child side (`python -m resnet_cli.bench`): one timed run, ours or baseline
    baseline.py    the textbook baseline: NCHW, fp32, eager, per-image PIL transforms
    contention.py  what else used the CPU while we measured
    busy.py        bench_busy(): each --vary variant quiet, then with every core kept busy (--busy)
"""

from .jobs import MeasureFailed, check_spec, device_of, run_job, variants_from
from .measure import flops_per_image
from .memory import RELEASED_ENV, compare_checkpointing, default_segments
from .stack import bench_stack
from .throughput import bench

__all__ = [
    "RELEASED_ENV", "MeasureFailed", "bench", "bench_stack", "check_spec", "compare_checkpointing", "default_segments",
    "device_of", "flops_per_image", "run_job", "variants_from",
]
