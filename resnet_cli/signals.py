"""Stopping cleanly on SIGINT/SIGTERM: one flag, shared by the training loop and the sweeps.

By default SIGTERM kills Python without running `finally` blocks (exit 143, nothing saved). A handler that only
sets a flag is safe; saving inside the handler is not. The loop checks the flag between steps,
finishes the step, saves and exits 130/143. A second Ctrl-C exits at once.
"""

from __future__ import annotations

import os
import signal
from typing import Any


class StopFlag:
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

    def __enter__(self) -> StopFlag:
        return self.install()

    def __exit__(self, *exc: Any) -> None:
        self.restore()

    def _handle(self, signum, frame) -> None:
        if self.signum is not None and signum == signal.SIGINT:
            os._exit(128 + signum)  # a second Ctrl-C: the user wants out now
        self.signum = signum
