"""`run.threads: auto` (the default): CPU threads for the machine as it is, not as it was bought.

Why a rule and not torch's default (one thread per core): OpenMP threads wait for each other at the
end of every parallel region, spinning on the core. Where another process holds one of those cores,
the partner a thread waits for is descheduled, and two threads on two shared cores ran 25-38
images/s against 217-232 for one (docs/bench.md, `resnet bench`). A quiet machine is the other
way round: every core pays.

The rule (`choose`, a pure function of what was measured):
  cores  the CPUs this process may run on (its affinity mask), capped by a cgroup CPU quota;
  busy   how many of those cores other processes used: their CPU time over a short window at
         start, over the last epoch later (the 1-minute load where /proc/stat is absent);
  threads = floor(cores - busy + QUIET), at least 1 and at most cores: others' use below QUIET of a
         core (a shell, a daemon) still counts as a quiet machine;
  passive: where others use QUIET or more, OpenMP's waits sleep instead of spinning
         (OMP_WAIT_POLICY=PASSIVE); the OpenMP runtime reads it once, when torch is first
         imported, so it is set only in a process that has not imported torch yet.
OMP_NUM_THREADS, where set, is the user's (or a sweep worker's) pin and is obeyed: no
measurement, no change at epochs.

No torch at import: the choice is made before torch (and its OpenMP runtime) loads.
"""

from __future__ import annotations

import dataclasses
import math
import os
import sys
import time
from dataclasses import dataclass
from pathlib import Path

QUIET = 0.3  # cores' worth of others' CPU use that still counts as a quiet machine
WINDOW_S = 0.25  # the start-up measurement of the others' use


@dataclass(frozen=True)
class Machine:
    """What `choose` decides from: measured, or made by hand in a test."""

    cores: int  # CPUs this process may use (affinity mask, capped by a cgroup quota)
    busy: float | None  # cores' worth of CPU the other processes used on them; None: not measured
    load_1min: float | None = None  # the fallback where busy is None
    pinned: int | None = None  # OMP_NUM_THREADS, when set


@dataclass(frozen=True)
class Choice:
    threads: int
    passive: bool  # OpenMP waits sleep instead of spinning
    cores: int
    busy: float | None  # what the choice took as taken (others' use, or the load)
    why: str  # what was measured and the count, e.g. "2 cores, 1.8 busy: 1 thread"
    pinned: bool = False  # OMP_NUM_THREADS decided

    @property
    def line(self) -> str:
        return f"run.threads auto: {self.why}" + (", OpenMP waits passive" if self.passive else "")

    def record(self) -> dict:
        return {"threads": self.threads, "cores": self.cores, "busy": None if self.busy is None else round(self.busy, 2),
                "passive_wait": self.passive, "pinned": self.pinned, "why": self.line}


def choose(m: Machine) -> Choice:
    if m.pinned:
        return Choice(m.pinned, False, m.cores, None, f"OMP_NUM_THREADS={m.pinned}: {_n(m.pinned)}", pinned=True)
    taken = m.busy if m.busy is not None else m.load_1min
    if taken is None:  # nothing to measure with: torch's own default, every core
        return Choice(m.cores, False, m.cores, None, f"{m.cores} cores, their use unknown: {_n(m.cores)}")
    threads = max(1, min(m.cores, math.floor(m.cores - taken + QUIET)))
    what = "busy" if m.busy is not None else "1-minute load"
    passive = taken >= QUIET and m.cores > 1  # what should be; _with_policy says what can be
    return Choice(threads, passive, m.cores, taken, f"{m.cores} cores, {taken:.1f} {what}: {_n(threads)}")


def _n(threads: int) -> str:
    return f"{threads} thread" + ("s" if threads != 1 else "")


# --- measuring the machine -------------------------------------------------------------------

def our_cpus() -> set[int]:
    """The CPUs this process may run on: its affinity mask (every CPU where the platform has none)."""
    try:
        return os.sched_getaffinity(0)
    except AttributeError:  # not Linux
        return set(range(os.cpu_count() or 1))


def usable_cores() -> int:
    """CPUs in this process's affinity mask, capped by its cgroup's CPU quota (a container's
    `--cpus 2` on a 16-core host is 2)."""
    cores = len(our_cpus())
    quota = _cgroup_quota()
    return max(1, min(cores, math.floor(quota))) if quota else cores


def _cgroup_quota() -> float | None:
    """cgroup v2's cpu.max ("150000 100000": 1.5 cores) or v1's cfs quota/period; None: no quota."""
    try:
        for line in Path("/proc/self/cgroup").read_text().splitlines():
            if line.startswith("0::"):
                for base in (Path("/sys/fs/cgroup") / line[3:].lstrip("/"), Path("/sys/fs/cgroup")):
                    if (base / "cpu.max").exists():
                        quota, period = (base / "cpu.max").read_text().split()[:2]
                        return None if quota == "max" else int(quota) / int(period)
        quota = int(Path("/sys/fs/cgroup/cpu/cpu.cfs_quota_us").read_text())
        period = int(Path("/sys/fs/cgroup/cpu/cpu.cfs_period_us").read_text())
        return quota / period if quota > 0 else None
    except (OSError, ValueError):
        return None


