"""TensorBoard scalars of a run (`train.tensorboard: true`): RUN_DIR/tensorboard/, written by rank 0.

A view for `tensorboard --logdir runs`, nothing more: metrics.jsonl stays the record every report
reads. Tags, each at the step (iteration count) the value belongs to:

    train/loss, train/lr              every train.SYNC_EVERY steps (the batch loss, the lr it used)
    epoch/train_loss, epoch/test_error, epoch/images_per_s, ...   each epoch record's numbers
    grad_norm/<layer>, grad_input/<unit>   each grad_norm record (train.grad_norm_every)
    gate/<unit>                       each epoch record's mean gate per gated unit (gates.py)

Resume: a run resumed from its checkpoint at iteration c recomputes every step after c, and the
killed process may have written some of them already. The new writer starts with purge_step c + 1,
TensorBoard's own mechanism (a SessionLog START): readers drop every earlier event from step c + 1 on,
so each curve goes on from the checkpoint with every step once. Events are flushed at every sync,
before a checkpoint can be saved, so nothing up to the checkpoint is lost to a kill either.

That START only works if readers meet the new file after the old one. TensorBoard reads a
directory's event files in name order, and a name is `events.out.tfevents.SECOND.HOST.PID.N`: a
writer started within the killed writer's second by a lower pid (a resume in a long-lived process,
a requeue on another node) would sort first, and the old file read after it would undo the purge.
So a writer waits, if it must, for the second after the newest file's (`_wait_to_sort_last`).
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from .callbacks import Callback
from .. import output
from ..errors import UserError

# Epoch record fields -> tags; `iter`, `epoch` and `elapsed_s` are the axes, not curves.
EPOCH_FIELDS = ("train_loss", "train_error", "test_loss", "test_error", "val_loss", "val_error", "images_per_s",
                "test_loss_precise_bn", "test_error_precise_bn", "val_loss_precise_bn", "val_error_precise_bn")


def check_installed() -> None:
    """torch.utils.tensorboard needs the tensorboard package, an optional extra of ours."""
    try:
        import tensorboard  # noqa: F401
    except ImportError:
        raise UserError("train.tensorboard needs the tensorboard package: pip install 'resnet-cli[tensorboard]' "
                        "(or turn it off: --set train.tensorboard=false)") from None


# Longest wait for a clock behind the newest file's: past this the clocks disagree (another node's),
# and the curves may show the killed attempt's steps after the checkpoint; a diagnostic says so.
MAX_WAIT_S = 2.0


def _wait_to_sort_last(log_dir: Path) -> None:
    """Sleep until a new event file's name (its start second first) sorts after every file already
    in `log_dir`, so TensorBoard reads this attempt's purge after the attempts it replaces."""
    seconds = []
    for p in log_dir.glob("events.out.tfevents.*"):
        stamp = p.name.split(".")[3]
        if stamp.isdigit():
            seconds.append(int(stamp))
    if not seconds:
        return
    wait = max(seconds) + 1 - time.time()  # the name holds the start time truncated to the second
    if wait > MAX_WAIT_S:
        output.info(f"resnet: warning: {log_dir}: an event file there is dated {max(seconds) - int(time.time())} s ahead of this clock; TensorBoard "
                    "may show the interrupted attempt's steps after the checkpoint (metrics.jsonl is unaffected)")
    elif wait > 0:
        time.sleep(wait)


class TensorBoardCallback(Callback):
    def __init__(self, log_dir: Path):
        check_installed()  # before the run trains anything
        self.log_dir = Path(log_dir)
        self.writer = None

    def on_start(self, t) -> None:
        from torch.utils.tensorboard import SummaryWriter

        _wait_to_sort_last(self.log_dir)
        # Step 0 is never logged, so a fresh run's purge_step 1 only drops leftovers of an attempt
        # that never reached a checkpoint.
        self.writer = SummaryWriter(str(self.log_dir), purge_step=t.p.iteration + 1)

    def on_sync(self, t, loss: float) -> None:
        step = t.p.iteration
        self.writer.add_scalar("train/loss", loss, step)
        self.writer.add_scalar("train/lr", t.lr, step)
        self.writer.flush()

    def on_record(self, t, record: dict[str, Any]) -> None:
        step = record["iter"]
        if record["event"] == "epoch":
            for name in EPOCH_FIELDS:
                if record.get(name) is not None:
                    self.writer.add_scalar(f"epoch/{name}", record[name], step)
            for unit, g in enumerate(record.get("gate_mean") or []):
                self.writer.add_scalar(f"gate/{unit}", g, step)
        elif record["event"] == "grad_norm":
            for layer, norm in record["weights"].items():
                self.writer.add_scalar(f"grad_norm/{layer}", norm, step)
            for unit, norm in enumerate(record["inputs"]):
                if norm is not None:  # an input the backward pass did not reach
                    self.writer.add_scalar(f"grad_input/{unit}", norm, step)
        self.writer.flush()

    def on_end(self, t, summary: dict[str, Any]) -> None:
        if self.writer is not None:
            self.writer.close()
