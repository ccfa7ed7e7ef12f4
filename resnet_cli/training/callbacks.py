"""What the trainer can attach: the `Callback` hooks and the callbacks the trainer itself adds.

This module sits below `train.py` (it never imports it), so anything may hang a callback off the
loop without an import circle.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from .probes import InputGrads, weight_grad_norms, weight_layers


class Callback:
    """Hooks into the loop; each receives the trainer `t`. Override what you need.

    A callback whose measurements must survive a resume names a `checkpoint_key`: the trainer then
    saves its `state()` in every checkpoint under that key and hands it back to `load_state` on
    restore, so what it gathered before a crash is neither lost nor counted twice."""

    checkpoint_key: str | None = None

    def state(self) -> dict[str, Any]:
        return {}

    def load_state(self, state: dict[str, Any]) -> None: ...

    def on_start(self, t) -> None: ...
    def after_backward(self, t) -> None: ...  # gradients are populated, step not yet taken
    def on_sync(self, t, loss: float) -> None: ...  # every train.SYNC_EVERY steps and at epoch ends
    def on_epoch(self, t, record: dict[str, Any]) -> None: ...
    def on_record(self, t, record: dict[str, Any]) -> None: ...  # each record metrics.jsonl gets
    def on_end(self, t, summary: dict[str, Any]) -> None: ...


def log_record(t, record: dict[str, Any]) -> None:
    """One metrics.jsonl record: appended to the run's file (rank 0 holds the run directory) and
    handed to every callback's `on_record` (TensorBoard mirrors them). Callbacks written without the
    `Callback` base may lack the hook."""
    if t.run_dir is not None and t.dist.is_main:
        t.run_dir.append_metrics(record)
    for cb in t.callbacks:
        hook = getattr(cb, "on_record", None)
        if hook is not None:
            hook(t, record)


class GradNormCallback(Callback):
    """Per-layer gradient norms every `every` steps, after backward() and before step().

    Measures steps 1, every + 1, 2 every + 1, ... (step 1 is the net at initialisation). Each record,
    `{"event": "grad_norm", "iter": n, "weights": {layer: norm}, "inputs": [||dE/dx_0||, ...]}`, is
    kept in `.records` and appended to the run's metrics.jsonl when the trainer has a run directory.
    `iter` counts the steps done once this gradient is applied, as the epoch records do, so a resume
    that truncates metrics to its checkpoint keeps exactly the records it will not recompute."""

    def __init__(self, every: int, keep: bool = True):
        if every < 1:
            raise ValueError(f"every must be >= 1, got {every}")
        self.every = every
        self.keep = keep
        self.records: list[dict[str, Any]] = []

    def _due(self, iteration: int) -> bool:
        return iteration % self.every == 0

    def on_start(self, t) -> None:
        self.layers = weight_layers(t.model)
        self.inputs = InputGrads(t.model)
        self.trainer = t
        # Arm the unit-input hooks before the forward pass of each measured step.
        self._arm_handle = t.model.register_forward_pre_hook(self._maybe_arm)

    def _maybe_arm(self, module: nn.Module, args: tuple) -> None:
        if module.training and torch.is_grad_enabled() and self._due(self.trainer.p.iteration):
            self.inputs.arm()

    def after_backward(self, t) -> None:
        if not self._due(t.p.iteration):
            return
        norms = weight_grad_norms(self.layers)
        record = {
            "event": "grad_norm", "iter": t.p.iteration + 1, "loss": t.last_loss.item(),
            "weights": {layer.name: n for layer, n in zip(self.layers, norms)},
            "inputs": self.inputs.read(),
        }
        if self.keep:
            self.records.append(record)
        log_record(t, record)

    def on_end(self, t, summary: dict[str, Any]) -> None:
        self.inputs.remove()
        self._arm_handle.remove()
