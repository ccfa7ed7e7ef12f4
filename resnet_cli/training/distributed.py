"""DistributedDataParallel under torchrun: who this process is, and the few collective decisions.

torchrun sets RANK, WORLD_SIZE and LOCAL_RANK; without them this is one process and every helper
here is a no-op. Decisions that end or change the loop (stop on a signal, divergence) are reduced
across ranks at the same iterations on every rank, so no rank waits forever for one that left.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import torch
import torch.distributed as dist


@dataclass(frozen=True)
class Dist:
    rank: int = 0
    world: int = 1
    local_rank: int = 0

    @property
    def active(self) -> bool:
        return self.world > 1

    @property
    def is_main(self) -> bool:
        """Only rank 0 writes files and prints."""
        return self.rank == 0

    @property
    def shard(self) -> tuple[int, int]:
        return self.rank, self.world


def from_env() -> Dist:
    return Dist(rank=int(os.environ.get("RANK", 0)), world=int(os.environ.get("WORLD_SIZE", 1)),
                local_rank=int(os.environ.get("LOCAL_RANK", 0)))


def init(d: Dist, device: torch.device) -> None:
    """NCCL on GPUs, gloo on CPUs (He 2016b trained ResNet-1001 on 2 GPUs)."""
    if d.active and not dist.is_initialized():
        backend = "nccl" if device.type == "cuda" else "gloo"
        # torchrun's agent keeps one key-value store across `--max-restarts` restarts; a restarted
        # group could read its dead predecessors' addresses from it and fail to connect. A prefix
        # per restart gives every incarnation keys of its own.
        store, rank, world = next(dist.rendezvous("env://"))
        store = dist.PrefixStore(f"resnet-cli/restart-{os.environ.get('TORCHELASTIC_RESTART_COUNT', '0')}", store)
        dist.init_process_group(backend=backend, store=store, rank=rank, world_size=world)


def shutdown(clean: bool = True) -> None:
    """Leave the process group. After a normal end all ranks meet first: a rank that tears its
    connections down while another is still evaluating makes gloo abort that other rank."""
    if dist.is_initialized():
        if clean:
            dist.barrier()
        dist.destroy_process_group()


def reduce_sum(values: list[float], d: Dist, device: torch.device) -> list[float]:
    if not d.active:
        return values
    t = torch.tensor(values, dtype=torch.float64, device=device)
    dist.all_reduce(t, op=dist.ReduceOp.SUM)
    return t.tolist()


def broadcast_buffers(model: torch.nn.Module, d: Dist) -> None:
    """Give every rank rank 0's buffers (BatchNorm running statistics). DDP sends them before each
    forward, and that forward then updates each rank's copy with its own batch: after the last step
    the ranks differ, and a sharded evaluation would not be the evaluation of the saved model."""
    if d.active:
        for buf in model.buffers():
            dist.broadcast(buf, src=0)


def gather_to_main(obj, d: Dist) -> list | None:
    """Every rank's `obj` (picklable) as a list on rank 0, None elsewhere; a collective: call it on every rank."""
    if not d.active:
        return [obj]
    out = [None] * d.world if d.is_main else None
    dist.gather_object(obj, out, dst=0)
    return out


def rank_seed(seed: int, rank: int) -> int:
    """The seed of a rank's own RNG stream (dropout masks): rank 0 keeps the run's seed, so one
    process and rank 0 of a job draw the same masks; other ranks get streams of their own."""
    return seed if rank == 0 else (seed * 1_000_003 + rank) % 2**63


def wrap(model: torch.nn.Module, d: Dist, device: torch.device) -> torch.nn.Module:
    if not d.active:
        return model
    from torch.nn.parallel import DistributedDataParallel

    return DistributedDataParallel(model, device_ids=[device.index] if device.type == "cuda" else None)


def broadcast_from_main(t: torch.Tensor, device: torch.device) -> torch.Tensor:
    """Rank 0's copy of `t` on every rank (through `device`: NCCL moves only CUDA tensors)."""
    on = t.to(device)
    dist.broadcast(on, src=0)
    return on.to(t.device)
