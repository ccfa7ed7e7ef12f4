"""Where and how a run executes: device, precision, memory layout, determinism, threads. One place decides.

`plan` decides and checks (no side effects, so the command can refuse a launch before it creates
a run directory); `select` plans and then configures torch for the plan.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
from dataclasses import dataclass

import torch

from ..errors import UserError
from ..spec import RunSpec, Spec, TrainSpec
from . import cpu_threads

# cuBLAS picks reduction orders per call unless its workspace is fixed (PyTorch "Reproducibility" notes).
CUBLAS_WORKSPACE = ":4096:8"
_AUTOCAST = {"bf16": torch.bfloat16, "fp16": torch.float16}


@dataclass(frozen=True)
class Runtime:
    device: torch.device
    precision: str  # fp32, bf16 or fp16, never auto: see `resolve_precision`
    channels_last: bool
    deterministic: bool = False
    threads_auto: cpu_threads.Choice | None = None  # run.threads auto: what was chosen and why

    @property
    def bf16(self) -> bool:
        return self.precision == "bf16"

    @property
    def grad_scaler(self) -> bool:
        """fp16 gradients underflow without loss scaling (Micikevicius et al. 2018); bf16 has fp32's range."""
        return self.precision == "fp16"

    def autocast(self):
        if self.precision in _AUTOCAST:
            return torch.autocast(device_type=self.device.type, dtype=_AUTOCAST[self.precision])
        return contextlib.nullcontext()

    def scaler(self) -> torch.amp.GradScaler:
        """A GradScaler for fp16; a disabled one (scale/unscale/step pass through) otherwise."""
        return torch.amp.GradScaler(self.device.type, enabled=self.grad_scaler)

    @property
    def memory_format(self) -> torch.memory_format:
        return torch.channels_last if self.channels_last else torch.contiguous_format

    def describe(self) -> dict:
        name = torch.cuda.get_device_name(self.device) if self.device.type == "cuda" else "cpu"
        return {"device": str(self.device), "device_name": name, "precision": self.precision,
                "bf16": self.bf16,                "channels_last": self.channels_last, "deterministic": self.deterministic,
                "threads": torch.get_num_threads(),
                **({"threads_auto": self.threads_auto.record()} if self.threads_auto else {})}


def choose_device(requested: str, cuda_count: int, local_rank: int = 0, torchrun: bool = False) -> torch.device:
    """The device for `run.device` on a machine that sees `cuda_count` GPUs.

    Under torchrun each process takes its local rank's GPU: `cuda:N` would put every rank on GPU N,
    so it is refused (CUDA_VISIBLE_DEVICES chooses which GPUs a job gets)."""
    if requested == "cpu" or (requested == "auto" and cuda_count == 0):
        return torch.device("cpu")
    if cuda_count == 0:
        raise UserError(f"run.device is {requested} but no CUDA device is available; use --device cpu or auto")
    if torchrun:
        if requested.startswith("cuda:"):
            raise UserError(f"run.device {requested} under torchrun would put every rank on one GPU; give --device cuda "
                            "(each rank uses its local rank's GPU) and choose GPUs with CUDA_VISIBLE_DEVICES")
        if local_rank >= cuda_count:
            raise UserError(f"local rank {local_rank} has no GPU: {cuda_count} CUDA device(s) visible; "
                            f"start at most {cuda_count} process(es) per machine (--nproc {cuda_count})")
        return torch.device("cuda", local_rank)
    index = int(requested[5:]) if requested.startswith("cuda:") else 0
    if index >= cuda_count:
        raise UserError(f"run.device {requested}: only {cuda_count} CUDA device(s) visible (cuda:0..cuda:{cuda_count - 1})")
    return torch.device("cuda", index)


def bf16_native(capability: tuple[int, int]) -> bool:
    """bf16 tensor cores start with Ampere (sm_80); V100 (7.0) and T4 (7.5) only emulate bf16, slowly."""
    return capability[0] >= 8


def resolve_precision(requested: str, device_type: str, gpu_capability: tuple[int, int] | None = None,
                      cpu_bf16: bool = False) -> str:
    """`auto`: fp32 on the CPU (the papers' numerics), bf16 autocast on GPUs with native bf16, fp16
    autocast with a GradScaler on older GPUs. An explicit choice is checked against the device."""
    if requested == "auto":
        if device_type != "cuda":
            return "fp32"
        return "bf16" if bf16_native(gpu_capability or (0, 0)) else "fp16"
    if requested == "fp16" and device_type != "cuda":
        raise UserError("run.precision fp16 (with a GradScaler) is for CUDA GPUs without native bf16; "
                        "use fp32 (or auto) on the CPU")
    # bf16 on the CPU is opt-in: ~2x the fp32 throughput where the CPU has native bf16 (measured
    # here, README "Performance"), but `auto` keeps the papers' fp32 numerics.
    if requested == "bf16" and device_type == "cpu" and not cpu_bf16:
        raise UserError("run.precision bf16 needs a CUDA device or a CPU with native bf16 (AVX512-BF16/AMX); "
                        "use fp32 (or auto) here")
    return requested


