"""What else ran on the machine while we measured (from /proc; empty figures where it is absent).

The cores, the load and the busy time are read as `run.threads: auto` reads them
(training/cpu_threads.py), so a warning here and a thread count there judge the same machine."""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

from ..training.cpu_threads import busy_seconds, our_cpus, usable_cores


class Contention:
    """CPU used by other processes during a measurement: the busy time of our cores from
    /proc/stat minus our own, plus the busiest long-lived other processes by name. Empty figures
    where /proc is absent. Our own is this process and its waited-for descendants (getrusage), not
    cpu_threads' live children: a measurement's child has ended, and been waited for, by `stop`."""

    def __init__(self) -> None:
        self.t0 = time.time()
        self.cpus = our_cpus()
        self.busy0 = busy_seconds(self.cpus)
        self.own0 = _own_seconds()
        self.procs0 = _proc_seconds()
        self.load0 = _loadavg()

    def stop(self) -> dict[str, Any]:
        wall = max(time.time() - self.t0, 1e-9)
        out: dict[str, Any] = {"wall_s": round(wall, 1), "cores": cores(), "loadavg_start": self.load0,
                               "loadavg_end": _loadavg()}
        busy = busy_seconds(self.cpus)
        if busy is not None and self.busy0 is not None:
            own = _own_seconds() - self.own0
            out["own_cores"] = round(own / wall, 2)
            out["other_cores"] = round(max(busy - self.busy0 - own, 0.0) / wall, 2)
        procs = _proc_seconds()
        me = os.getpid()
        others = []
        for pid, (comm, secs) in procs.items():
            if pid == me or pid not in self.procs0:
                continue
            used = secs - self.procs0[pid][1]
            if used / wall >= 0.05:
                others.append({"name": comm, "cores": round(used / wall, 2)})
        out["other_processes"] = sorted(others, key=lambda p: -p["cores"])[:8]
        return out


def cores() -> int:
    """The cores a measurement may use: the affinity mask capped by a cgroup quota."""
    return usable_cores()


def competes(threads: int | str, load_1min: float | None = None, contention: dict[str, Any] | None = None) -> str | None:
    """Why `threads` threads (0: torch's default, one per core) compete with other work for the
    cores, or None. Measured here: two OpenMP threads on two busy cores ran slower than one, since
    each spins waiting for a partner that has been descheduled (docs/bench.md). Judged from the
    1-minute load before measuring, or from the other processes' CPU use while measuring."""
    if threads == "auto":  # the rule itself takes the others' use into account (training/cpu_threads.py)
        return None
    n, total = threads or cores(), cores()
    if n <= 1:
        return None
    why = None
    if load_1min is not None and load_1min >= 1 and load_1min + n > total:
        why = f"1-minute load {load_1min:.2f} on {total} cores"
    other = (contention or {}).get("other_cores")
    if why is None and other is not None and other >= 0.5 and other + n > total:
        why = f"other processes used {other:.2f} of {total} cores while measuring"
    if why is None:
        return None
    return (f"other work competes for the cores ({why}): {n} threads then wait on each other and the rates "
            "understate this machine; rerun with --threads 1")


def _own_seconds() -> float:
    import resource

    s, c = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return s.ru_utime + s.ru_stime + c.ru_utime + c.ru_stime


def _proc_seconds() -> dict[int, tuple[str, float]]:
    out = {}
    tck = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
    for entry in Path("/proc").glob("[0-9]*") if Path("/proc").is_dir() else []:
        try:
            text = (entry / "stat").read_text()
        except OSError:
            continue
        # comm is in parentheses and may contain spaces: split after the last ')'.
        comm = text[text.find("(") + 1:text.rfind(")")]
        rest = text[text.rfind(")") + 2:].split()
        out[int(entry.name)] = (comm, (int(rest[11]) + int(rest[12])) / tck)
    return out


def _loadavg() -> list[float] | None:
    try:
        return [round(x, 2) for x in os.getloadavg()]
    except OSError:
        return None