def busy_seconds(cpus: set[int]) -> float | None:
    """Seconds of non-idle time on these CPUs since boot (/proc/stat's per-CPU lines; None without it)."""
    try:
        lines = Path("/proc/stat").read_text().splitlines()
    except OSError:
        return None
    total = 0
    for line in lines[1:]:
        if not line.startswith("cpu"):
            break
        name, *fields = line.split()
        if int(name[3:]) in cpus:
            ticks = [int(x) for x in fields[:8]]
            total += sum(ticks) - ticks[3] - ticks[4]  # less idle and iowait
    return total / os.sysconf("SC_CLK_TCK")


def own_cpu_seconds() -> float:
    """CPU seconds of this process (all its threads) and its live children (DataLoader workers)."""
    total = time.process_time()
    tck = os.sysconf("SC_CLK_TCK")
    for children in Path(f"/proc/{os.getpid()}/task").glob("*/children"):
        try:
            pids = children.read_text().split()
        except OSError:
            continue
        for pid in pids:
            try:
                text = Path(f"/proc/{pid}/stat").read_text()
            except OSError:
                continue
            rest = text[text.rfind(")") + 2:].split()
            total += (int(rest[11]) + int(rest[12])) / tck
    return total


class Others:
    """The other processes' CPU use on our cores from now until `busy()` is asked: the machine's
    busy time on those CPUs less our own."""

    def __init__(self) -> None:
        self.cpus = our_cpus()
        self.t0, self.busy0, self.own0 = time.monotonic(), busy_seconds(self.cpus), own_cpu_seconds()

    def busy(self) -> float | None:
        wall = time.monotonic() - self.t0
        ticks = busy_seconds(self.cpus)
        if ticks is None or self.busy0 is None or wall <= 0:
            return None
        return max(0.0, (ticks - self.busy0 - (own_cpu_seconds() - self.own0)) / wall)


def _pinned() -> int | None:
    try:
        n = int(os.environ.get("OMP_NUM_THREADS", ""))
    except ValueError:
        return None
    return n if n > 0 else None


def load_1min() -> float | None:
    """The machine's 1-minute load average (None where the platform has none)."""
    try:
        return os.getloadavg()[0]
    except OSError:
        return None


def measure(window_s: float = WINDOW_S, obey_pin: bool = True) -> Machine:
    """The machine now: others' use over `window_s` (nothing measured where OMP_NUM_THREADS pins)."""
    pinned = _pinned() if obey_pin else None
    if pinned:
        return Machine(usable_cores(), None, pinned=pinned)
    others = Others()
    time.sleep(window_s)
    return Machine(usable_cores(), others.busy(), load_1min())


_EARLY: Choice | None = None  # chosen by `early` before torch loaded, for this process's first run


def early(setting: int | str) -> None:
    """Choose now, before torch and its OpenMP runtime load (the train command calls this first),
    so that a passive wait can still take effect; the first run of the process then uses it."""
    global _EARLY
    if setting == "auto" and "torch" not in sys.modules:
        _EARLY = _with_policy(choose(measure()))


def for_run(setting: int | str) -> Choice | None:
    """For a run whose `run.threads` is `setting`: the automatic choice, None where the count is explicit."""
    global _EARLY
    if setting != "auto":
        return None
    choice, _EARLY = _EARLY or _with_policy(choose(measure())), None
    return choice


def count(setting: int | str) -> int:
    """The thread count for `setting` (0: torch's default, left alone by the callers)."""
    choice = for_run(setting)
    return choice.threads if choice else int(setting)


def _with_policy(choice: Choice) -> Choice:
    """The choice as it takes effect: OpenMP's waits are passive only where OMP_WAIT_POLICY says so
    before torch loads (set here where it is still unset and torch not loaded)."""
    if choice.passive and "torch" not in sys.modules and "OMP_WAIT_POLICY" not in os.environ:
        os.environ["OMP_WAIT_POLICY"] = "PASSIVE"
    passive = os.environ.get("OMP_WAIT_POLICY", "").upper() == "PASSIVE"
    return dataclasses.replace(choice, passive=passive)


def worth_saying(choice: Choice | None) -> bool:
    """The line is printed where the choice differs from torch's default (every core, spinning
    waits), and not for a count pinned by OMP_NUM_THREADS."""
    return choice is not None and not choice.pinned and (choice.threads != choice.cores or choice.passive)


class EpochWatch:
    """Re-chooses at each epoch's end from the others' use during it (the load changes in a
    week-long run); a pinned count is never changed."""

    def __init__(self, choice: Choice) -> None:
        self.choice = choice
        self.others = None if choice.pinned else Others()

    def next(self) -> Choice | None:
        """The new choice where the count should change, else None."""
        if self.others is None:
            return None
        busy = self.others.busy()
        self.others = Others()
        new = choose(Machine(self.choice.cores, busy, load_1min()))
        if new.threads == self.choice.threads:
            return None
        # The wait policy stays what it was when torch loaded.
        self.choice = dataclasses.replace(new, passive=self.choice.passive)
        return self.choice

    def apply(self, say, epoch: int) -> None:
        """At an epoch's end: set the next epoch's count where it changes, and say so."""
        new = self.next()
        if new is not None:
            import torch  # by now loaded: this runs between epochs

            torch.set_num_threads(new.threads)
            say(f"{new.line} from epoch {epoch + 1}")
