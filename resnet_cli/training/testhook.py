"""A pause at a known training step or start-up phase, so signal and kill tests need no sleeps.

`RESNET_TEST_PAUSE=N:PATH`: after step N the loop creates PATH and waits, up to a minute, until
the test removes it; the test sends its signals meanwhile, so they land at step N every time.
When the stop flag is raised during the pause, PATH.signalled appears (signals of one kind do not
queue: a test sends a second one only after the first was handled).

`RESNET_TEST_PAUSE=PHASE:PATH` pauses the same way at a named start-up phase (`phase`): start
(signal handling installed, nothing imported yet), command (the arguments parsed, the
command about to run), spec (the spec validated, the run about to open), data (the data
loaded), rundir (the run directory made, the net not yet built). One wait loop (`_hold`) serves
both.

The calls in production code, one per point a test holds a child at, and no more: `__main__`
(start: before the commands are imported, where only the signal handlers can answer), cli.command
(command: the command's own error handling in place), session.open_run (spec, data, rundir: the
three stages of opening a run whose clean-up the tests check), the trainer's loop (a step: where
SIGKILL and resume bitwise are tested).

Why this stays in the package when every other test seam is a fixture: the tests that need it
(SIGKILL then bitwise resume, SIGTERM/SIGINT saves, a signal during start-up, a sweep's workers
outliving a SIGKILLed parent) hold a *child process*, often a sweep worker or a torchrun rank that
the test never starts itself, and nothing can be monkeypatched into those from outside. Timed
sleeps instead would race the child on a loaded machine. The variable is read once, at import:
unset, `PAUSE_AT` is None and the loop pays one comparison a step (`p.iteration == PAUSE_AT`),
no call and no environment lookup.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

_AT, _, _MARKER = os.environ.get("RESNET_TEST_PAUSE", "").partition(":")
PAUSE_AT: int | None = int(_AT) if _AT.isdigit() else None  # the step to hold at; None: never


def _hold(stop=None) -> None:
    """The one wait: create the marker, then wait (up to a minute) until the test removes it. With
    `stop`, a stop flag raised meanwhile is reported as PATH.signalled. Signal handlers still run
    during the sleeps (PEP 475)."""
    marker = Path(_MARKER)
    signalled = marker.with_name(marker.name + ".signalled")
    marker.write_text(f"{os.getpid()}\n")
    deadline = time.monotonic() + 60
    while marker.exists() and time.monotonic() < deadline:
        if stop is not None and stop.signum is not None and not signalled.exists():
            signalled.write_text(f"{stop.signum}\n")
        time.sleep(0.01)


def pause(stop) -> None:
    """Hold the loop (it has just finished step PAUSE_AT) until the test removes the marker."""
    _hold(stop)


def phase(name: str) -> None:
    """Pause at start-up phase `name` (the module's note); signals land in the pause. Called a few
    times per process, never per step."""
    if _AT and _AT == name:
        _hold()
