"""A pause at a known training step or start-up phase, so signal and kill tests need no sleeps.

`RESNET_TEST_PAUSE=N:PATH`: after step N the loop creates PATH and waits, up to a minute, until
the test removes it; the test sends its signals meanwhile, so they land at step N every time.
When the stop flag is raised during the pause, PATH.signalled appears (signals of one kind do not
queue: a test sends a second one only after the first was handled).

`RESNET_TEST_PAUSE=PHASE:PATH` pauses the same way at a named start-up phase (`phase`): start
(signal handling installed, nothing imported yet), command (the arguments parsed, the
command about to run), spec (the spec validated), data (the data
loaded), rundir (the run directory made, the net not yet built).

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


def pause(stop) -> None:
    """Hold the loop (it has just finished step PAUSE_AT) until the test removes the marker."""
    marker = Path(_MARKER)
    signalled = marker.with_name(marker.name + ".signalled")
    marker.write_text(f"{os.getpid()}\n")
    deadline = time.monotonic() + 60
    while marker.exists() and time.monotonic() < deadline:
        if stop.signum is not None and not signalled.exists():
            signalled.write_text(f"{stop.signum}\n")
        time.sleep(0.01)  # signal handlers still run (PEP 475)


def phase(name: str) -> None:
    """Pause at start-up phase `name` (the module's note); signals land in the pause. Called a few
    times per process, never per step."""
    if not _AT or _AT != name:
        return
    marker = Path(_MARKER)
    marker.write_text(f"{os.getpid()}\n")
    deadline = time.monotonic() + 60
    while marker.exists() and time.monotonic() < deadline:
        time.sleep(0.01)  # signal handlers still run (PEP 475)
