"""The worker engine under `resnet ablate --jobs N`: GPUs handed out from the inherited
CUDA_VISIBLE_DEVICES, workers that persist across runs, a failing or dying run isolated to itself,
the same test errors as in-process runs, and SIGTERM / Ctrl-C saving every running run."""

import json
import os
import signal
import time

import pytest
import torch
from typer.testing import CliRunner

from resnet_cli.cli import app
from resnet_cli.sweep import workers
from resnet_cli.sweep.workers import Share
from resnet_cli.training.signals import StopFlag

from processes import spawn

# ---------------------------------------------------------------------------------------------
# Which GPU and how many threads each worker gets (pure functions)


@pytest.mark.parametrize("visible, gpus, jobs, expected", [
    # A scheduler gave this job GPUs 4 and 6: the workers get those, never the machine's 0 and 1.
    ("4,6", 2, 4, ["4", "6", "4", "6"]),
    (" 4, 6 ", 2, 2, ["4", "6"]),
    # Nothing inherited: torch's indices are the machine's.
    (None, 2, 3, ["0", "1", "0"]),
    # UUIDs and MIG names are entries too, passed on verbatim.
    ("GPU-8f2a,GPU-11c0,GPU-77de", 3, 2, ["GPU-8f2a", "GPU-11c0"]),
    ("MIG-5b1e", 1, 2, ["MIG-5b1e", "MIG-5b1e"]),
    # CUDA ignores everything from the first invalid entry on; torch then counts 2 devices.
    ("1,3,-1,2", 2, 3, ["1", "3", "1"]),
    # No GPU: leave the variable alone.
    (None, 0, 2, [None, None]),
    ("", 0, 1, [None]),
])
def test_each_worker_gets_an_entry_of_the_inherited_device_list(visible, gpus, jobs, expected):
    assert [s.cuda_visible for s in workers.shares(jobs, 2, gpus, visible)] == expected


@pytest.mark.parametrize("jobs, cores, threads", [(2, 2, 1), (4, 2, 1), (2, 16, 8), (3, 16, 5), (1, 6, 6)])
def test_cores_are_split_between_workers(jobs, cores, threads):
    assert [s.threads for s in workers.shares(jobs, cores, 0, None)] == [threads] * jobs


# ---------------------------------------------------------------------------------------------
# The engine with stand-in tasks (module-level, so a spawned worker can import them)


def stand_in(kind: str) -> int:
    if kind == "raise":
        raise ValueError("a planted failure")
    if kind == "die":
        os._exit(9)  # as the kernel's OOM killer would end it: no exception, no result
    if kind == "signal me":
        os.kill(os.getpid(), signal.SIGTERM)  # someone signals this worker alone, not the sweep
    return os.getpid()


def run_stand_ins(items, jobs):
    started, done = [], []
    workers.run_queue(items, stand_in, [Share(1)] * jobs, StopFlag(), on_start=started.append,
                      on_done=lambda item, result: done.append((item, result)))
    return started, done


@pytest.mark.slow
def test_workers_persist_across_tasks():
    items = [f"run {i}" for i in range(6)]
    started, done = run_stand_ins(items, jobs=2)
    assert started == items  # handed out in the caller's order (longest runs first)
    pids = {result.result for _, result in done}
    assert len(done) == 6 and all(r.error is None for _, r in done)
    assert len(pids) == 2 and os.getpid() not in pids  # two processes served six tasks


@pytest.mark.slow
def test_a_failing_task_fails_alone_and_a_dead_worker_is_replaced():
    started, done = run_stand_ins(["ok", "raise", "ok", "die", "ok"], jobs=1)
    assert started == ["ok", "raise", "ok", "die", "ok"]
    assert [item for item, _ in done] == ["ok", "raise", "ok", "die", "ok"]
    (_, first), (_, raised), (_, second), (_, died), (_, third) = done
    assert "ValueError: a planted failure" in raised.error and not raised.died
    assert first.result == second.result  # the worker whose task raised went on
    assert died.died and died.error
    assert third.error is None and third.result not in (second.result, os.getpid())  # a fresh worker


@pytest.mark.slow
def test_a_worker_signalled_alone_hands_its_next_task_to_a_fresh_one():
    started, done = run_stand_ins(["signal me", "ok"], jobs=1)
    assert started == ["signal me", "ok", "ok"]  # the first worker declined it; the second ran it
    assert [item for item, _ in done] == ["signal me", "ok"]
    (_, signalled), (_, after) = done
    assert after.started and after.error is None and after.result != signalled.result


