"""What a command run in the pytest process may change for everything after it, read independently
of the product's own restore code (which is what this checks).

Tests invoke the CLI in-process through Typer's CliRunner. A command that installs a signal
handler, sets a parent-death signal, leaves a thread running, changes torch's thread count or
draws from a global random generator changes every test that runs after it in the same process:
a leftover SIGTERM handler or worker thread turns a later test's failure into a dead test process.
`snapshot()` reads that state; `leaks(before, after)` names what differs.
"""

from __future__ import annotations

import ctypes
import os
import random
import signal
import sys
import threading
import time

PR_GET_PDEATHSIG = 2  # linux/prctl.h

# SIGKILL and SIGSTOP cannot be caught; everything else Python can read a handler for.
_SIGNALS = sorted(s for s in signal.valid_signals() if s not in (signal.SIGKILL, signal.SIGSTOP))


def _pdeathsig() -> int | None:
    if not sys.platform.startswith("linux"):
        return None
    value = ctypes.c_int(0)
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(PR_GET_PDEATHSIG, ctypes.byref(value), 0, 0, 0) != 0:
        return None
    return value.value


def _signal_name(s: int) -> str:
    try:
        return signal.Signals(s).name
    except ValueError:  # the real-time signals have numbers only
        return f"signal {s}"


def _handler_name(h) -> str:
    if h in (signal.SIG_DFL, signal.SIG_IGN, None):
        return str(h)
    return getattr(h, "__qualname__", repr(h)) + f"@{id(h):x}"


def snapshot() -> dict[str, object]:
    state: dict[str, object] = {
        "signal handlers": {_signal_name(s): _handler_name(signal.getsignal(s)) for s in _SIGNALS},
        "parent-death signal (prctl)": _pdeathsig(),
        "threads": sorted(f"{t.name}#{t.ident}" for t in threading.enumerate()),
        "environment": dict(os.environ),
        "working directory": os.getcwd(),
        "random (global generator)": random.getstate(),
    }
    if "numpy" in sys.modules:
        import numpy as np

        kind, keys, pos, has_gauss, cached = np.random.get_state()
        state["numpy.random (global generator)"] = (kind, keys.tobytes(), pos, has_gauss, cached)
    if "torch" in sys.modules:
        import torch

        state["torch threads"] = torch.get_num_threads()
        state["torch inter-op threads"] = torch.get_num_interop_threads()
        state["torch (global generator)"] = torch.random.get_rng_state().numpy().tobytes()
        state["torch deterministic algorithms"] = torch.are_deterministic_algorithms_enabled()
        state["torch cudnn.benchmark"] = torch.backends.cudnn.benchmark
        state["torch default dtype"] = str(torch.get_default_dtype())
        # The fp32_precision API, not get_float32_matmul_precision(): that one raises once anything
        # in the process has used the new API (as the product's TF32 switch does).
        for name in ("cuda.matmul", "cudnn.conv", "mkldnn"):
            backend = torch.backends
            for part in name.split("."):
                backend = getattr(backend, part, None)
            state[f"torch {name} fp32 precision"] = getattr(backend, "fp32_precision", None)
    return state


def _settle_threads(before: dict[str, object], timeout_s: float = 5.0) -> None:
    """Threads a command started may still be on their last line when it returns (a pool's
    management thread joining): give them a moment before calling them leaked."""
    known = set(before["threads"])  # type: ignore[arg-type]
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        extra = [t for t in threading.enumerate() if f"{t.name}#{t.ident}" not in known]
        if not extra:
            return
        for t in extra:
            t.join(timeout=max(0.0, deadline - time.monotonic()) / len(extra))


def leaks(before: dict[str, object], after: dict[str, object] | None = None) -> list[str]:
    """One line per piece of process state that differs between the two snapshots."""
    if after is None:
        _settle_threads(before)
        after = snapshot()
    out = []
    for key, old in before.items():
        new = after.get(key)
        if new == old:
            continue
        if isinstance(old, dict) and isinstance(new, dict):
            changed = sorted(k for k in old.keys() | new.keys() if old.get(k) != new.get(k))
            out.append(f"{key}: " + ", ".join(f"{k} {old.get(k)!s:.40} -> {new.get(k)!s:.40}" for k in changed))
        elif key == "threads":
            started = sorted(set(new) - set(old))  # type: ignore[arg-type]
            out.append(f"threads left running: {', '.join(started)}" if started else f"threads: {old} -> {new}")
        elif "generator" in key:
            out.append(f"{key}: state advanced (a command drew from it without restoring it)")
        else:
            out.append(f"{key}: {old} -> {new}")
    return out
