"""The training loop. It only trains: progress, metrics output, gradient norms and the like hang
off it as callbacks; checkpoints and the run directory are the loop's own duty because exact
resume depends on what is saved at which point of a step.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable

import torch
import torch.nn.functional as F

from . import checkpoint as ckpt
from .evaluation import evaluate
from .. import data as data_mod
from . import cpu_threads, distributed, gates, onednn_guard, optimizers, precise_bn
from . import runtime as runtime_mod
from . import schedule, testhook
from .callbacks import Callback, log_record
from .curve import CurveProbe
from .mixup import Mixed
from ..errors import PipeClosed, UserError
from ..model import build_model, count_params
from ..runs.files import CHECKPOINT
from ..runs.writer import RunDir
from .signals import StopFlag
from ..spec import RESUME_FREE, Spec, diff, load, to_tree
from ..spec.legacy import as_written

PIPE_CLOSED = "stopped: output pipe closed"  # summary status of a run whose stdout reader left (`| head -1`)
SYNC_EVERY = 20  # read the loss back from the device every N steps (progress and divergence checks)


@dataclass
class Progress:
    """Position in the run; saved in every checkpoint."""

    iteration: int = 0
    epoch: int = 0
    step: int = 0  # batches done in the current epoch
    loss_sum: float = 0.0  # over the current epoch (for the epoch's mean training loss/error)
    correct: float = 0.0
    seen: int = 0
    # The epoch's float32 [loss sum, correct] accumulated since the last fold, kept as they are when a
    # signal stops the run mid-stretch and continued on resume: folding them early would add the
    # same losses in another grouping and change the epoch's train_loss in its last digits.
    unfolded: list[float] = field(default_factory=list)
    unfolded_seen: int = 0
    elapsed: float = 0.0  # training seconds, summed over resumed segments
    train_images: int = 0
    first_loss: float | None = None
    history: list[dict[str, Any]] = field(default_factory=list)


class Trainer:
    def __init__(self, spec: Spec, run_dir: RunDir | None = None, callbacks: Iterable[Callback] = (),
                 stop: StopFlag | None = None, data: data_mod.Data | None = None,
                 rt: runtime_mod.Runtime | None = None):
        self.run_dir = run_dir
        # Exactly the callbacks it is handed: a session adds the ones its spec asks for (session.spec_callbacks).
        self.callbacks = list(callbacks)
        self.stop = stop or StopFlag()
        self.dist = distributed.from_env()
        # Where the run executes: decided by the session that opened the run (session.open_run), or
        # here for a trainer built on its own (tests, benchmarks).
        self.rt = rt or runtime_mod.select(spec.run, spec.train, self.dist.local_rank, torchrun=self.dist.active)
        # `auto` precision resolved once and kept in the spec the checkpoints carry.
        self.spec = spec = runtime_mod.pinned(spec, self.rt)
        distributed.init(self.dist, self.rt.device)
        self.data = data if data is not None else data_mod.load(spec.data)
        torch.manual_seed(spec.run.seed)
        num_classes = spec.model.num_classes or self.data.num_classes
        self.model = build_model(spec.model, self.data.in_channels, num_classes)  # the same weights on every rank
        if self.dist.rank:  # each rank's own dropout masks
            torch.manual_seed(distributed.rank_seed(spec.run.seed, self.dist.rank))
        self.model.checkpoint_segments = spec.train.checkpoint_segments
        self.params = count_params(self.model)
        if spec.train.sync_bn and self.dist.active:
            self.model = torch.nn.SyncBatchNorm.convert_sync_batchnorm(self.model)
        self.model.to(self.rt.device, memory_format=self.rt.memory_format)
        # Strided 1x1 convolutions over few channels corrupt oneDNN's heap in channels_last (onednn_guard.py).
        self.nchw_layers = onednn_guard.route_around(self.model, self.rt.device, self.rt.channels_last)
        o = spec.optim
        self.optimizer = optimizers.build(self.model, o)  # with optim.lr_groups' own lr scales
        self.scaler = self.rt.scaler()
        # Gradients live from the first step to the last: allocate them now, before any activation,
        # and zero them in place. Allocated during the first backward they land between recomputed
        # activations and pin a fragmented heap (ResNet-1001 with checkpointing on the CPU: peak RSS
        # 58% of the plain run instead of 38%, README Performance).
        for p in self.model.parameters():
            p.grad = torch.zeros_like(p)
        if o.batch_size % self.dist.world:
            raise UserError(f"optim.batch_size {o.batch_size} must divide evenly over {self.dist.world} processes")
        self.batches = data_mod.batches_for(self.data, "train", o.batch_size, spec.data.augment, spec.data.pad,
                                            self.rt.device, spec.run.seed, shard=self.dist.shard,
                                            cutout=spec.data.cutout)
        # optim.label_smoothing: passed only when set, so the papers' loss stays the plain call.
        self.loss_kwargs = {"label_smoothing": o.label_smoothing} if o.label_smoothing else {}
        self.iters_per_epoch = self.batches.iters_per_epoch
        # Gated shortcuts (He 2016b Table 1): the mean gate per unit at each evaluation (gates.py).
        self.gate_batch = gates.fixed_batch(self.data, self.rt.device) if gates.gates_of(self.model) else None
        if spec.train.precise_bn:  # the same images, augmented alike, from a stream of their own
            self.precise_batches = precise_bn.train_batches(self.data, spec, self.rt.device, self.batches,
                                                            shard=self.dist.shard)
        self.total = schedule.total_iters(o, self.iters_per_epoch)
        for cb in self.callbacks:
            if isinstance(cb, CurveProbe) and cb.window is None:  # its window: a share of the run's length
                cb.window = CurveProbe.window_for(self.total)
        self.p = Progress()
        self.say: Callable[[str], None] = lambda line: None  # a session's, for what a person should know
        self.threads_watch = cpu_threads.EpochWatch(self.rt.threads_auto) if self.rt.threads_auto else None
        self.order, self.order_epoch = None, -1  # data.shuffle: global (see _global_order)
        self.status = "running"
        # What the step calls: the module itself, or its DDP wrapper, optionally compiled.
        # Checkpoints, evaluation and callbacks always use the plain module.
        wrapped = distributed.wrap(self.model, self.dist, self.rt.device)
        self.forward_model = torch.compile(wrapped) if spec.train.compile else wrapped

    # -- checkpoints -----------------------------------------------------------------------------

    def state(self, rng: list[dict[str, Any]] | None = None) -> dict[str, Any]:
        """What a checkpoint holds; `rng`: every rank's RNG streams (default: this process's)."""
        p = self.p
        return {
            "model": self.model.state_dict(), "optimizer": self.optimizer.state_dict(),
            "scaler": self.scaler.state_dict(),
            "progress": {k: getattr(p, k) for k in Progress.__dataclass_fields__},
            "rng": rng if rng is not None else [ckpt.rng_state(self.rt.device)], "spec": to_tree(self.spec),
            "order": {"epoch": self.order_epoch, "perm": self.order},
            "callbacks": {cb.checkpoint_key: cb.state() for cb in self.callbacks
                          if getattr(cb, "checkpoint_key", None)},
        }

    def save(self) -> None:
        if self.run_dir is None:
            return
        rng = distributed.gather_to_main(ckpt.rng_state(self.rt.device), self.dist)  # every rank takes part
        if self.dist.is_main:
            ckpt.save(self.state(rng), self.run_dir.file(CHECKPOINT))

    def restore(self, state: dict[str, Any], allow_spec_change: bool = False) -> list[str]:
        """Continue from a checkpoint; returns the spec keys that differ from the saved run's
        (empty unless `allow_spec_change`)."""
        saved = load(as_written(state["spec"]), name="checkpoint spec")
        if saved.run.precision == "auto":  # checkpoints from before precision was recorded
            saved = runtime_mod.pinned(saved, self.rt)
        changed = [k for k in diff(saved, self.spec) if k not in RESUME_FREE]
        if changed and not allow_spec_change:
            raise UserError(f"the spec differs from the run's in {', '.join(changed)}; "
                            "pass --force-resume to go on anyway, or start a new run")
        where = str(self.run_dir.file(CHECKPOINT)) if self.run_dir is not None else "checkpoint"
        ckpt.load_weights(self.model, state["model"], where,
                          "the run trained another net: resume without the model.* changes, or start a new --out")
        try:
            self.optimizer.load_state_dict(state["optimizer"])
        except (RuntimeError, ValueError, KeyError) as exc:
            raise UserError(f"{where}: optimizer state does not fit this net: {str(exc).splitlines()[-1][:160]}; "
                            "start a new --out") from None
        if state.get("scaler"):
            self.scaler.load_state_dict(state["scaler"])
        self.p = Progress(**state["progress"])
        mine = ckpt.rank_rng_state(state["rng"], self.dist.rank)
        if mine is not None:  # a rank the saving run did not have keeps its freshly seeded stream
            ckpt.set_rng_state(mine, self.rt.device)
        order = state.get("order") or {}
        self.order, self.order_epoch = order.get("perm"), order.get("epoch", -1)
        saved_callbacks = state.get("callbacks") or {}
        for cb in self.callbacks:
            key = getattr(cb, "checkpoint_key", None)
            if key in saved_callbacks:
                cb.load_state(saved_callbacks[key])
        return changed

    # -- the loop --------------------------------------------------------------------------------

    def set_lr(self) -> float:
        lr = schedule.lr_at(self.p.iteration, self.spec.optim, self.iters_per_epoch)
        optimizers.set_lrs(self.optimizer, lr)
        return lr

    def run(self) -> dict[str, Any]:
        for cb in self.callbacks:
            cb.on_start(self)
        self.model.train()
        self.lr = schedule.lr_at(self.p.iteration, self.spec.optim, self.iters_per_epoch)
        if self.stop.signum is not None and not self.dist.active:
            self.status = "interrupted"  # signalled while the run was being set up: train nothing
        try:
            while self.p.iteration < self.total and self.status == "running":
                self._epoch()
        except PipeClosed:
            # `resnet train | head -1`: the reader left after an epoch record, which is emitted
            # after that epoch's checkpoint. Say so in summary.json, or the run looks like one
            # still training; it resumes from that checkpoint like an interrupted one.
            self.status = PIPE_CLOSED
            self._finish()
            raise
        finally:
            self.stop.restore()
        if self.status == "running":
            self.status = "completed"
        return self._finish()

    def _epoch(self) -> None:
        p, rt = self.p, self.rt
        # [loss sum, correct] since the last fold (float32, as the losses are), where a resume left it.
        acc = torch.tensor(p.unfolded or [0.0, 0.0], dtype=torch.float32, device=rt.device)
        seen, p.unfolded, p.unfolded_seen = p.unfolded_seen, [], 0
        tick = time.perf_counter()
        every = self.spec.train.checkpoint_every
        for x, y in self.batches.epoch(p.epoch, start=p.step, order=self._global_order()):
            loss, hits = self._step(x, y)
            acc[0] += loss.detach() * len(y)
            acc[1] += hits
            seen += len(y)
            p.iteration += 1
            p.step += 1
            if p.iteration == testhook.PAUSE_AT:  # None outside tests; testhook.py says why it stays
                testhook.pause(self.stop)
            p.train_images += len(y) * self.dist.world  # images/s of the whole job
            last = p.iteration >= self.total or p.step == self.iters_per_epoch
            checkpoint_now = bool(every) and p.iteration % every == 0 and not last
            # One process reacts to a signal at the next step; under torchrun all ranks decide
            # together at the shared sync points.
            signalled = not self.dist.active and self.stop.signum is not None
            if p.iteration % SYNC_EVERY == 0 or p.iteration == 1 or last or checkpoint_now or signalled:
                loss_value, stop = self._sync(loss)
                p.elapsed += time.perf_counter() - tick
                tick = time.perf_counter()
                if not self._healthy(loss_value):  # never write a checkpoint of a diverged run
                    return
                if checkpoint_now or (stop and self.dist.active):  # fixed points: the same in every run
                    self._fold(acc, seen)
                    acc.zero_()
                    seen = 0
                if stop:
                    # One process keeps its partial sums for the resume (Progress.unfolded); under
                    # torchrun each rank's would be lost with rank 0's checkpoint, so they are folded.
                    p.unfolded, p.unfolded_seen = acc.tolist(), seen
                    self.status = "interrupted"
                    self.save()
                    return
                if checkpoint_now:
                    self.save()
            if last:
                break
        if rt.device.type == "cuda":
            torch.cuda.synchronize(rt.device)
        p.elapsed += time.perf_counter() - tick
        self._fold(acc, seen)
        self._end_epoch()
        if self.threads_watch is not None and p.iteration < self.total:
            self.threads_watch.apply(self.say, p.epoch)

    def _global_order(self) -> torch.Tensor | None:
        """`data.shuffle: global`: this epoch's torch.randperm from the global generator, drawn once at
        the epoch's start (after the init on the same stream, as the "Residual Connection" article's
        digits code) and kept in checkpoints, so a run resumed mid-epoch continues the same order."""
        if self.spec.data.shuffle != "global":
            return None
        if self.order_epoch != self.p.epoch:
            order = torch.randperm(len(self.batches))
            if self.dist.active:  # every rank slices rank 0's order, whatever its own stream drew
                order = distributed.broadcast_from_main(order, self.rt.device)
            self.order, self.order_epoch = order, self.p.epoch
        return self.order

    def _step(self, x: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """One SGD step; the loss and the batch's correct predictions (under mixup, counted as its
        loss is: the mixture of the two targets')."""
        self.lr = self.set_lr()
        mixed = Mixed(x, y, self.spec.optim.mixup) if self.spec.optim.mixup else None
        x = (mixed.x if mixed else x).contiguous(memory_format=self.rt.memory_format)
        with self.rt.autocast():
            out = self.forward_model(x)  # (N, classes)
            loss = (mixed.loss(out.float(), **self.loss_kwargs) if mixed else
                    F.cross_entropy(out.float(), y, **self.loss_kwargs))
        self.optimizer.zero_grad(set_to_none=False)
        self.scaler.scale(loss).backward()  # fp16: the loss scaled up so small gradients survive
        self.scaler.unscale_(self.optimizer)  # callbacks (gradient norms) see the true gradients
        self.last_loss, self.last_output, self.last_target = loss, out.detach(), y  # for callbacks
        for cb in self.callbacks:
            cb.after_backward(self)
        self.scaler.step(self.optimizer)  # fp16: skipped when a gradient overflowed
        self.scaler.update()
        return loss, (mixed.hits(out.detach()) if mixed else (out.detach().argmax(1) == y).sum())

    def _sync(self, loss: torch.Tensor) -> tuple[float, bool]:
        """The loss (mean over ranks) and whether any rank was asked to stop."""
        total_loss, stops = distributed.reduce_sum([loss.item(), float(self.stop.signum is not None)],
                                                   self.dist, self.rt.device)
        return total_loss / self.dist.world, stops > 0

    def _fold(self, acc: torch.Tensor, seen: int) -> None:
        loss_sum, correct, seen = distributed.reduce_sum([*acc.tolist(), float(seen)], self.dist, self.rt.device)
        self.p.loss_sum += loss_sum
        self.p.correct += correct
        self.p.seen += int(seen)

    def _healthy(self, loss: float) -> bool:
        """He 2016b counts a run as failed when it does not train; a NaN/Inf or exploding loss stops
        the run as `diverged`, keeping the last good checkpoint (written before this step)."""
        p = self.p
        if p.first_loss is None:  # the loss at step 1: the "start" a diverging loss is measured against
            p.first_loss = loss
        for cb in self.callbacks:
            cb.on_sync(self, loss)
        if not math.isfinite(loss) or loss > self.spec.train.diverge_factor * max(p.first_loss, 1e-3):
            self.status = "diverged"
            self.diverged_at = {"iter": p.iteration, "loss": loss if math.isfinite(loss) else str(loss)}
            return False
        return True

    def _end_epoch(self) -> None:
        p = self.p
        record: dict[str, Any] = {
            "event": "epoch", "epoch": p.epoch + 1, "iter": p.iteration, "lr": self.lr,
            **({"lr_groups": optimizers.lrs(self.optimizer)} if len(self.optimizer.param_groups) > 1 else {}),
            "train_loss": p.loss_sum / max(p.seen, 1), "train_error": 100.0 * (1 - p.correct / max(p.seen, 1)),
        }
        if self.spec.train.eval_every == "epoch" or p.iteration >= self.total:  # all ranks, sharded
            distributed.broadcast_buffers(self.model, self.dist)
            if data_mod.num_examples(self.data, "val"):
                record["val_loss"], record["val_error"] = evaluate(self.model, self.data, "val", self.rt, d=self.dist)
            record["test_loss"], record["test_error"] = evaluate(self.model, self.data, "test", self.rt, d=self.dist)
            if self.spec.train.precise_bn:
                record.update(self._precise_bn_eval())
            if self.gate_batch is not None:
                record["gate_mean"] = gates.gate_means(self.model, self.gate_batch.contiguous(
                    memory_format=self.rt.memory_format))
        record["elapsed_s"] = round(p.elapsed, 3)
        record["images_per_s"] = p.train_images / max(p.elapsed, 1e-9)
        record["threads"] = torch.get_num_threads()  # the count this epoch ran at (run.threads auto may change it)
        p.history.append(record)
        p.epoch += 1
        p.step = 0
        p.loss_sum = p.correct = 0.0
        p.seen = 0
        log_record(self, record)
        self.save()
        for cb in self.callbacks:
            cb.on_epoch(self, record)

    def _precise_bn_eval(self) -> dict[str, float]:
        """train.precise_bn: the same evaluations with BN statistics re-estimated for the current
        weights (precise_bn.py); the running statistics are put back bitwise afterwards."""
        out = {}
        prepare = lambda x: x.contiguous(memory_format=self.rt.memory_format)  # noqa: E731
        with self.rt.autocast(), precise_bn.recalibrated(self.model, self.precise_batches, self.spec.train.precise_bn,
                                                         prepare, seed=self.spec.run.seed):
            distributed.broadcast_buffers(self.model, self.dist)  # rank 0's estimate everywhere
            for split in ("val", "test"):
                if data_mod.num_examples(self.data, split):
                    out[f"{split}_loss_precise_bn"], out[f"{split}_error_precise_bn"] = evaluate(
                        self.model, self.data, split, self.rt, d=self.dist)
        return out

    def _finish(self) -> dict[str, Any]:
        p = self.p
        last = p.history[-1] if p.history else {}
        summary: dict[str, Any] = {
            "event": "summary", "status": self.status,
            "test_error": last.get("test_error"), "test_loss": last.get("test_loss"),
            "train_loss": last.get("train_loss"), "train_error": last.get("train_error"),
            "params": self.params, "iterations": p.iteration, "epochs": p.epoch,
            "wall_time_s": round(p.elapsed, 3), "images_per_s": p.train_images / max(p.elapsed, 1e-9),
            "seed": self.spec.run.seed, "device": str(self.rt.device),
            "threads": last.get("threads", torch.get_num_threads()),
            "run_dir": str(self.run_dir.path) if self.run_dir is not None else None,
        }
        for key in ("val_error", "test_error_precise_bn", "val_error_precise_bn"):
            if key in last:
                summary[key] = last[key]
        counts = sorted({r["threads"] for r in p.history if "threads" in r})
        if len(counts) > 1:  # run.threads auto changed it between epochs
            summary["threads_varied"] = counts
        if self.status == "diverged":
            summary["diverged_at"] = self.diverged_at
        if self.status == "interrupted":
            summary["signal"] = self.stop.signum
        if self.run_dir is not None and self.dist.is_main:
            self.run_dir.write_summary(summary)
        for cb in self.callbacks:
            cb.on_end(self, summary)
        return summary
