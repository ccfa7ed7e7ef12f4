"""What a training command shows while it trains, and how it exits: one run's progress
(`resnet train`), a stack's (`resnet train --seeds --stack`), the exit codes of a run's status."""

from __future__ import annotations

import signal
import statistics
import sys
from typing import Any

from rich.progress import BarColumn, Progress, TextColumn, TimeRemainingColumn

from .. import errors, output


def exit_code(status: str, signum: int | None = None) -> int:
    if status == "diverged":
        return errors.DIVERGED
    if status == "interrupted":
        return errors.INTERRUPTED_TERM if signum == signal.SIGTERM else errors.INTERRUPTED_INT
    return errors.OK



class StackProgress:
    """One line per epoch for the whole stack on stderr (the members' median loss and test error);
    in JSON mode each member's epoch record on stdout, with its seed."""

    def __init__(self, fmt: output.Format):
        self.fmt = fmt

    def on_start(self, run) -> None:
        output.info(f"training seeds {', '.join(str(m.spec.run.seed) for m in run.members)} as one stacked net")

    def on_epoch(self, run, records: list[tuple[Any, dict[str, Any]]]) -> None:
        if self.fmt is output.Format.JSON:
            for member, record in records:
                output.emit({**record, "seed": member.spec.run.seed})
        first = records[0][1]
        line = (f"epoch {first['epoch']:>3}  iter {first['iter']:>6}/{run.total}  {len(records)} seeds  "
                f"median loss {statistics.median(r['train_loss'] for _, r in records):.4f}")
        tests = [r["test_error"] for _, r in records if "test_error" in r]
        if tests:
            line += f"  median test err {statistics.median(tests):5.2f}% (n={len(tests)})"
        output.info(line + f"  {first['images_per_s']:,.0f} img/s per seed")


class TerminalProgress:
    """Progress on stderr: a live bar on a terminal, one line per epoch otherwise. In JSON mode the
    epoch records also go to stdout, one object per line. The bar must not capture stdout (rich's
    Live does by default, even on a stderr console): the records reach the pipe whatever stderr is."""

    def __init__(self, fmt: output.Format, seeds: bool = False):
        self.fmt = fmt
        self.seeds = seeds  # one of several seeds (train --seeds): its records say which, as a stack's do
        self.console = output.stderr()
        self.live = sys.stderr.isatty()
        self.bar = None

    def on_start(self, t) -> None:
        if self.live:

            self.bar = Progress(TextColumn("{task.description}"), BarColumn(), TextColumn("{task.completed}/{task.total}"),
                                TextColumn("{task.fields[info]}"), TimeRemainingColumn(), console=self.console,
                                transient=True, redirect_stdout=False, redirect_stderr=False)
            self.bar.start()
            self.task = self.bar.add_task("train", total=t.total, completed=t.p.iteration, info="")
    def after_backward(self, t) -> None: ...

    def on_sync(self, t, loss: float) -> None:
        if self.bar is not None:
            ips = t.p.train_images / max(t.p.elapsed, 1e-9)
            self.bar.update(self.task, completed=t.p.iteration,
                            info=f"loss {loss:.4f}  lr {t.lr:.4g}  {ips:,.0f} img/s")

    def on_epoch(self, t, record: dict[str, Any]) -> None:
        if self.fmt is output.Format.JSON:
            output.emit({**record, "seed": t.spec.run.seed} if self.seeds else record)
        line = (f"epoch {record['epoch']:>3}  iter {record['iter']:>6}/{t.total}  loss {record['train_loss']:.4f}  "
                f"train err {record['train_error']:5.2f}%")
        if "test_error" in record:
            line += f"  test err {record['test_error']:5.2f}%"
        line += f"  {record['images_per_s']:,.0f} img/s"
        (self.bar.console if self.bar is not None else self.console).print(line)

    def on_end(self, t, summary) -> None:
        if self.bar is not None:
            self.bar.stop()
