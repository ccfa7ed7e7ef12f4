"""A pause at a known training step, so signal and kill tests need no sleeps (tests only).

`RESNET_TEST_PAUSE=N:PATH`: after step N the loop creates PATH and waits, up to a minute, until
the test removes it; the test sends its signals meanwhile, so they land at step N every time.
When the stop flag is raised during the pause, PATH.signalled appears (signals of one kind do not
queue: a test sends a second one only after the first was handled). Unset, as always outside
tests, it costs one comparison a step.

`RESNET_TEST_PAUSE=PHASE:PATH` pauses the same way at a named start-up phase (`phase`): start
(signal handling installed, nothing imported yet), command (the arguments parsed, the
command about to run), spec (the spec validated), data (the data
loaded), rundir (the run directory made, the net not yet built).
"""

from __future__ import annotations

import os
import time
from pathlib import Path

_AT, _, _MARKER = os.environ.get("RESNET_TEST_PAUSE", "").partition(":")
PAUSE_AT = int(_AT) if _AT.isdigit() else -1


def pause(iteration: int, stop) -> None:
    if iteration != PAUSE_AT:
        return
    marker = Path(_MARKER)
    signalled = marker.with_name(marker.name + ".signalled")
    marker.write_text(f"{os.getpid()}\n")
    deadline = time.monotonic() + 60
    while marker.exists() and time.monotonic() < deadline:
        if stop.signum is not None and not signalled.exists():
            signalled.write_text(f"{stop.signum}\n")
        time.sleep(0.01)  # signal handlers still run (PEP 475)


def phase(name: str) -> None:
    """Pause at start-up phase `name` (the module's note); signals land in the pause."""
    if _AT != name:
        return
    marker = Path(_MARKER)
    marker.write_text(f"{os.getpid()}\n")
    deadline = time.monotonic() + 60
    while marker.exists() and time.monotonic() < deadline:
        time.sleep(0.01)  # signal handlers still run (PEP 475)
