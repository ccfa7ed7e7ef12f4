"""SIGINT and SIGTERM are honoured from the first instant (issue: Ctrl-C during start-up is lost).

Each signal lands at a known start-up phase (resnet_cli/training/testhook.py: RESNET_TEST_PAUSE=PHASE:PATH
holds the child there), so no test races the child; one more sends it after a real early sleep.
After each, the same command reruns into the same --out at once."""

import json
import signal
import sys
import time
from pathlib import Path

import pytest

from processes import ENV, TINY_STUDY, handled, here, resnet, spawn, start_paused

pytestmark = pytest.mark.slow  # child processes and kills: `make test` runs them, `make test-quick` does not

TRAIN = ["train", "digits/residual8", "--set", "model.widths=[4]", "--epochs", "1", "--out", "run", "--json"]
CODE = {signal.SIGINT: 130, signal.SIGTERM: 143}


def ignore_sigint() -> None:
    """As a background job of a non-interactive shell starts (`resnet train ... &` in a script):
    with SIGINT ignored, and so without Python's KeyboardInterrupt handler."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)


def start_held(pause: str, args, cwd: Path):
    return start_paused(pause, *args, cwd=cwd, preexec_fn=ignore_sigint)


def signal_at(pause: str, sig: int, args, cwd: Path) -> tuple[int, str]:
    proc, _ = start_held(pause, args, cwd)
    proc.send_signal(sig)
    out, err = proc.communicate(timeout=60)  # it ends in the pause: the marker is never removed
    return proc.returncode, err


def rerun_completes(args, cwd: Path) -> None:
    res = here(*args, cwd=cwd)
    assert res.returncode == 0, res.stderr
    assert json.loads(res.stdout.splitlines()[-1])["status"] == "completed"


@pytest.mark.parametrize("pause,sig", [("start", signal.SIGINT), ("spec", signal.SIGTERM),
                                       ("data", signal.SIGINT), ("rundir", signal.SIGTERM)])
def test_a_signal_during_start_up_exits_at_once_and_leaves_nothing(tmp_path, pause, sig):
    code, err = signal_at(pause, sig, TRAIN, tmp_path)
    assert code == CODE[sig], err
    assert "Traceback" not in err
    if pause != "start":  # before the commands are imported it exits quietly
        assert err.strip().splitlines()[-1] == f"resnet: stopped by {signal.Signals(sig).name}"
    assert not (tmp_path / "run").exists()  # no half-made run directory, no lock
    rerun_completes(TRAIN, tmp_path)


def test_a_signal_at_the_first_step_saves_and_resumes(tmp_path):
    args = [*TRAIN, "--resume", "auto"]
    proc, marker = start_held("1", args, tmp_path)
    proc.send_signal(signal.SIGINT)
    handled(marker, proc)  # the trainer's flag has it
    marker.unlink()
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err
    assert json.loads((tmp_path / "run" / "summary.json").read_text())["iterations"] == 1
    rerun_completes(args, tmp_path)  # the same command resumes it


def test_a_real_signal_soon_after_spawn(tmp_path):
    """No pause point: SIGINT 0.3 s after the start, while Python starts or imports the commands
    and torch. Under load that may still be before `resnet`'s first line, where Python's own
    KeyboardInterrupt ends it (killed by SIGINT, -2 here, 130 in a shell): either way it stops."""
    proc = spawn(*TRAIN, cwd=tmp_path)
    time.sleep(0.3)
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode in (130, -signal.SIGINT), err
    assert not (tmp_path / "run").exists()
    rerun_completes(TRAIN, tmp_path)


@pytest.mark.parametrize("args", [
    ["ablate", "zero-init", "--preset", "quick", "--jobs", "2", "--out", "abl"],
    ["degrade", "--out", "deg"],
], ids=["ablate", "degrade"])
def test_sigterm_at_start_up_of_ablate_and_degrade(tmp_path, args):
    code, err = signal_at("command", signal.SIGTERM, args, tmp_path)
    assert code == 143, err
    assert "Traceback" not in err and err.strip().splitlines()[-1] == "resnet: stopped by SIGTERM"
    assert not any(tmp_path.glob("*/.lock")) and not any(tmp_path.glob("*/*/.lock"))


ONE_RUN = """
title: one tiny run
""" + TINY_STUDY + """rows:
  - {label: identity, overrides: {}}
"""


def test_sigterm_while_an_ablate_worker_starts_its_run(tmp_path):
    """The run in a worker process is held after making its run directory, before its net is
    built: the parent's SIGTERM, forwarded to the worker, ends the run before its first step
    (nothing trained, its directory removed), ablate exits 143, and the rerun trains it."""
    (tmp_path / "one.yaml").write_text(ONE_RUN)
    args = ["ablate", "one.yaml", "--jobs", "2", "--out", "abl", "--json"]
    proc, marker = start_held("rundir", args, tmp_path)
    proc.send_signal(signal.SIGTERM)
    time.sleep(0.3)  # the parent forwards it to the held worker, whose flag keeps it
    marker.unlink()
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 143, err
    assert "Traceback" not in err
    run = tmp_path / "abl" / "01-identity-s0"
    assert not (run / "spec.yaml").exists() and not (run / "checkpoint.pt").exists(), sorted(p.name for p in run.iterdir())
    res = here(*args, cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    rows = [rec for line in res.stdout.splitlines() if line.strip() and (rec := json.loads(line))["event"] == "row"]
    assert [r["n"] for r in rows] == [1]


SWALLOWING_IMPORT = r"""
import os, signal, sys, time
sys.path.insert(0, sys.argv[1])
from resnet_cli.training.signals import Interrupted, install_early
install_early()
try:
    import swallow  # signals itself mid-import, and catches whatever that raises
except Interrupted:
    sys.exit(99)  # an Interrupted that escaped the import unchanged: not what the fix does either
time.sleep(5)
"""

SWALLOW = """
import os, signal, time

try:
    os.kill(os.getpid(), signal.SIGTERM)
    time.sleep(0.2)
except BaseException:  # as some packages' import code does
    raise RuntimeError("swallowed the signal")
DONE = True
"""


def test_a_signal_inside_an_import_waits_for_the_import(tmp_path):
    """Some packages' import code catches every exception (numpy's, reached through scipy): a
    start-up signal that lands inside an import is raised right after it, never inside it."""
    (tmp_path / "swallow.py").write_text(SWALLOW)
    root = str(Path(__file__).resolve().parent.parent)
    res = resnet(cmd=[sys.executable, "-c", SWALLOWING_IMPORT, str(tmp_path)], env={**ENV, "PYTHONPATH": root},
                 timeout=60)
    assert res.returncode == 143, res.stderr  # raised inside the import it would end in RuntimeError, exit 1
