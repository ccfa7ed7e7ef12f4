"""`resnet ablate` seen from outside (its files and outputs, not the engine's internals): --seeds,
--jobs splitting the CPU threads and starting the longest runs first, a real SIGTERM to a running
sweep, and `resnet report` showing the interrupted run as incomplete."""

import json
import os
import signal
import subprocess
import sys
import time

import pytest


from invoking import invoke
from processes import TINY_STUDY, alive, children, handled, here, start_paused

STUDY = """
title: sweep test
""" + TINY_STUDY + """rows:
"""


def study(tmp_path, rows, **replace):
    text = STUDY + rows
    for old, new in replace.items():
        text = text.replace(old, new)
    path = tmp_path / "s.yaml"
    path.write_text(text)
    return path


def json_lines(text):
    """The row objects of a study's JSON lines (a study ends with its summary object)."""
    return [rec for line in text.splitlines() if line.strip() and (rec := json.loads(line))["event"] == "row"]


def test_seeds_override_the_studys_seeds(in_tmp):
    path = study(in_tmp, "  - label: identity\n")
    r = invoke("ablate", path, "--out", "res", "--jobs", 1, "--seeds", "3,5", "--json")
    assert r.exit_code == 0, r.stderr
    (row,) = json_lines(r.stdout)
    assert row["n"] == 2 and len(row["test_errors"]) == 2
    dirs = sorted(p.name for p in (in_tmp / "res").iterdir() if p.is_dir())
    assert dirs == ["01-identity-s3", "01-identity-s5"]
    for d in dirs:
        seed = int(d[-1])
        assert json.loads((in_tmp / "res" / d / "summary.json").read_text())["seed"] == seed