def plan(run: RunSpec, train: TrainSpec, local_rank: int = 0, torchrun: bool = False,
         probe_gpu: bool = True) -> Runtime:
    """Decide and check everything about where the run executes; changes nothing. `probe_gpu`
    False: do not ask the GPU its capability, which would create a CUDA context in this process
    (a launcher's parent must not hold one); `auto` precision is then not final."""
    cuda_count = torch.cuda.device_count() if torch.cuda.is_available() else 0
    device = choose_device(run.device, cuda_count, local_rank, torchrun)
    if train.sync_bn and device.type != "cuda":
        raise UserError("train.sync_bn needs CUDA (torch's SyncBatchNorm is GPU-only); on CPU each rank normalises its own batch")
    capability = torch.cuda.get_device_capability(device) if device.type == "cuda" and probe_gpu else None
    cpu_bf16 = device.type == "cpu" and run.precision == "bf16" and torch.ops.mkldnn._is_mkldnn_bf16_supported()
    precision = resolve_precision(run.precision, device.type, capability, cpu_bf16)
    # channels_last measured faster on both CUDA (tensor cores) and this project's 2-core CPU
    # (ResNet-20/56 training 1.24-1.34x over NCHW, README "Performance"), so `auto` turns it on everywhere.
    return Runtime(device=device, precision=precision, channels_last=train.channels_last != "off",
                   deterministic=run.deterministic)


def pinned(spec: Spec, rt: Runtime) -> Spec:
    """The spec with `run.precision` as resolved: a run resumed on another kind of device keeps its
    precision (or refuses) instead of silently re-resolving `auto`."""
    if spec.run.precision == rt.precision:
        return spec
    return spec.model_copy(update={"run": spec.run.model_copy(update={"precision": rt.precision})})


def select(run: RunSpec, train: TrainSpec, local_rank: int = 0, torchrun: bool = False) -> Runtime:
    rt = plan(run, train, local_rank, torchrun)
    choice = cpu_threads.for_run(run.threads)
    threads = choice.threads if choice else run.threads
    if threads:
        torch.set_num_threads(threads)
    if choice:
        rt = dataclasses.replace(rt, threads_auto=choice)
    if rt.device.type == "cpu":
        _tune_malloc(release_freed=train.checkpoint_segments > 0)
    set_determinism(rt.deterministic, cuda=rt.device.type == "cuda")
    if rt.device.type == "cuda":
        torch.cuda.set_device(rt.device)
        # fp32 means fp32: TF32 convolutions and matmuls differ from the CPU by ~1e-3 (relative),
        # which the analyses (landscape, gradnorm, lesion) would report as signal.
        set_tf32(rt.precision != "fp32")
    return rt


def analysis_runtime(device: torch.device) -> Runtime:
    """Measurements of a net (landscape, gradient norms, lesion) run in fp32 and NCHW whatever
    `auto` would pick for training, TF32 off: on CUDA they then agree with the CPU to ~1e-6, not ~1e-3."""
    if device.type == "cuda":
        set_tf32(False)
    return Runtime(device=device, precision="fp32", channels_last=False)


def set_determinism(on: bool, cuda: bool) -> None:
    """`run.deterministic`: the same CUDA run twice gives the same bits (cuDNN autotuning and atomics
    pick per-process algorithms otherwise). Off: cuDNN autotunes for the fixed shapes."""
    if on:
        os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", CUBLAS_WORKSPACE)  # read when cuBLAS starts
    torch.use_deterministic_algorithms(on)
    torch.backends.cudnn.deterministic = on
    torch.backends.cudnn.benchmark = cuda and not on


def set_tf32(allowed: bool) -> None:
    """TF32 for cuDNN convolutions and CUDA matmuls, through whichever API this torch has (newer
    releases refuse a mix of the legacy `allow_tf32` flags and `fp32_precision`)."""
    conv = getattr(torch.backends.cudnn, "conv", None)
    if conv is not None and hasattr(conv, "fp32_precision"):
        value = "tf32" if allowed else "ieee"
        conv.fp32_precision = value
        torch.backends.cuda.matmul.fp32_precision = value
    else:  # torch < 2.9
        torch.backends.cudnn.allow_tf32 = allowed
        torch.backends.cuda.matmul.allow_tf32 = allowed


def tf32_allowed() -> tuple[bool, bool]:
    """(cuDNN convolutions, CUDA matmuls) may use TF32."""
    conv = getattr(torch.backends.cudnn, "conv", None)
    if conv is not None and hasattr(conv, "fp32_precision"):
        return conv.fp32_precision == "tf32", torch.backends.cuda.matmul.fp32_precision == "tf32"
    return torch.backends.cudnn.allow_tf32, torch.backends.cuda.matmul.allow_tf32


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
