"""`resnet bench --busy`: each thread setting on the machine as it is, then with every core kept busy.

A shared workstation or a cluster node with other jobs is where the default thread count matters
(training/cpu_threads.py): torch's default, one thread per core, spins waiting for partners that
other processes have descheduled. The busy half starts one spinning process per usable core (not
children of the measured runs: their CPU is the others' use the rule should see) and stops them
after; both halves run the same variants in the same invocation, so the rates sit side by side.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
from typing import Any, Iterator

from ..training import cpu_threads
from .throughput import bench

SPIN = "while True:\n    pass\n"


@contextlib.contextmanager
def cores_kept_busy(n: int) -> Iterator[None]:
    """`n` processes that spin until the block ends (each in its own session, ended with SIGKILL)."""
    procs = [subprocess.Popen([sys.executable, "-c", SPIN], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                              start_new_session=True) for _ in range(n)]
    try:
        yield
    finally:
        for p in procs:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(p.pid, signal.SIGKILL)
            p.wait()


def bench_busy(spec, variants: list[dict[str, Any]], *, steps: int, warmup: int, rounds: int, name: str,
               progress) -> list[dict[str, Any]]:
    """The variants quiet, then busy: one row per (condition, variant), each with `load` set."""
    rows = []
    cores = cpu_threads.usable_cores()
    for load in ("quiet", "busy"):
        progress(f"{load}: " + ("the machine as it is" if load == "quiet" else f"{cores} spinning processes, one per core"))
        with cores_kept_busy(cores) if load == "busy" else contextlib.nullcontext():
            part = bench(spec, steps=steps, warmup=warmup, rounds=rounds, variants=variants, name=name,
                         progress=progress, own_data=True)
        for row in part:
            row["load"] = load
            row["label"] = f"{row['label']}, {'cores busy' if load == 'busy' else 'quiet'}"
        rows += part
    return rows


def ratios(rows: list[dict[str, Any]]) -> list[str]:
    """Per condition, `auto` against every other variant: the figures the issue's targets are read from."""
    notes = []
    for load in ("quiet", "busy"):
        part = [r for r in rows if r.get("load") == load]
        auto = next((r for r in part if r["variant"].get("run.threads") == "auto"), None)
        if auto is None:
            continue
        others = [f"{auto['images_per_s'] / r['images_per_s']:.2f}x run.threads={r['variant'].get('run.threads')}"
                  for r in part if r is not auto and r["images_per_s"]]
        notes.append(f"{load}: auto at {_threads(auto)} ran " + ", ".join(others))
    return notes


def _threads(row: dict[str, Any]) -> str:
    n = (row.get("runtime") or {}).get("threads")
    return "?" if n is None else f"{n} thread" + ("s" if n != 1 else "")
