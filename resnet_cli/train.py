"""The training loop. It only trains: progress, metrics output, gradient norms and the like hang
off it as callbacks; checkpoints and the run directory are the loop's own duty because exact
resume depends on what is saved at which point of a step.
"""

from __future__ import annotations

import math
import signal
import time
from dataclasses import dataclass, field
from typing import Any, Iterable

import torch
import torch.nn.functional as F

from . import checkpoint as ckpt
from . import data as data_mod
from . import runtime as runtime_mod
from . import schedule
from .errors import UserError
from .model import build_model, count_params
from .rundir import CHECKPOINT, RunDir
from .spec import RESUME_FREE, Spec, diff, resolve, to_tree, validate

SYNC_EVERY = 20  # read the loss back from the device every N steps (progress and divergence checks)


class Callback:
    """Hooks into the loop; each receives the trainer. Override what you need."""

    def on_start(self, t: Trainer) -> None: ...
    def after_backward(self, t: Trainer) -> None: ...  # gradients are populated, step not yet taken
    def on_sync(self, t: Trainer, loss: float) -> None: ...  # every SYNC_EVERY steps and at epoch ends
    def on_epoch(self, t: Trainer, record: dict[str, Any]) -> None: ...
    def on_end(self, t: Trainer, summary: dict[str, Any]) -> None: ...


class StopFlag:
    """Set by SIGINT/SIGTERM; the loop finishes its step, saves and stops. A handler that only sets
    a flag is safe; saving inside the handler is not (PITFALLS). A second SIGINT exits at once."""

    def __init__(self) -> None:
        self.signum: int | None = None
        self._old: dict[int, Any] = {}

    def install(self) -> StopFlag:
        for sig in (signal.SIGINT, signal.SIGTERM):
            self._old[sig] = signal.signal(sig, self._handle)
        return self

    def restore(self) -> None:
        for sig, old in self._old.items():
            signal.signal(sig, old)
        self._old.clear()

    def _handle(self, signum, frame) -> None:
        if self.signum is not None and signum == signal.SIGINT:
            import os

            os._exit(128 + signum)  # second Ctrl-C: the user wants out now
        self.signum = signum


@dataclass
class Progress:
    """Position in the run; saved in every checkpoint."""

    iteration: int = 0
    epoch: int = 0
    step: int = 0  # batches done in the current epoch
    loss_sum: float = 0.0  # over the current epoch (for the epoch's mean training loss/error)
    correct: float = 0.0
    seen: int = 0
    elapsed: float = 0.0  # training seconds, summed over resumed segments
    train_images: int = 0
    first_loss: float | None = None
    history: list[dict[str, Any]] = field(default_factory=list)


def evaluate(model: torch.nn.Module, data: data_mod.Data, split: str, rt: runtime_mod.Runtime,
             batch_size: int = 1000) -> tuple[float, float]:
    """Mean cross-entropy and error (%) on a split ('test', 'val', 'train'): batched, no_grad,
    eval mode, the single original view (He 2016a sec. 4.2)."""
    was_training = model.training
    model.eval()
    loss_sum = torch.zeros((), device=rt.device)
    wrong = torch.zeros((), device=rt.device)
    with torch.no_grad(), rt.autocast():
        for x, y in data_mod.eval_for(data, split, batch_size, rt.device):
            out = model(x.contiguous(memory_format=rt.memory_format)).float()
            loss_sum += F.cross_entropy(out, y, reduction="sum")
            wrong += (out.argmax(1) != y).sum()
    model.train(was_training)
    n = data_mod.num_examples(data, split)
    return loss_sum.item() / n, 100.0 * wrong.item() / n