@pytest.mark.slow
def test_jobs_split_the_threads_and_start_the_longest_runs_first(in_tmp, monkeypatch):
    """Three runs on two workers: the two longest start together, the shortest waits for a free
    worker; every child gets cores // jobs threads, not the parent's setting."""
    monkeypatch.setenv("OMP_NUM_THREADS", "7")  # what a child would inherit if nothing split the cores
    rows = "".join(f"  - label: d{d}\n    overrides: {{model.depth: {d}}}\n" for d in (4, 8, 12))
    r = invoke("ablate", study(in_tmp, rows), "--out", "res", "--jobs", 2, "--json")
    assert r.exit_code == 0, r.stderr
    runs = {d: in_tmp / "res" / f"{i:02d}-d{d}-s0" for i, d in enumerate((4, 8, 12), 1)}
    cores = len(os.sched_getaffinity(0))
    for d, run in runs.items():
        assert json.loads((run / "summary.json").read_text())["status"] == "completed"
        assert json.loads((run / "meta.json").read_text())["threads"] == max(1, cores // 2), d
    started = {d: (run / "spec.yaml").stat().st_mtime_ns for d, run in runs.items()}
    finished = {d: (run / "summary.json").stat().st_mtime_ns for d, run in runs.items()}
    # The shortest waits for a free worker: it starts only after one of the two longest has ended.
    # (Not "after both started": a worker slow to import torch on a loaded machine may start its run
    # after the other worker has finished one and taken the next.)
    assert started[4] >= min(finished[8], finished[12])


@pytest.mark.slow
def test_sigterm_to_a_running_sweep_saves_and_report_says_incomplete(tmp_path):
    """A real SIGTERM to `resnet ablate` while its first run is held at step 3 (resnet_cli/training/testhook.py):
    the run saves and stops, the sweep exits 143 without starting the next run, `resnet report`
    shows the row as incomplete, and rerunning the same command finishes the sweep."""
    rows = "  - label: first\n  - label: second\n    overrides: {model.shortcut.kind: none}\n"
    path = study(tmp_path, rows, **{"epochs: 1": "epochs: 3"})
    args = ["ablate", path, "--out", "res", "--jobs", "1", "--json"]
    proc, marker = start_paused(3, *args, cwd=tmp_path)
    proc.send_signal(signal.SIGTERM)
    handled(marker, proc)
    marker.unlink()
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 143, err  # SIGTERM's code, not Ctrl-C's: the trainer's flag hands the signal back
    assert "Traceback" not in err and "interrupted; to resume, rerun: resnet ablate" in err and "--out res" in err
    # The interrupted run is not counted as trained (it said "1 run(s) trained").
    assert "0 run(s) trained, 1 interrupted, 1 not started, 0 already finished" in err, err
    first = tmp_path / "res" / "01-first-s0"
    summary = json.loads((first / "summary.json").read_text())
    assert summary["status"] == "interrupted" and summary["iterations"] == 3
    assert not (tmp_path / "res" / "02-second-s0" / "summary.json").exists()  # never started
    report = here("report", "res", "--json", cwd=tmp_path)
    assert report.returncode == 0, report.stderr
    status = {row["row"]: row["status"] for row in json_lines(report.stdout)}
    assert status["first"].startswith("incomplete"), status  # "second" left no directory to report
    again = here(*args, cwd=tmp_path)
    assert again.returncode == 0, again.stderr
    assert {row["status"] for row in json_lines(again.stdout)} == {"completed"}
    assert json.loads((first / "summary.json").read_text())["iterations"] == 3 * 2
    assert [r["epoch"] for r in map(json.loads, (first / "metrics.jsonl").read_text().splitlines())] == [1, 2, 3]


@pytest.mark.slow
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
def test_workers_end_when_their_ablate_is_sigkilled(tmp_path):
    """SIGKILL leaves the parent no chance to stop its workers: each must notice alone and end
    within seconds, not stay behind reparented to init with its memory."""
    rows = "  - label: first\n  - label: second\n    overrides: {model.shortcut.kind: none}\n"
    path = study(tmp_path, rows, **{"epochs: 1": "epochs: 3"})
    proc, marker = start_paused(3, "ablate", path, "--out", "res", "--jobs", "2", "--json", cwd=tmp_path,
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    workers = children(proc.pid)
    assert int(marker.read_text()) in workers  # a paused run is in a worker, not the parent
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    # Both workers hold at step 3 on the same marker: the one that gets there after the first is let
    # go creates it again and would hold for a minute, so the marker is removed for as long as any
    # worker lives. "Within seconds", under ORPHAN_GRACE_S (the 60 s a worker stuck in its run takes).
    deadline = time.monotonic() + 10
    while any(map(alive, workers)) and time.monotonic() < deadline:
        marker.unlink(missing_ok=True)
        time.sleep(0.1)
    assert not [pid for pid in workers if alive(pid)], "a worker outlived its parent"


def test_a_results_directory_of_another_spec_gives_one_line_per_run(in_tmp):
    rows = "  - label: first\n  - label: second\n    overrides: {model.shortcut.kind: none}\n"
    assert invoke("ablate", study(in_tmp, rows), "--out", "res", "--jobs", 1, "--json").exit_code == 0
    r = invoke("ablate", study(in_tmp, rows, **{"widths: [4]": "widths: [6]"}), "--out", "res", "--jobs", 1, "--json")
    assert r.exit_code == 2
    said = [ln for ln in r.stderr.splitlines() if "another spec" in ln]
    assert len(said) == 2 and "01-first-s0" in said[0] and "02-second-s0" in said[1], r.stderr
    assert not any("test error" in ln for ln in said)  # the old spec's result is not this run's


@pytest.mark.parametrize("seeds,expected", [("3", [3]), ("2..4", [2, 3, 4]), ("4,1", [4, 1])])
def test_ablate_seeds_take_the_one_seed_syntax(in_tmp, seeds, expected):
    r = invoke("ablate", study(in_tmp, "  - label: identity\n"), "--out", "res", "--seeds", seeds, "--list")
    assert r.exit_code == 0, r.stderr
    assert [int(line.split("--only 1:")[1].split()[0]) for line in r.stdout.splitlines()] == expected
