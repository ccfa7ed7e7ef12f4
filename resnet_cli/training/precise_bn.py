"""BatchNorm statistics that match the weights ("precise BN").

During training each BN layer keeps an exponential moving average of its batch statistics
(momentum 0.1 in PyTorch), so at any point the running mean and variance describe the weights of
the last few dozen steps, not the current ones. After a short run at a constant, large learning
rate the two can be far apart, and evaluation in eval mode then measures the lag rather than the
net. Wu & Johnson 2021 ("Rethinking 'Batch' in BatchNorm", sec. 3) re-estimate the statistics of
the final weights over N training batches with an equal-weight (cumulative) average; pycls and
timm call it precise BN. The papers reproduced here (He 2016a/b) evaluate with the running
statistics, so this is never the default figure, only one beside it.

One function, `recalibrated`, serves `resnet eval --recalibrate-bn` and `train.precise_bn`:
forward passes of the net as it is evaluated (only BN in train mode) under no_grad over training
batches drawn as training draws them
(the run's augmentation, padding and Cutout, batch size), from a stream of its own seed; every
parameter is untouched, and the BN buffers are put back on exit unless asked to keep them.
"""

from __future__ import annotations

import copy
from collections.abc import Iterator
from contextlib import contextmanager

import torch
from torch import nn

from .. import data as data_mod
from ..data.order import mix

DEFAULT_BATCHES = 50  # `resnet eval --recalibrate-bn` without --bn-batches (at most one epoch)
TAG_PRECISE_BN = 4  # keeps the recalibration's order and augmentation apart from training's (order.py tags 1-3)


def bn_layers(model: nn.Module) -> list[nn.modules.batchnorm._BatchNorm]:
    """Every BatchNorm with running statistics (SyncBatchNorm included)."""
    return [m for m in model.modules()
            if isinstance(m, nn.modules.batchnorm._BatchNorm) and m.track_running_stats]


def train_batches(data, spec, device, batches=None, shard: tuple[int, int] = (0, 1)):
    """Training batches as the run draws them (spec.optim.batch_size, spec.data.augment/pad/cutout)
    from a stream seeded apart from training's, so nothing the run draws moves. `batches`: the
    trainer's own tensor batches, shared instead of copying the split onto the device again."""
    seed = mix(spec.run.seed, TAG_PRECISE_BN)
    if isinstance(batches, data_mod.Batches):
        twin = copy.copy(batches)  # the same resident tensors; only the seed differs
        twin.seed = seed
        return twin
    d = spec.data
    return data_mod.batches_for(data, "train", spec.optim.batch_size, d.augment, d.pad, device, seed,
                                shard=shard, cutout=d.cutout)


def stream(batches, n: int) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
    """The first n batches of successive epochs 0, 1, ... of `batches`."""
    epoch = 0
    while n > 0:
        for x, y in batches.epoch(epoch):
            yield x, y
            n -= 1
            if n == 0:
                return
        epoch += 1


@contextmanager
def recalibrated(model: nn.Module, batches, n: int, prepare=None, keep: bool = False, seed: int = 0):
    """Inside the block, every BN layer of `model` holds the cumulative average over `n` batches
    of `batches` (an object with `.epoch(e)`) of its batch mean and unbiased batch variance, as
    PyTorch's BN accumulates them with momentum None after reset_running_stats. Parameters are
    never written. On exit the running statistics, momenta and train/eval mode are restored
    bitwise (unless `keep`). `prepare(x)` readies a batch as the trainer does (memory format).

    The net runs as it is evaluated, only its BN layers in train mode: stochastic depth in its
    test-time form (every branch run, scaled by its survival), dropout off, the dropout shortcut at
    its expectation, so the statistics describe the net the test error is measured on (Wu & Johnson
    2021, sec. 3: the population statistics of the model that is evaluated). Anything that still
    draws runs inside a forked RNG seeded with `seed`, so no other stream moves."""
    layers = bn_layers(model)
    saved = [(m.momentum, m.running_mean.clone(), m.running_var.clone(), m.num_batches_tracked.clone())
             for m in layers]
    was_training = model.training
    device = next(model.parameters()).device
    try:
        for m in layers:
            m.reset_running_stats()
            m.momentum = None  # cumulative moving average: batch k weighs 1/k (torch.nn.BatchNorm2d docs)
        model.eval()
        for m in layers:
            m.train()  # batch statistics, accumulated; everything else in its evaluated form
        with torch.random.fork_rng(devices=[device] if device.type == "cuda" else []), torch.no_grad():
            torch.manual_seed(seed)
            for x, _ in stream(batches, n):
                model(prepare(x) if prepare else x)
        model.eval()
        yield model
    finally:
        for m, (momentum, mean, var, tracked) in zip(layers, saved):
            m.momentum = momentum
            if not keep:
                m.running_mean.copy_(mean)
                m.running_var.copy_(var)
                m.num_batches_tracked.copy_(tracked)
        model.train(was_training)