class Trainer:
    # The training loss. A class attribute so tests can inject a NaN without touching the loop.
    loss_fn = staticmethod(F.cross_entropy)

    def __init__(self, spec: Spec, run_dir: RunDir | None = None, callbacks: Iterable[Callback] = (),
                 stop: StopFlag | None = None, data: data_mod.Data | None = None):
        self.spec = spec
        self.run_dir = run_dir
        self.callbacks = list(callbacks)
        self.stop = stop or StopFlag()
        self.rt = runtime_mod.select(spec.run, spec.train)
        self.data = data if data is not None else data_mod.load(spec.data)
        torch.manual_seed(spec.run.seed)
        num_classes = spec.model.num_classes or self.data.num_classes
        self.model = build_model(spec.model, self.data.in_channels, num_classes)
        self.model.checkpoint_segments = spec.train.checkpoint_segments
        self.params = count_params(self.model)
        self.model.to(self.rt.device, memory_format=self.rt.memory_format)
        o = spec.optim
        self.optimizer = torch.optim.SGD(self.model.parameters(), lr=o.lr, momentum=o.momentum,
                                         nesterov=o.nesterov, weight_decay=o.weight_decay)
        self.batches = data_mod.batches_for(self.data, "train", o.batch_size, spec.data.augment, spec.data.pad,
                                            self.rt.device, spec.run.seed)
        self.iters_per_epoch = self.batches.iters_per_epoch
        self.total = schedule.total_iters(o, self.iters_per_epoch)
        self.p = Progress()
        self.status = "running"
        self.forward_model = torch.compile(self.model) if spec.train.compile else self.model

    # -- checkpoints -----------------------------------------------------------------------------

    def state(self) -> dict[str, Any]:
        p = self.p
        return {
            "model": self.model.state_dict(), "optimizer": self.optimizer.state_dict(),
            "progress": {k: getattr(p, k) for k in Progress.__dataclass_fields__},
            "rng": ckpt.rng_state(), "spec": to_tree(self.spec),
        }

    def save(self) -> None:
        if self.run_dir is not None:
            ckpt.save(self.state(), self.run_dir.file(CHECKPOINT))

    def restore(self, state: dict[str, Any], allow_spec_change: bool = False) -> None:
        saved = resolve(validate(state["spec"], "checkpoint spec"))
        changed = [k for k in diff(saved, self.spec) if k not in RESUME_FREE]
        if changed and not allow_spec_change:
            raise UserError(f"the spec differs from the run's in {', '.join(changed)}; "
                            "pass --force-resume to go on anyway, or start a new run")
        try:
            self.model.load_state_dict(state["model"], strict=True)
            self.optimizer.load_state_dict(state["optimizer"])
        except (RuntimeError, ValueError, KeyError) as exc:
            raise UserError(f"checkpoint does not fit this model: {str(exc).splitlines()[0][:200]}") from None
        self.p = Progress(**state["progress"])
        ckpt.set_rng_state(state["rng"])

    # -- the loop --------------------------------------------------------------------------------

    def set_lr(self) -> float:
        lr = schedule.lr_at(self.p.iteration, self.spec.optim, self.iters_per_epoch)
        for group in self.optimizer.param_groups:
            group["lr"] = lr
        return lr

    def run(self) -> dict[str, Any]:
        for cb in self.callbacks:
            cb.on_start(self)
        self.model.train()
        self.lr = schedule.lr_at(self.p.iteration, self.spec.optim, self.iters_per_epoch)
        try:
            while self.p.iteration < self.total and self.status == "running":
                self._epoch()
        finally:
            self.stop.restore()
        if self.status == "running":
            self.status = "completed"
        return self._finish()

    def _epoch(self) -> None:
        p, rt = self.p, self.rt
        loss_acc = torch.zeros((), device=rt.device)
        correct_acc = torch.zeros((), device=rt.device)
        seen_here = 0
        tick = time.perf_counter()
        for x, y in self.batches.epoch(p.epoch, start=p.step):
            self.lr = self.set_lr()
            x = x.contiguous(memory_format=rt.memory_format)
            with rt.autocast():
                out = self.forward_model(x)
                loss = self.loss_fn(out.float(), y)
            self.optimizer.zero_grad(set_to_none=True)
            loss.backward()
            self.last_loss = loss
            for cb in self.callbacks:
                cb.after_backward(self)
            self.optimizer.step()
            loss_acc += loss.detach() * len(y)
            correct_acc += (out.detach().argmax(1) == y).sum()
            seen_here += len(y)
            p.iteration += 1
            p.step += 1
            p.train_images += len(y)
            done = p.iteration >= self.total or self.stop.signum is not None
            if p.iteration % SYNC_EVERY == 0 or p.iteration == 1 or done or p.step == self.iters_per_epoch:
                if not self._healthy(loss.item()):
                    return
                p.elapsed += time.perf_counter() - tick
                tick = time.perf_counter()
                if self.stop.signum is not None:
                    self._fold(loss_acc, correct_acc, seen_here)
                    self.status = "interrupted"
                    self.save()
                    return
            ce = self.spec.train.checkpoint_every
            if ce and p.iteration % ce == 0 and not done and p.step != self.iters_per_epoch:
                if not self._healthy(loss.item()):  # never write a checkpoint of a diverged run
                    return
                p.elapsed += time.perf_counter() - tick
                tick = time.perf_counter()
                self._fold(loss_acc, correct_acc, seen_here)
                loss_acc.zero_(), correct_acc.zero_()
                seen_here = 0
                self.save()
            if done:
                break
        if rt.device.type == "cuda":
            torch.cuda.synchronize(rt.device)
        p.elapsed += time.perf_counter() - tick
        self._fold(loss_acc, correct_acc, seen_here)
        self._end_epoch()

    def _fold(self, loss_acc: torch.Tensor, correct_acc: torch.Tensor, seen: int) -> None:
        self.p.loss_sum += loss_acc.item()
        self.p.correct += correct_acc.item()
        self.p.seen += seen

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
            "train_loss": p.loss_sum / max(p.seen, 1), "train_error": 100.0 * (1 - p.correct / max(p.seen, 1)),
        }
        if self.spec.train.eval_every == "epoch" or p.iteration >= self.total:
            if data_mod.num_examples(self.data, "val"):
                record["val_loss"], record["val_error"] = evaluate(self.model, self.data, "val", self.rt)
            record["test_loss"], record["test_error"] = evaluate(self.model, self.data, "test", self.rt)
        record["elapsed_s"] = round(p.elapsed, 3)
        record["images_per_s"] = p.train_images / max(p.elapsed, 1e-9)
        p.history.append(record)
        p.epoch += 1
        p.step = 0
        p.loss_sum = p.correct = 0.0
        p.seen = 0
        if self.run_dir is not None:
            self.run_dir.append_metrics(record)
        self.save()
        for cb in self.callbacks:
            cb.on_epoch(self, record)

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
            "run_dir": str(self.run_dir.path) if self.run_dir is not None else None,
        }
        if "val_error" in last:
            summary["val_error"] = last["val_error"]
        if self.status == "diverged":
            summary["diverged_at"] = self.diverged_at
        if self.status == "interrupted":
            summary["signal"] = self.stop.signum
        if self.run_dir is not None:
            self.run_dir.write_summary(summary)
        for cb in self.callbacks:
            cb.on_end(self, summary)
        return summary
