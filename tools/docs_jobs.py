"""Running one documented command for tools/docs_tables.py and keeping its output: the command's
stdout (JSON lines, or text) and a meta record of how it ran (wall and CPU time, machine, load,
commit), under runs/docs/json/, so a table can be rendered again without rerunning anything.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import platform
import resource
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from resnet_cli.training import cpu_threads

ROOT = Path(__file__).resolve().parent.parent
WORK = ROOT / "runs" / "docs"
JSON_DIR = WORK / "json"


@dataclass(frozen=True)
class Job:
    name: str
    argv: tuple[str, ...]                 # after `resnet`
    fresh: tuple[str, ...] = ()           # paths (relative to ROOT) removed first: these runs start from scratch
    json_lines: bool = True               # False: keep stdout as text (`--help`)


def machine() -> str:
    """CPU model and cores (and GPUs, where nvidia-smi lists any): what a reader needs to weigh a wall time."""
    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    text = f"{cpu}, {os.cpu_count()} cores"
    if shutil.which("nvidia-smi"):
        gpus = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True).stdout.strip().splitlines()
        if gpus:
            text += f", {len(gpus)} GPU(s): {gpus[0].split(' (')[0].split(': ', 1)[-1]}"
    return text


def threads_of(argv: tuple[str, ...]) -> str:
    """The thread count a job's runs used, as its command gave it: a run repeats bitwise only at the
    same count. Without --threads, "auto" (run.threads' default: the cores other processes leave
    free; a sweep splits them), or "varied" where the command varies it (bench --vary run.threads=...).
    Records written before run.threads auto existed say "default": torch's, every core."""
    if "--threads" in argv:
        return argv[argv.index("--threads") + 1]
    if any(str(a).startswith("run.threads=") for a in argv):
        return "varied"
    return "auto"


def _commit() -> str:
    """The commit measured; `+changes` when the working tree differed from it (outside docs/ and runs/)."""
    out = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True)
    dirty = subprocess.run(["git", "status", "--porcelain", "--", ".", ":!docs", ":!runs"], cwd=ROOT,
                           capture_output=True, text=True).stdout.strip()
    return (out.stdout.strip() or "unknown") + ("+changes" if dirty else "")


def other_cores(busy_before: float | None, busy_after: float | None, ours_s: float, wall_s: float) -> float | None:
    """Cores other work kept busy, on average, while a job ran: the machine's busy CPU time over the
    job (/proc/stat) less the job's own, over its wall time. What a wall time was measured beside."""
    if busy_before is None or busy_after is None or wall_s <= 0:
        return None
    return round(max(0.0, busy_after - busy_before - ours_s) / wall_s, 2)


def run_job(job: Job) -> bool:
    """Run one command, keep its stdout and a meta record; False (with the reason on stderr) if it failed."""
    for rel in job.fresh:
        shutil.rmtree(ROOT / rel, ignore_errors=True)
    JSON_DIR.mkdir(parents=True, exist_ok=True)
    cmd = [sys.executable, "-m", "resnet_cli", *job.argv]
    env = dict(os.environ, COLUMNS="100", NO_COLOR="1")
    print(f"docs: resnet {' '.join(job.argv)}", file=sys.stderr, flush=True)
    cpus = cpu_threads.our_cpus()
    before, busy_before = resource.getrusage(resource.RUSAGE_CHILDREN), cpu_threads.busy_seconds(cpus)
    start = time.perf_counter()
    proc = subprocess.run(cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE, text=True)
    wall = time.perf_counter() - start
    after, busy_after = resource.getrusage(resource.RUSAGE_CHILDREN), cpu_threads.busy_seconds(cpus)
    if proc.returncode != 0:
        print(f"docs: {job.name} failed (exit {proc.returncode}); its sections keep their old text", file=sys.stderr)
        return False
    suffix = ".jsonl" if job.json_lines else ".txt"
    (JSON_DIR / f"{job.name}{suffix}").write_text(proc.stdout, encoding="utf-8")
    meta = {"command": "resnet " + " ".join(job.argv), "wall_s": round(wall, 1), "threads": threads_of(job.argv),
            "cpu_user_s": round(after.ru_utime - before.ru_utime, 1), "machine": machine(), "commit": _commit(),
            "load_1min": round(os.getloadavg()[0], 1),
            "other_cores": other_cores(busy_before, busy_after, after.ru_utime + after.ru_stime
                                       - before.ru_utime - before.ru_stime, wall),
            "finished": dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M UTC")}
    (JSON_DIR / f"{job.name}.meta.json").write_text(json.dumps(meta, indent=1) + "\n", encoding="utf-8")
    return True
