"""`resnet` in a child process, and a child killed at a known step (resnet_cli/training/testhook.py): shared
by the tests that kill a run and resume it."""

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

ENV = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1"}

# A study's spec and seed for runs of seconds: one epoch of two iterations (128 digits at batch 64),
# a 4-layer net at width 4, seed 0. Tests add the title and rows.
TINY_STUDY = """\
spec:
  model: {family: digits, depth: 4, widths: [4]}
  data: {dataset: digits, train_subset: 128, test_subset: 60}
  optim: {epochs: 1, batch_size: 64, warmup_iters: 0, milestones: []}
  train: {checkpoint_every: 0}
seeds: [0]
"""


def resnet(*args, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "resnet_cli", *map(str, args)], capture_output=True, text=True,
                          env=ENV, timeout=300, cwd=cwd)


def kill_at(step: int, *args, cwd: Path) -> None:
    """`resnet ARGS` held after `step` (no sleeps, no race), then SIGKILLed: nothing after the
    step runs, no handler, no final save."""
    marker = cwd / "paused"
    proc = subprocess.Popen([sys.executable, "-m", "resnet_cli", *map(str, args)], cwd=cwd,
                            env={**ENV, "RESNET_TEST_PAUSE": f"{step}:{marker}"},
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 120
    while not marker.exists():
        assert proc.poll() is None, "the child ended before the pause"
        assert time.monotonic() < deadline, "the child never reached the pause"
        time.sleep(0.005)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