# ---------------------------------------------------------------------------------------------
# Real sweeps

TINY = """
title: engine study
spec:
  model: {family: digits, depth: 4, widths: [4]}
  data: {dataset: digits, train_subset: 128, test_subset: 60}
  optim: {epochs: EPOCHS, batch_size: 64, warmup_iters: 0, milestones: []}
  train: {checkpoint_every: 0}
seeds: SEEDS
rows:
  - label: identity
  - label: plain
    overrides: {model.shortcut.kind: none}
  - label: scaled
    overrides: {model.shortcut.kind: scale, model.shortcut.shortcut_scale: 0.5}
"""


def study(path, epochs, seeds):
    path.write_text(TINY.replace("EPOCHS", str(epochs)).replace("SEEDS", str(seeds)))
    return str(path)


@pytest.mark.slow
def test_workers_train_the_same_runs_as_one_process(in_tmp):
    path = study(in_tmp / "s.yaml", 1, [0, 1])
    rows = {}
    for jobs in (1, 2):
        r = CliRunner().invoke(app, ["ablate", path, "--out", f"j{jobs}", "--jobs", str(jobs), "--json"])
        assert r.exit_code == 0, r.stderr
        rows[jobs] = [x for line in r.stdout.splitlines() if (x := json.loads(line))["event"] == "row"]
    # Bitwise the same test errors: every run trained alike whichever worker ran it, after whichever run.
    assert [x["test_errors"] for x in rows[2]] == [x["test_errors"] for x in rows[1]]
    logs = sorted((in_tmp / "j2").glob("*/ablate.log"))
    assert len(logs) == 6
    pids = {log.read_text().split("worker process ")[1].split()[0] for log in logs}
    assert len(pids) <= 2 and str(os.getpid()) not in pids


@pytest.mark.slow
@pytest.mark.parametrize("how", ["SIGTERM to the sweep", "Ctrl-C to its process group"])
def test_a_signal_saves_every_running_run(in_tmp, how):
    # Three long runs on two workers: two are running when the signal comes, the third never starts.
    path = study(in_tmp / "long.yaml", 5000, [0])
    proc = spawn("ablate", path, "--out", "res", "--jobs", "2", "--json", cwd=in_tmp, text=False,
                 start_new_session=True)  # its own group: what a terminal's Ctrl-C reaches
    running = [in_tmp / "res" / name for name in ("01-identity-s0", "02-plain-s0")]
    try:
        deadline = time.monotonic() + 120
        while not all((run / "metrics.jsonl").is_file() and (run / "metrics.jsonl").stat().st_size
                      for run in running):
            assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()
            time.sleep(0.2)
        if how.startswith("SIGTERM"):
            proc.send_signal(signal.SIGTERM)
        else:
            os.killpg(proc.pid, signal.SIGINT)
        out, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    assert proc.returncode == (143 if how.startswith("SIGTERM") else 130), err.decode()
    assert b"interrupted; to resume, rerun: resnet ablate" in err  # the exact command, --out named
    for run in running:
        summary = json.loads((run / "summary.json").read_text())
        assert summary["status"] == "interrupted" and (run / "checkpoint.pt").is_file(), run
        assert summary["iterations"] < 10000
    assert not (in_tmp / "res" / "03-scaled-s0").exists()
    assert all("Traceback" not in (run / "ablate.log").read_text() for run in running)


@pytest.mark.slow
@pytest.mark.skipif(torch.cuda.is_available(), reason="needs a machine without CUDA: the runs ask for a GPU")
def test_a_run_that_cannot_start_in_a_worker_stops_the_sweep_in_one_line(in_tmp):
    # Every run asks for a GPU this machine lacks: every run would fail alike, so none is launched
    # after. (Missing data no longer reaches a worker: the sweep reads each dataset first.)
    r = CliRunner().invoke(app, ["ablate", study(in_tmp / "s.yaml", 1, [0, 1]), "--out", "res", "--jobs", "2",
                                 "--set", "run.device=cuda"])
    assert r.exit_code == 2, r.output
    lines = r.stderr.strip().splitlines()
    assert "Traceback" not in r.stderr and lines[-1].startswith("resnet: error: run 1:"), r.stderr
    assert "no CUDA device is available" in lines[-1] and "(log: " in lines[-1]
    started = sorted(p.name for p in (in_tmp / "res").iterdir() if p.is_dir())
    assert started == ["01-identity-s0", "01-identity-s1"]  # one per worker, none after the first failure
    for name in started:
        assert "resnet: error: " in (in_tmp / "res" / name / "ablate.log").read_text()
