"""`--stack`: the seeds of one spec trained as one stacked net (stacked.py) in one process, each
seed still an ordinary run directory.

Every seed is opened as the run it would be alone (session.open_run: its spec with its own seed,
its run directory, its lock, its resume from its own checkpoint) and keeps its own `Trainer`, which
is not stepped: the stacked net is. At every point a separate run writes something (a checkpoint
every `train.checkpoint_every` steps, the epoch's end) the members' slices of the stacked weights,
buffers and optimizer state are copied into their trainers, and each trainer does what it does
alone: evaluates its net, appends its epoch record, writes its checkpoint and, at the end, its
summary. So a member's checkpoint is a separate run's checkpoint, and `report`, `evidence`,
`export`, `resnet train --resume` read it unchanged.

Resume: a stack resumes by opening its members' checkpoints and stacking them again, which gives
the stacked tensors back bitwise, so a stacked run killed mid-epoch ends as the uninterrupted one.
Members found at different iterations (a crash between two members' checkpoint writes) resume as
separate stacks, one per iteration.

Per member, as in its separate run: the initialisation (its trainer builds its net after seeding),
its data order and augmentation (its own `Batches`), its BN statistics, its momentum and weight
decay (elementwise over the stacked tensors), its evaluation and its divergence (a member whose
loss goes NaN or explodes is recorded as diverged at that sync point, as a separate run would be,
and its loss leaves the sum from then on, so its gradients are no longer taken). The learning-rate
schedule and the budget are the row's, shared. The cases stacking cannot reproduce are `why_not`'s.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import torch

from .. import data as data_mod
from ..runs.files import CHECKPOINT
from ..runs.reader import RunRecord
from ..spec import Spec
from ..spec.datasets import DATASETS, shape_of
from . import distributed, optimizers, schedule, stacked, testhook
from .session import open_run
from .trainer import SYNC_EVERY, Trainer

# Above this image side a stacked net trains slower on a CPU than the same seeds one after another:
# `resnet bench --stack` measured the CIFAR ResNet-20 (32x32) at 0.48x per seed at k = 4, the digits
# ResNet-110 (8x8) at 1.31x at k = 8 (docs/bench.md). Between them nothing was measured; the
# MNIST family's 28x28 is taken with CIFAR's side.
CPU_SIDE = 16


def why_not(spec: Spec) -> str | None:
    """Why the seeds of `spec` cannot be stacked, in words for one line; None where they can.
    The one place that decides: each case is listed in docs/train.md."""
    t, o = spec.train, spec.optim
    if distributed.from_env().active:
        return "under torchrun every process trains its share of one run (DDP), not its own seeds"
    if spec.model.family in ("vit", "imagenet"):
        return f"stacking is built and tested for the CIFAR-style ResNets, not the {spec.model.family} family"
    if o.mixup:
        return "optim.mixup draws each batch's mixing from the run's global generator, which members would share"
    if spec.data.shuffle == "global":
        return "data.shuffle global draws each epoch's order from the run's global generator, which members would share"
    if o.lr_groups:
        return "optim.lr_groups selects parameters by their shape, which stacking changes"
    if spec.run.precision == "fp16":
        return "fp16's loss scaler would skip every member's step when one member overflows"
    if t.compile or t.checkpoint_segments:
        return "train.compile and train.checkpoint_segments act on one net's forward"
    if t.grad_norm_every or t.probes or t.tensorboard:
        return "gradient norms, probes and TensorBoard read one net's gradients and modules"
    if _random_forward(spec):
        return ("the net draws random numbers in its forward pass (dropout, stochastic depth): a member "
                "would draw other numbers than its separate run")
    side = DATASETS[spec.data.dataset].value("side", spec.data)
    on_cpu = spec.run.device == "cpu" or (spec.run.device == "auto" and not torch.cuda.is_available())
    if on_cpu and isinstance(side, int) and side > CPU_SIDE:
        return f"on a CPU a stack of {side}x{side}-image nets trains slower than its seeds one after another"
    return None


def _random_forward(spec: Spec) -> bool:
    """Whether a forward pass in training mode draws from the global generator: dropout of any kind
    and stochastic depth do, whatever module holds them (two images of the dataset's shape)."""
    from ..model import build_model

    channels, classes = shape_of(spec.data)
    side = DATASETS[spec.data.dataset].value("side", spec.data)
    side = side if isinstance(side, int) else 32
    before = torch.get_rng_state()
    torch.manual_seed(0)
    model = build_model(spec.model, channels, spec.model.num_classes or classes).train()
    probe = torch.get_rng_state()
    with torch.no_grad():
        model(torch.randn(2, channels, side, side, generator=torch.Generator().manual_seed(0)))
    drew = not torch.equal(probe, torch.get_rng_state())
    torch.set_rng_state(before)
    return drew


class StackedRun:
    """Members at the same point of the same row, stepped as one stacked net."""

    def __init__(self, members: Sequence[Trainer], callbacks: Sequence[Any] = ()):
        self.members = list(members)
        first = self.members[0]
        if len({m.p.iteration for m in self.members}) != 1:
            raise ValueError("a stack's members must stand at the same iteration")
        self.spec, self.rt, self.total = first.spec, first.rt, first.total
        self.iters_per_epoch = first.iters_per_epoch
        self.callbacks = list(callbacks)
        # NCHW throughout: the stacked net is one set of grouped convolutions (the members' own
        # nets keep their format for evaluation).
        self.net = stacked.StackedNet([m.model for m in self.members]).to(self.rt.device)
        self.optimizer = optimizers.build(self.net, self.spec.optim)
        for p in self.net.parameters():
            p.grad = torch.zeros_like(p)
        self._pairs = list(zip(self.net.parameters(), zip(*(m.optimizer.param_groups[0]["params"]
                                                             for m in self.members))))
        self._stack_optimizer_state()
        self.batches = stacked.StackedBatches([m.batches for m in self.members])
        # Provenance: which seeds a run shared its stack with (its numbers are its own run's to float
        # tolerance, not bitwise), in the format the stack computed in.
        for m in self.members:
            if m.run_dir is not None:
                m.run_dir.update_meta({"stack": {"seeds": [n.spec.run.seed for n in self.members],
                                                 "memory_format": "contiguous"}})
        self.lr = first.lr if hasattr(first, "lr") else schedule.lr_at(first.p.iteration, self.spec.optim,
                                                                         self.iters_per_epoch)

    # -- the members' state in and out -------------------------------------------------------------

    def _stack_optimizer_state(self) -> None:
        """The members' optimizer states (restored from their checkpoints) as the stacked optimizer's."""
        for stacked_p, member_ps in self._pairs:
            states = [m.optimizer.state.get(p, {}) for m, p in zip(self.members, member_ps)]
            if not states[0]:
                continue
            self.optimizer.state[stacked_p] = {
                key: (torch.stack([s[key] for s in states]).to(stacked_p.device)
                      if torch.is_tensor(value) and value.shape == member_ps[0].shape else value)
                for key, value in states[0].items()}

    def _unstack(self, members: Sequence[Trainer]) -> None:
        """Each member's slice of the stacked weights, buffers and optimizer state into its trainer."""
        for m in members:
            i = self.members.index(m)
            own = self.net.member_state(i)
            with torch.no_grad():
                for name, tensor in m.model.state_dict(keep_vars=True).items():
                    tensor.copy_(own[name])
            for stacked_p, member_ps in self._pairs:
                state = self.optimizer.state.get(stacked_p)
                if state:
                    m.optimizer.state[member_ps[i]] = {
                        key: (value[i].clone() if torch.is_tensor(value) and value.shape[1:] == member_ps[i].shape
                              else value.clone() if torch.is_tensor(value) else value)
                        for key, value in state.items()}
            optimizers.set_lrs(m.optimizer, self.lr)
            m.lr = self.lr

    # -- the loop ----------------------------------------------------------------------------------

    def _signum(self) -> int | None:
        return next((m.stop.signum for m in self.members if m.stop.signum is not None), None)

    def run(self) -> None:
        """Train the members to the end, a signal, or each one's divergence; their summaries are
        written by `finish`."""
        for m in self.members:
            m.model.train()
            for cb in m.callbacks:
                cb.on_start(m)
        for cb in self.callbacks:
            cb.on_start(self)
        self.net.train()
        if self._signum() is not None:
            for m in self.members:
                m.status = "interrupted"
        while self._alive() and self._alive()[0].p.iteration < self.total:
            self._epoch()

    def _alive(self) -> list[Trainer]:
        return [m for m in self.members if m.status == "running"]

    def _epoch(self) -> None:
        alive = self._alive()
        p = alive[0].p
        acc = torch.zeros(len(self.members), 2, device=self.rt.device)  # [loss sum, correct] per member
        seen = 0
        tick = time.perf_counter()
        every = self.spec.train.checkpoint_every
        for x, y in self.batches.epoch(p.epoch, start=p.step):
            losses, hits = self._step(x, y, [self.members.index(m) for m in alive])
            acc[:, 0] += losses.detach() * y.shape[1]
            acc[:, 1] += hits
            seen += y.shape[1]
            for m in alive:
                m.p.iteration += 1
                m.p.step += 1
                m.p.train_images += y.shape[1]
            if p.iteration == testhook.PAUSE_AT:
                testhook.pause(self.members[-1].stop)
            last = p.iteration >= self.total or p.step == self.iters_per_epoch
            checkpoint_now = bool(every) and p.iteration % every == 0 and not last
            stop = self._signum() is not None
            if p.iteration % SYNC_EVERY == 0 or p.iteration == 1 or last or checkpoint_now or stop:
                values = losses.tolist()
                spent = time.perf_counter() - tick
                tick = time.perf_counter()
                for m in alive:
                    m.p.elapsed += spent  # the stack's wall time: images/s are per seed
                    m._healthy(values[self.members.index(m)])  # a diverged member: no checkpoint from here
                alive = self._alive()
                if not alive:
                    return
                p = alive[0].p
                if stop or checkpoint_now:
                    self._fold(alive, acc, seen)
                    acc.zero_()
                    seen = 0
                    if stop:
                        for m in alive:
                            m.status = "interrupted"
                    self._unstack(alive)
                    for m in alive:
                        m.save()
                    if stop:
                        return
            if last:
                break
        if self.rt.device.type == "cuda":
            torch.cuda.synchronize(self.rt.device)
        spent = time.perf_counter() - tick
        for m in alive:
            m.p.elapsed += spent
        self._fold(alive, acc, seen)
        self._unstack(alive)
        records = []
        for m in alive:
            m._end_epoch()  # its own evaluation, epoch record, checkpoint and callbacks
            records.append((m, m.p.history[-1]))
        watch = self.members[0].threads_watch  # one count for the whole stack
        if watch is not None and alive[0].p.iteration < self.total:
            watch.apply(self.members[0].say, alive[0].p.epoch)
        for cb in self.callbacks:
            cb.on_epoch(self, records)

    def _fold(self, members: Sequence[Trainer], acc: torch.Tensor, seen: int) -> None:
        for m in members:
            loss_sum, correct = acc[self.members.index(m)].tolist()
            m.p.loss_sum += loss_sum
            m.p.correct += correct
            m.p.seen += seen

    def _step(self, x: torch.Tensor, y: torch.Tensor, alive: list[int]) -> tuple[torch.Tensor, torch.Tensor]:
        """One SGD step of every member: each member's mean loss and correct predictions, shape (k,)."""
        self.lr = schedule.lr_at(self.members[alive[0]].p.iteration, self.spec.optim, self.iters_per_epoch)
        optimizers.set_lrs(self.optimizer, self.lr)
        with self.rt.autocast():
            out = self.net(x)  # (k, N, classes)
            losses = stacked.member_losses(out, y, **self.members[0].loss_kwargs)
        self.optimizer.zero_grad(set_to_none=False)
        # The sum of the members' own losses: each member's gradient is its separate run's. A member
        # that diverged is left out, so its NaN reaches no one's step (the others' never did).
        (losses if len(alive) == len(self.members) else losses[alive]).sum().backward()
        self.optimizer.step()
        return losses, (out.detach().argmax(-1) == y).sum(1)


# -- the runs around the stack ----------------------------------------------------------------------


class _AnyStop:
    """The stop flag of a member trained alone among others: a signal reaches whichever member's
    flag took over SIGINT/SIGTERM last (each session installs its own, in order), so the member
    stops on any of them; the sessions put the handlers back as they close, in reverse order, so
    this member's run puts back none."""

    def __init__(self, flags: Sequence[Any]):
        self.flags = list(flags)

    @property
    def signum(self) -> int | None:
        return next((f.signum for f in self.flags if f.signum is not None), None)

    def restore(self) -> None:
        pass


def train(specs: Sequence[Spec], paths: Sequence[Path], *, resume: str = "never", cap: int = 1 << 30,
          callbacks: Sequence[Any] = (), alone: Sequence[Any] = (),
          say: Callable[[str], None] = lambda message: None) -> list[dict[str, Any]]:
    """Train the runs of `specs` (one row, seeds apart) in `paths` as stacks; their summaries, in
    order, at most `cap` in a stack. A run that had finished (completed or diverged) is left as it
    is and its summary read. `callbacks` hear each stack; `alone`, a run left on its own (a stack
    of one trains as the ordinary run it is: vmap's overhead with nothing to share would halve its
    speed, docs/bench.md)."""
    summaries: dict[int, dict[str, Any]] = {}
    todo = []
    for i, path in enumerate(paths):
        rec = RunRecord.read(path)
        if resume != "never" and rec.finished:
            summaries[i] = rec.summary
        else:
            todo.append(i)
    if todo:
        data = data_mod.load(specs[todo[0]].data)  # one copy of the images for every member
        with contextlib.ExitStack() as opened:
            sessions = {i: opened.enter_context(open_run(specs[i], paths[i], resume=resume, data=data, say=say))
                        for i in todo}
            for i, session in sessions.items():
                if session.finished is not None:
                    summaries[i] = session.finished
            waiting = [i for i in todo if i not in summaries]
            # One stack per starting iteration: members saved at different points (a crash between
            # two members' checkpoints) go on as separate stacks.
            for start in sorted({sessions[i].trainer.p.iteration for i in waiting}):
                group = [i for i in waiting if sessions[i].trainer.p.iteration == start]
                for at in range(0, len(group), cap):
                    chunk = group[at:at + cap]
                    if len(chunk) == 1:
                        trainer = sessions[chunk[0]].trainer
                        trainer.callbacks += alone
                        trainer.stop = _AnyStop([sessions[i].trainer.stop for i in waiting])
                        summaries[chunk[0]] = trainer.run()  # its summary written, as a stack's below
                    else:
                        StackedRun([sessions[i].trainer for i in chunk], callbacks).run()
            for i in waiting:
                session = sessions[i]
                if i not in summaries:
                    if session.trainer.status == "running":  # it reached the budget
                        session.trainer.status = "completed"
                    summaries[i] = session.trainer._finish()
                if (session.fresh and summaries[i]["status"] == "interrupted"
                        and not session.run_dir.file(CHECKPOINT).exists()):
                    session.run_dir.remove_unstarted()  # signalled before its first step
    return [summaries[i] for i in range(len(paths))]
