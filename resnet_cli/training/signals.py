"""Stopping cleanly on SIGINT/SIGTERM: one flag, shared by the training loop and the sweeps.

By default SIGTERM kills Python without running `finally` blocks (exit 143, nothing saved). A handler that only
sets a flag is safe; saving inside the handler is not. The loop checks the flag between steps,
finishes the step, saves and exits 130/143. A second Ctrl-C exits at once.

Before that handler exists (while Python imports torch, reads the spec, loads data, builds the
net) `install_early` has the process end at once on either signal, exiting 130/143: it raises
`Interrupted`, so `finally` blocks and the run directory's clean-up still run. It is installed
first thing in `resnet` (cli.main, `python -m resnet_cli`), even where SIGINT came in ignored: a
background job of a non-interactive shell inherits SIGINT as SIG_IGN, and Python then never
installs its KeyboardInterrupt handler, so Ctrl-C (`kill -INT`) would be lost until the trainer's.
A StopFlag installed later saves this handler and puts it back when the trainer is done.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
import time
from typing import Any


class Interrupted(SystemExit):
    """A signal before (or after) a StopFlag was in place: unwind now and exit 128 + signum.

    A SystemExit, so nothing that catches Exception swallows it and Click does not turn it into
    "Aborted!" (exit 1), as it does a KeyboardInterrupt."""

    def __init__(self, signum: int):
        super().__init__(128 + signum)
        self.signum = signum


_EARLY: dict[str, int | None] = {"signum": None, "deferred": None}


def _early(signum, frame) -> None:
    if _EARLY["signum"] is not None:  # already unwinding
        if signum == signal.SIGINT:
            os._exit(128 + signum)  # a second Ctrl-C: out now, as in StopFlag
        return
    if _EARLY["deferred"] is not None:  # a second signal while the first waits for an import
        if signum == signal.SIGINT:
            os._exit(128 + signum)
        return
    if _in_import(frame):
        # Never raise inside an import: some packages' import code catches every exception (numpy's,
        # through scipy, then fails with an AttributeError). Raise once the import is done.
        _EARLY["deferred"] = signum
        threading.Thread(target=_redeliver, args=(signum,), name="signal-after-import", daemon=True).start()
        return
    _EARLY["signum"] = signum
    raise Interrupted(signum)


def _in_import(frame) -> bool:
    while frame is not None:
        if frame.f_code.co_filename.startswith("<frozen importlib"):
            return True
        frame = frame.f_back
    return False


def _redeliver(signum: int) -> None:
    """Send `signum` again as soon as the main thread is out of the import it was in (polled)."""
    main = threading.main_thread().ident
    while _in_import(sys._current_frames().get(main)):
        time.sleep(0.01)
    _EARLY["deferred"] = None
    os.kill(os.getpid(), signum)  # whatever handler is in place now gets it: ours, or a StopFlag


def install_early() -> None:
    """SIGINT and SIGTERM end the process with 130/143 from here on (see the module's note)."""
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, _early)


def exit_stopped(exc: Interrupted) -> None:
    """The CLI's last word on an `Interrupted`: one line on stderr, exit 130/143."""
    print(f"resnet: stopped by {signal.Signals(exc.signum).name}", file=sys.stderr)
    sys.exit(exc.code)


def pending(handler: Any) -> int | None:
    """The signal a StopFlag's handler has caught, if `handler` is one (None otherwise)."""
    return getattr(getattr(handler, "__self__", None), "signum", None) if callable(handler) else None


class StopFlag:
    def __init__(self) -> None:
        self.signum: int | None = None
        self._old: dict[int, Any] = {}

    def install(self) -> StopFlag:
        """Take over SIGINT/SIGTERM, and a signal the StopFlag it replaces caught but nobody acted
        on yet (an ablate worker's, between tasks): it is this flag's from the start."""
        for sig in (signal.SIGINT, signal.SIGTERM):
            self._old[sig] = signal.signal(sig, self._handle)
            if self.signum is None:
                self.signum = pending(self._old[sig])
        return self

    def restore(self) -> None:
        for sig, old in self._old.items():
            signal.signal(sig, old)
            # What this flag caught, the flag it hands back to learns: a sweep around a run stopped
            # by SIGTERM exits 143, not 130 (install's `pending` is the same hand-over the other way).
            owner = getattr(old, "__self__", None)
            if isinstance(owner, StopFlag) and owner.signum is None:
                owner.signum = self.signum
        self._old.clear()

    def __enter__(self) -> StopFlag:
        return self.install()

    def __exit__(self, *exc: Any) -> None:
        self.restore()

    def _handle(self, signum, frame) -> None:
        if self.signum is not None and signum == signal.SIGINT:
            os._exit(128 + signum)  # a second Ctrl-C: the user wants out now
        self.signum = signum
