"""`run.threads: auto`: the choice on hand-made machines, what a run records, and the sweep's split."""

import json
import os
import subprocess
import sys
import time

import pytest
import torch
from typer.testing import CliRunner

from resnet_cli.cli import app
from resnet_cli.sweep import launchers, workers
from resnet_cli.training import cpu_threads as T
from resnet_cli.training.cpu_threads import Machine, choose


@pytest.mark.parametrize("machine,threads,passive,line", [
    # The case: two cores, another job on nearly both: one thread, sleeping waits.
    (Machine(2, 1.8), 1, True, "2 cores, 1.8 busy: 1 thread"),
    (Machine(2, 0.1), 2, False, "2 cores, 0.1 busy: 2 threads"),  # a shell or a daemon: still quiet
    (Machine(2, 0.35), 1, True, "2 cores, 0.3 busy: 1 thread"),  # a third of a core taken: not quiet
    (Machine(16, 3.0), 13, True, "16 cores, 3.0 busy: 13 threads"),  # 16 - 3 + 0.3, floored
    (Machine(16, 15.9), 1, True, "16 cores, 15.9 busy: 1 thread"),  # never fewer than one
    (Machine(4, None, load_1min=2.5), 1, True, "4 cores, 2.5 1-minute load: 1 thread"),  # no /proc/stat
    (Machine(1, 0.9), 1, False, "1 cores, 0.9 busy: 1 thread"),  # one core: nothing to wait for
    (Machine(8, None), 8, False, "8 cores, their use unknown: 8 threads"),
    (Machine(8, 7.0, pinned=3), 3, False, "OMP_NUM_THREADS=3: 3 threads"),  # the user's pin wins
])
def test_the_choice_on_hand_made_machines(machine, threads, passive, line):
    c = choose(machine)
    assert (c.threads, c.passive, c.why) == (threads, passive, line)


def test_only_a_choice_other_than_every_core_is_said():
    assert not T.worth_saying(choose(Machine(2, 0.0)))
    assert T.worth_saying(choose(Machine(2, 1.8)))
    assert not T.worth_saying(choose(Machine(2, 1.8, pinned=1)))  # a sweep worker's pin: its parent said it
    assert not T.worth_saying(None)  # an explicit count


def test_a_cgroup_quota_caps_the_cores(monkeypatch):
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1, 2, 3})
    monkeypatch.setattr(T, "_cgroup_quota", lambda: None)
    assert T.usable_cores() == 4
    monkeypatch.setattr(T, "_cgroup_quota", lambda: 1.5)  # docker --cpus 1.5: one thread, not two throttled
    assert T.usable_cores() == 1
    monkeypatch.setattr(T, "_cgroup_quota", lambda: 8.0)
    assert T.usable_cores() == 4


def test_others_use_is_the_cores_busy_time_less_our_own(monkeypatch):
    # By hand: 3.0 s of busy time on our CPUs over 2.0 s of wall time, 1.0 s of it ours: 1.0 core.
    ticks, own, clock = iter([10.0, 13.0]), iter([5.0, 6.0]), iter([100.0, 102.0])
    monkeypatch.setattr(T, "busy_seconds", lambda cpus: next(ticks))
    monkeypatch.setattr(T, "own_cpu_seconds", lambda: next(own))
    monkeypatch.setattr(T.time, "monotonic", lambda: next(clock))
    assert T.Others().busy() == pytest.approx(1.0)


@pytest.mark.skipif(not os.path.exists("/proc/stat"), reason="reads /proc/stat")
def test_a_process_spinning_elsewhere_is_seen():
    spin = "import time\nt = time.time()\nwhile time.time() - t < 3: pass\n"
    # Not our child (a shell that exits at once leaves it to init): our own CPU never includes it.
    subprocess.run(["sh", "-c", f'{sys.executable} -c "{spin}" >/dev/null 2>&1 &'], check=True)
    time.sleep(0.3)
    others = T.Others()
    t = time.time()
    while time.time() - t < 1.0:  # our own spinning, the same second
        pass
    busy = T.Others.busy(others)
    # At least the other spinner's core, less scheduling noise (anything else the machine runs adds).
    assert busy >= 0.7


