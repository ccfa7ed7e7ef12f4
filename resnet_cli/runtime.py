"""Where and how a run executes: device, precision, memory layout, threads. One place decides."""

from __future__ import annotations

import contextlib
from dataclasses import dataclass

import torch

from .errors import UserError
from .spec import RunSpec, TrainSpec


@dataclass(frozen=True)
class Runtime:
    device: torch.device
    bf16: bool  # autocast to bfloat16 (auto on CUDA; opt-in on CPUs with native bf16)
    channels_last: bool

    def autocast(self):
        if self.bf16:
            return torch.autocast(device_type=self.device.type, dtype=torch.bfloat16)
        return contextlib.nullcontext()

    @property
    def memory_format(self) -> torch.memory_format:
        return torch.channels_last if self.channels_last else torch.contiguous_format

    def describe(self) -> dict:
        name = torch.cuda.get_device_name(self.device) if self.device.type == "cuda" else "cpu"
        return {"device": str(self.device), "device_name": name, "bf16": self.bf16,
                "channels_last": self.channels_last, "threads": torch.get_num_threads()}


def select(run: RunSpec, train: TrainSpec, local_rank: int = 0) -> Runtime:
    if run.device in ("auto", "cuda") and torch.cuda.is_available():
        device = torch.device("cuda", local_rank)  # under torchrun: one GPU per local rank
    elif run.device == "auto":
        device = torch.device("cpu")
    else:
        device = torch.device(run.device)
        if device.type == "cuda" and not torch.cuda.is_available():
            raise UserError(f"run.device is {run.device} but no CUDA device is available; use --device cpu or auto")
        if device.type == "cuda" and device.index is not None and device.index >= torch.cuda.device_count():
            raise UserError(f"run.device {run.device}: only {torch.cuda.device_count()} CUDA device(s) present")
    if train.sync_bn and device.type != "cuda":
        raise UserError("train.sync_bn needs CUDA (torch's SyncBatchNorm is GPU-only); on CPU each rank normalises its own batch")
    # bf16 on the CPU is opt-in (`--set run.precision=bf16`): ~2x the fp32 throughput where the CPU
    # has native bf16 (measured here, README "Performance"), but `auto` keeps the papers' fp32 numerics.
    if run.precision == "bf16" and device.type == "cpu" and not torch.ops.mkldnn._is_mkldnn_bf16_supported():
        raise UserError("run.precision bf16 needs a CUDA device or a CPU with native bf16 (AVX512-BF16/AMX); "
                        "use fp32 (or auto) here")
    bf16 = run.precision == "bf16" or (run.precision == "auto" and device.type == "cuda")
    # channels_last measured faster on both CUDA (tensor cores) and this project's 2-core CPU
    # (ResNet-20/56 training 1.24-1.34x over NCHW, README "Performance"), so `auto` turns it on everywhere.
    channels_last = train.channels_last != "off"
    if run.threads:
        torch.set_num_threads(run.threads)
    if device.type == "cpu":
        _tune_malloc(release_freed=train.checkpoint_segments > 0)
    if device.type == "cuda":
        torch.cuda.set_device(device)
        torch.backends.cudnn.benchmark = True  # fixed shapes: let cuDNN pick the fastest kernels
    return Runtime(device=device, bf16=bf16, channels_last=channels_last)


def _tune_malloc(release_freed: bool) -> None:
    """Choose what glibc does with freed large blocks (CPU tensors are large malloc blocks).

    Training: keep them for reuse. By default glibc hands each freed block back to the OS and the
    next step page-faults it in again (~8,500 faults and ~7% of a ResNet-20 step here, and most of
    the cost of the batch-augmentation path: README "Performance").
    Activation checkpointing: its point is a low peak, so hand back every block above 64 KiB. At
    glibc's defaults the freed activations stay in a fragmented heap and ResNet-1001's peak RSS
    varied from 39% to 69% of the plain run's; released, it is 28% every time, at ~3.6x the CPU
    step time (on CUDA, where checkpointing is meant to be used, this does not apply)."""
    import ctypes
    import sys

    if not sys.platform.startswith("linux"):
        return
    try:
        mallopt = ctypes.CDLL("libc.so.6").mallopt
    except (OSError, AttributeError):  # another libc (musl): leave it alone
        return
    m_trim_threshold, m_mmap_threshold = -1, -3
    if release_freed:
        mallopt(m_mmap_threshold, 64 * 1024)
    else:
        mallopt(m_mmap_threshold, 32 * 1024 * 1024)  # the largest glibc accepts on 64-bit
        mallopt(m_trim_threshold, 1 << 30)
