"""`make gpu-check`: the GPU checks of tests/gpu plus training-speed figures, in one summary file.

    python tests/gpu/check.py [--out gpu-check.json] [--budget 290]

Runs on any machine with CUDA, its own Python (3.10-3.13) and PyTorch (>= 2.4) included: only the
standard library here, and the checkout's `resnet_cli` is put first on PYTHONPATH for every child,
so the code under test is this checkout's whatever is installed. Steps, each in its own process:

  1. pytest tests/gpu (bf16 + channels_last, fp16 + GradScaler, compile + checkpointing,
     ResNet-1001 checkpointing memory, deterministic kill -9 resume, fp32 analyses against the CPU,
     NCCL with one process, and two where there are two GPUs);
  2. `resnet bench cifar/resnet110` eager and compiled, then `preact/resnet1001-cifar10` eager:
     images/s and the projected time of the papers' 64k-iteration schedule (He 2016a sec. 4.2;
     He 2016b sec. 4);
  3. `resnet bench --stack 1,8` on the quick studies' digits ResNet-110 and the CIFAR ResNet-20:
     images/s per seed of 8 seeds trained as one stacked net against separate runs;
  4. when the time budget allows, the compiled ResNet-1001.

The goals checked: ResNet-110's schedule under 10 minutes, ResNet-1001's under an hour on one GPU.
Without CUDA it writes a summary saying so and exits 0.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import time
import xml.etree.ElementTree as ET
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
GOALS_MIN = {"cifar/resnet110": 10.0, "preact/resnet1001-cifar10": 60.0}  # minutes for the 64k schedule
BENCH = [  # (spec, compile, seconds it may take at most)
    ("cifar/resnet110", False, 90), ("cifar/resnet110", True, 150),
    ("preact/resnet1001-cifar10", False, 120), ("preact/resnet1001-cifar10", True, 240),
]
STACK_AFTER = 3  # the stacked-seeds figures run after this many BENCH rows (before compiling ResNet-1001)
STACK = [  # (name, bench arguments, seconds it may take at most), as docs/bench.md's CPU table
    ("digits-110", ("cifar/resnet110", "--set", "data.dataset=digits", "--set", "model.widths=[8,16,32]",
                    "--batch-size", "64"), 90),
    ("cifar-20", ("cifar/resnet20", "--set", "data.dataset=synthetic"), 90),
]


def child_env() -> dict[str, str]:
    path = os.environ.get("PYTHONPATH")
    return {**os.environ, "PYTHONPATH": str(ROOT) + (os.pathsep + path if path else ""), "PYTHONUNBUFFERED": "1"}


def environment() -> dict:
    import torch  # the only non-stdlib import, and the machine's own

    env = {"python": platform.python_version(), "torch": torch.__version__, "cuda": torch.version.cuda,
           "cuda_available": torch.cuda.is_available(), "host": platform.node()}
    try:
        import torchvision

        env["torchvision"] = torchvision.__version__
    except ImportError:
        env["torchvision"] = None
    if torch.cuda.is_available():
        env["gpus"] = [{"name": torch.cuda.get_device_name(i), "capability": list(torch.cuda.get_device_capability(i)),
                        "memory_gb": round(torch.cuda.get_device_properties(i).total_memory / 2**30, 1)}
                       for i in range(torch.cuda.device_count())]
    return env


def run_tests(timeout: float, junit: Path) -> dict:
    t0 = time.time()
    cmd = [sys.executable, "-m", "pytest", str(ROOT / "tests" / "gpu"), "-q", "-p", "no:cacheprovider",
           f"--junitxml={junit}", "-o", "addopts="]
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, env=child_env(), cwd=ROOT, timeout=timeout)
    except subprocess.TimeoutExpired:
        return {"status": "timed out", "timeout_s": timeout}
    out = {"status": "passed" if p.returncode == 0 else "failed", "exit_code": p.returncode,
           "wall_s": round(time.time() - t0, 1), "tests": {}}
    if junit.exists():
        for case in ET.parse(junit).getroot().iter("testcase"):
            outcome, detail = "passed", None
            for kind in ("failure", "error", "skipped"):
                node = case.find(kind)
                if node is not None:
                    outcome, detail = {"failure": "failed", "error": "error", "skipped": "skipped"}[kind], \
                        (node.get("message") or "")[:500]
            out["tests"][case.get("name")] = {"outcome": outcome, "time_s": float(case.get("time", 0)),
                                              **({"detail": detail} if detail else {})}
    if p.returncode:
        out["output_tail"] = p.stdout[-4000:]
    return out


def run_bench(spec: str, compiled: bool, timeout: float, steps: int = 20, extra: tuple[str, ...] = ()) -> dict:
    cmd = [sys.executable, "-m", "resnet_cli", "bench", spec, "--json", "--no-baseline", "--rounds", "1",
           "--steps", str(steps), "--warmup", "5", "--set", f"train.compile={'true' if compiled else 'false'}", *extra]
    t0 = time.time()
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, env=child_env(), cwd=ROOT, timeout=timeout)
    except subprocess.TimeoutExpired:
        return {"spec": spec, "compile": compiled, "status": f"timed out after {timeout:.0f} s"}
    rows = [json.loads(ln) for ln in p.stdout.splitlines() if ln.startswith("{")]
    rows = [r for r in rows if r.get("event") == "bench"]
    if p.returncode or not rows:
        return {"spec": spec, "compile": compiled, "status": f"failed (exit {p.returncode})",
                "stderr_tail": p.stderr[-2000:]}
    r = rows[0]
    minutes = r["projected_schedule_h"] * 60
    goal = GOALS_MIN.get(spec)
    return {"spec": spec, "compile": compiled, "status": "ok", "images_per_s": round(r["images_per_s"], 1),
            "step_time_ms": round(1000 * r["step_time_s"], 2), "batch_size": r["batch_size"],
            "schedule_iters": r["schedule_iters"], "projected_schedule_min": round(minutes, 1),
            "goal_min": goal, "meets_goal": None if goal is None else minutes < goal,
            "compile_s": r.get("compile_s"), "peak_memory_mb": round(r["peak_memory_mb"]),
            "runtime": r.get("runtime"), "wall_s": round(time.time() - t0, 1)}


def run_stack_bench(name: str, args: tuple[str, ...], timeout: float) -> dict:
    """8 seeds as one stacked net against separate runs: images/s per seed and the ratio."""
    cmd = [sys.executable, "-m", "resnet_cli", "bench", *args, "--stack", "1,8", "--rounds", "1", "--steps", "20",
           "--warmup", "5", "--json"]
    t0 = time.time()
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, env=child_env(), cwd=ROOT, timeout=timeout)
    except subprocess.TimeoutExpired:
        return {"spec": name, "stack": 8, "status": f"timed out after {timeout:.0f} s"}
    rows = [json.loads(ln) for ln in p.stdout.splitlines() if ln.startswith("{")]
    rows = {r["members"]: r for r in rows if r.get("event") == "stack"}
    if p.returncode or 8 not in rows:
        return {"spec": name, "stack": 8, "status": f"failed (exit {p.returncode})", "stderr_tail": p.stderr[-2000:]}
    return {"spec": name, "stack": 8, "status": "ok", "device": rows[8]["device"],
            **{f"{key}_k{k}": round(rows[k][key], 1 if key != "ratio" else 2) for k in rows
               for key in ("separate_images_per_s_per_seed", "stacked_images_per_s_per_seed", "ratio")},
            "wall_s": round(time.time() - t0, 1)}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default="gpu-check.json", help="the summary file (JSON)")
    ap.add_argument("--budget", type=float, default=290.0, help="seconds for the whole check (default 290)")
    args = ap.parse_args(argv)
    t0 = time.time()
    summary: dict = {"check": "resnet gpu-check", "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                     "environment": environment()}
    out = Path(args.out)

    def write() -> None:
        summary["wall_s"] = round(time.time() - t0, 1)
        out.write_text(json.dumps(summary, indent=2) + "\n", encoding="utf-8")

    if not summary["environment"]["cuda_available"]:
        summary["result"] = "skipped: no CUDA device on this machine"
        write()
        print(f"gpu-check: no CUDA device here; nothing run ({out})", file=sys.stderr)
        return 0
    summary["tests"] = run_tests(timeout=max(60.0, args.budget * 0.5), junit=out.with_suffix(".junit.xml"))
    write()
    summary["bench"] = []
    for i, (spec, compiled, limit) in enumerate(BENCH):
        if i == STACK_AFTER:
            stack_bench(summary, args.budget - (time.time() - t0))
            write()
        left = args.budget - (time.time() - t0)
        if left < 30:
            summary["bench"].append({"spec": spec, "compile": compiled, "status": "not run: time budget spent"})
            continue
        row = run_bench(spec, compiled, timeout=min(limit, left))
        summary["bench"].append(row)
        print(f"gpu-check: {spec} compile={compiled}: " + (f"{row['images_per_s']:,.0f} img/s, 64k schedule "
              f"{row['projected_schedule_min']:.1f} min" if row["status"] == "ok" else row["status"]), file=sys.stderr)
        write()
    if "stack" not in summary:
        stack_bench(summary, args.budget - (time.time() - t0))
    ok_rows = [r for r in summary["bench"] if r["status"] == "ok"]
    summary["goals"] = {spec: {"goal_min": goal, "best_min": min((r["projected_schedule_min"] for r in ok_rows
                                                                    if r["spec"] == spec), default=None)}
                        for spec, goal in GOALS_MIN.items()}
    # A run the budget did not reach (compiling ResNet-1001 takes minutes) is incomplete, not failed:
    # `--budget 900` gives it the time.
    runs = summary["bench"] + summary["stack"]
    failed = [r for r in runs if r["status"].startswith("failed")]
    summary["incomplete"] = [f"{r['spec']} " + (f"compile={r['compile']}" if "compile" in r else "--stack 8")
                             + f": {r['status']}" for r in runs if r["status"] != "ok" and r not in failed]
    passed = summary["tests"].get("status") == "passed" and not failed
    summary["result"] = "passed" if passed else "failed"
    write()
    print(f"gpu-check: {summary['result']}: tests {summary['tests'].get('status')}, "
          f"{len(ok_rows)}/{len(BENCH)} bench runs ({len(summary['incomplete'])} not reached); summary in {out}",
          file=sys.stderr)
    return 0 if passed else 1


def stack_bench(summary: dict, left: float) -> None:
    summary["stack"] = []
    for name, args, limit in STACK:
        if left < 30:
            summary["stack"].append({"spec": name, "stack": 8, "status": "not run: time budget spent"})
            continue
        t0 = time.time()
        row = run_stack_bench(name, args, timeout=min(limit, left))
        left -= time.time() - t0
        summary["stack"].append(row)
        print(f"gpu-check: {name} --stack 8: " + (f"{row['stacked_images_per_s_per_seed_k8']:,.0f} img/s per seed "
              f"stacked, {row['separate_images_per_s_per_seed_k8']:,.0f} separate ({row['ratio_k8']:.2f}x)"
              if row["status"] == "ok" else row["status"]), file=sys.stderr)


if __name__ == "__main__":
    sys.exit(main())