def test_a_run_records_the_count_it_used_and_says_why(in_tmp, monkeypatch):
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    monkeypatch.setattr(T, "measure", lambda window_s=T.WINDOW_S, obey_pin=True: Machine(2, 1.8, 3.9))
    r = CliRunner().invoke(app, ["train", "--dataset", "digits", "--depth", "8", "--set", "model.widths=[4,4,4]",
                                 "--epochs", "1", "--out", "run", "--json"])
    assert r.exit_code == 0, r.stderr
    assert "run.threads auto: 2 cores, 1.8 busy: 1 thread" in r.stderr
    meta = json.loads((in_tmp / "run" / "meta.json").read_text())
    assert meta["threads"] == 1
    assert meta["threads_auto"]["cores"] == 2 and meta["threads_auto"]["busy"] == 1.8
    summary = json.loads((in_tmp / "run" / "summary.json").read_text())
    assert summary["threads"] == 1 and "threads_varied" not in summary
    epoch = json.loads((in_tmp / "run" / "metrics.jsonl").read_text().splitlines()[0])
    assert epoch["threads"] == 1


def test_an_explicit_count_is_obeyed_and_measures_nothing(in_tmp, monkeypatch):
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)

    def no(*a, **k):
        raise AssertionError("an explicit --threads must not measure the machine")

    monkeypatch.setattr(T, "measure", no)
    r = CliRunner().invoke(app, ["train", "--dataset", "digits", "--depth", "8", "--set", "model.widths=[4,4,4]",
                                 "--epochs", "1", "--threads", "1", "--out", "run", "--json"])
    assert r.exit_code == 0, r.stderr
    assert "run.threads auto" not in r.stderr
    meta = json.loads((in_tmp / "run" / "meta.json").read_text())
    assert meta["threads"] == 1 and "threads_auto" not in meta


def test_the_count_follows_the_load_between_epochs(in_tmp, monkeypatch):
    """Busy at start, quiet during epoch 1: epoch 2 runs at both cores (and the count is put back
    when the command returns, as every command's thread count is)."""
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    monkeypatch.setattr(T, "measure", lambda window_s=T.WINDOW_S, obey_pin=True: Machine(2, 1.8))
    monkeypatch.setattr(T.Others, "busy", lambda self: 0.0)
    r = CliRunner().invoke(app, ["train", "--dataset", "digits", "--depth", "8", "--set", "model.widths=[4,4,4]",
                                 "--epochs", "2", "--out", "run", "--json"])
    assert r.exit_code == 0, r.stderr
    assert "run.threads auto: 2 cores, 0.0 busy: 2 threads from epoch 2" in r.stderr
    epochs = [json.loads(x) for x in (in_tmp / "run" / "metrics.jsonl").read_text().splitlines()]
    assert [e["threads"] for e in epochs] == [1, 2]
    summary = json.loads((in_tmp / "run" / "summary.json").read_text())
    assert summary["threads_varied"] == [1, 2]
    assert torch.get_num_threads() == 1


def test_a_pinned_count_never_changes_at_epochs(monkeypatch):
    monkeypatch.setattr(T.Others, "busy", lambda self: 0.0)
    watch = T.EpochWatch(choose(Machine(2, 1.8, pinned=1)))
    assert watch.next() is None


def test_a_sweep_splits_the_free_cores_between_its_workers(monkeypatch):
    monkeypatch.setenv("OMP_NUM_THREADS", "1")  # a run's pin: not the sweep's count of cores
    monkeypatch.setattr(T, "usable_cores", lambda: 16)
    monkeypatch.setattr(T, "Others", type("Busy", (), {"busy": lambda self: 4.0}))
    monkeypatch.setattr(T.time, "sleep", lambda s: None)
    assert launchers.cpu_cores() == 12  # 16 - 4 + 0.3, floored
    assert launchers.auto_jobs(100) == 12 or launchers.gpu_count() > 0
    assert [s.threads for s in workers.shares(3, launchers.cpu_cores(), 0, None)] == [4, 4, 4]
