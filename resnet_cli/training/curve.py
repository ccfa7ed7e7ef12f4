"""The degradation probe (`train.probes: [degrade]`): what `resnet degrade` measures beside the loop.

The first weight layer's gradient norm at step 1 and a training curve, mean loss and error (%) over
windows of steps, as He 2016a Fig. 6 plots training error against iteration. Both travel in the
run's checkpoints, so a resumed run's curve starts at iteration 1, and are written into the run
directory (probe.json, beside summary.json) at every epoch end and at the end, so reports read
run directories alone.
"""

from __future__ import annotations

from typing import Any

import torch

from .callbacks import Callback

POINTS = 60  # curve points per run: one window is ceil(total iterations / 60) steps


class CurveProbe(Callback):
    checkpoint_key = "degrade_probe"  # the key runs of earlier versions saved it under

    def __init__(self, window: int | None = None):
        self.window = None if window is None else max(1, window)  # None: set by the trainer (window_for)
        self.grad_norm_first_layer: float | None = None
        self.curve: list[list[float]] = []  # [iteration, loss, error %]
        self.resumed = {"loss_sum": 0.0, "wrong": 0.0, "seen": 0, "steps": 0}  # the open window

    @staticmethod
    def window_for(total: int) -> int:
        """Steps per curve point: ceil(total / POINTS)."""
        return max(1, -(-total // POINTS))

    def state(self) -> dict[str, Any]:
        return {"window": self.window, "grad_norm_first_layer": self.grad_norm_first_layer, "curve": self.curve,
                "loss_sum": self.loss_sum.item(), "wrong": self.wrong.item(), "seen": self.seen, "steps": self.steps}

    def load_state(self, state: dict[str, Any]) -> None:
        self.window, self.grad_norm_first_layer = state["window"], state["grad_norm_first_layer"]
        self.curve = [list(point) for point in state["curve"]]
        self.resumed = {k: state[k] for k in self.resumed}

    def on_start(self, t) -> None:
        self.first = next(m for m in t.model.modules() if isinstance(m, (torch.nn.Conv2d, torch.nn.Linear)))
        self.loss_sum = torch.tensor(self.resumed["loss_sum"], device=t.rt.device)
        self.wrong = torch.tensor(self.resumed["wrong"], device=t.rt.device)
        self.seen, self.steps = self.resumed["seen"], self.resumed["steps"]

    def after_backward(self, t) -> None:
        if t.p.iteration == 0:
            self.grad_norm_first_layer = self.first.weight.grad.norm().item()
        y = t.last_target
        self.loss_sum += t.last_loss.detach() * len(y)
        self.wrong += (t.last_output.argmax(1) != y).sum()
        self.seen += len(y)
        self.steps += 1
        if self.steps == self.window or t.p.iteration + 1 >= t.total:
            self.curve.append([t.p.iteration + 1, self.loss_sum.item() / self.seen,
                               100.0 * self.wrong.item() / self.seen])
            self.loss_sum.zero_(), self.wrong.zero_()
            self.seen = self.steps = 0

    def values(self) -> dict[str, Any]:
        return {"grad_norm_first_layer": self.grad_norm_first_layer, "window": self.window, "curve": self.curve}

    def write(self, t) -> None:
        if t.run_dir is None:
            return
        t.run_dir.write_probe(self.values())

    def on_epoch(self, t, record: dict[str, Any]) -> None:
        self.write(t)  # before summary.json: a finished run always has its probe on disk

    def on_end(self, t, summary: dict[str, Any]) -> None:
        self.write(t)
