"""`resnet` in a child process: the one place the tests start one, hold one at a known step
(resnet_cli/training/testhook.py), kill one, or find its workers; other code that must not run in
the test process (`in_child`); `here`, the same command in this process, for the runs around a kill
that need no process of their own; and TINY_STUDY, a study of seconds."""

from __future__ import annotations

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


def command(*args) -> list[str]:
    """The argv of `resnet ARGS` run by this interpreter (the checkout's package, not an installed one)."""
    return [sys.executable, "-m", "resnet_cli", *map(str, args)]


def torchrun(*args, nproc: int = 2, extra=()) -> list[str]:
    """The argv of `resnet ARGS` under torchrun with `nproc` CPU ranks."""
    return [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={nproc}", *extra,
            "-m", "resnet_cli", *map(str, args)]


def resnet(*args, cwd: Path | None = None, env: dict | None = None, timeout: float = 300,
           cmd: list[str] | None = None, **kw) -> subprocess.CompletedProcess:
    """Run `resnet ARGS` (or `cmd`) to the end; stdout and stderr captured as text unless given."""
    kw.setdefault("stdout", subprocess.PIPE)
    kw.setdefault("stderr", subprocess.PIPE)
    kw.setdefault("text", True)
    return subprocess.run(cmd or command(*args), env=ENV if env is None else env, timeout=timeout, cwd=cwd, **kw)


def here(*args, cwd: Path | None = None, env: dict | None = None) -> subprocess.CompletedProcess:
    """`resnet ARGS` run in this process (Typer's CliRunner, in `cwd`, with the variables in `env`
    set for the call), returned as `resnet` would return it. For the runs around a kill that need no process of their own, the uninterrupted
    reference and the resume: a child spends seconds of CPU importing torch before its first step,
    and the suite is CPU-bound. The killed run itself is always a child (kill_at, start_paused)."""
    from invoking import invoke

    where = os.getcwd()
    os.chdir(cwd or where)
    try:
        r = invoke(*args, env=env)
    finally:
        os.chdir(where)
    return subprocess.CompletedProcess(["resnet", *map(str, args)], r.exit_code, r.stdout, r.stderr)


def in_child(code: str, *args, timeout: float = 600) -> subprocess.CompletedProcess:
    """Run Python `code` (with `args` as sys.argv[1:]) in a child with tests/ on its path. For what
    must not run in the test process: the ONNX exporter and torch.compile leave threads, caches and
    global settings behind that change the tests after them."""
    env = {**ENV, "PYTHONPATH": os.pathsep.join(filter(None, [str(Path(__file__).parent), os.environ.get("PYTHONPATH")]))}
    return subprocess.run([sys.executable, "-c", code, *map(str, args)], env=env, timeout=timeout,
                          capture_output=True, text=True)


def spawn(*args, cwd: Path | None = None, pause: int | str | None = None, env: dict | None = None,
          cmd: list[str] | None = None, **kw) -> subprocess.Popen:
    """Start `resnet ARGS` (or `cmd`) and return at once; stdout and stderr are text pipes unless
    given. `pause`: a step number or a start-up phase where the child stops and waits (testhook.py)
    until `marker(cwd)` is removed; `held` waits for it to get there."""
    env = dict(ENV if env is None else env)
    if pause is not None:
        assert not marker(cwd).exists(), f"{marker(cwd)} is left from an earlier pause: held() would not wait"
        env["RESNET_TEST_PAUSE"] = f"{pause}:{marker(cwd)}"
    kw.setdefault("stdout", subprocess.PIPE)
    kw.setdefault("stderr", subprocess.PIPE)
    kw.setdefault("text", kw["stdout"] == subprocess.PIPE or kw["stderr"] == subprocess.PIPE)
    return subprocess.Popen(cmd or command(*args), cwd=cwd, env=env, **kw)


def marker(cwd: Path | None) -> Path:
    """The file a paused child creates (with its pid) and waits on while it exists."""
    return Path(cwd or ".").resolve() / "paused"


def held(proc: subprocess.Popen, cwd: Path | None = None, timeout: float = 120) -> Path:
    """Wait until `proc` (spawned with `pause`) is held at its pause; returns the marker."""
    path = marker(cwd)
    deadline = time.monotonic() + timeout
    while not path.exists():
        if proc.poll() is not None:
            raise AssertionError(f"the child ended before the pause: {proc.communicate()}")
        assert time.monotonic() < deadline, "the child never reached the pause"
        time.sleep(0.005)
    return path


def start_paused(pause: int | str, *args, cwd: Path, **kw) -> tuple[subprocess.Popen, Path]:
    """`spawn` then `held`: the test's signals land at that step or phase every time, no sleeps."""
    proc = spawn(*args, cwd=cwd, pause=pause, **kw)
    return proc, held(proc, cwd)


def handled(path: Path, proc: subprocess.Popen, timeout: float = 60) -> int:
    """Until the held child's stop flag has the signal sent to it (PATH.signalled, with its number):
    a second signal of the same kind sent earlier would merge with the first (they do not queue)."""
    done = path.with_name(path.name + ".signalled")
    deadline = time.monotonic() + timeout
    while not done.exists():
        assert proc.poll() is None and time.monotonic() < deadline
        time.sleep(0.005)
    return int(done.read_text())


def kill_at(step: int, *args, cwd: Path) -> None:
    """`resnet ARGS` held after `step` (no sleeps, no race), then SIGKILLed: nothing after the
    step runs, no handler, no final save."""
    proc, path = start_paused(step, *args, cwd=cwd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    path.unlink()  # the killed child cannot: a stale marker would "hold" the next child before it starts


def killed_and_resumed_is_bitwise(tmp_path: Path, run: list[str], kill: int = 35, saved: int = 30) -> dict:
    """Train `resnet train RUN` whole ("ref"), and again SIGKILLed after step `kill` (its last
    checkpoint at `saved`) then resumed ("run"); assert the two end bitwise equal (summary and every
    weight). Returns the reference weights. Only the killed run is a child (`here`)."""
    import json

    import torch

    ref = here("train", *run, "--out", "ref", "--json", cwd=tmp_path)
    assert ref.returncode == 0, ref.stderr
    kill_at(kill, "train", *run, "--out", "run", cwd=tmp_path)
    cut = tmp_path / "run"
    assert torch.load(cut / "checkpoint.pt", weights_only=True)["progress"]["iteration"] == saved
    res = here("train", "--resume", cut, "--json", cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    a, b = json.loads(ref.stdout.splitlines()[-1]), json.loads(res.stdout.splitlines()[-1])
    assert a["train_loss"] == b["train_loss"] and a["test_error"] == b["test_error"]
    wa = torch.load(tmp_path / "ref" / "checkpoint.pt", weights_only=True)["model"]
    wb = torch.load(cut / "checkpoint.pt", weights_only=True)["model"]
    assert wa.keys() == wb.keys() and all(torch.equal(wa[k], wb[k]) for k in wa)
    return wa


def children(pid: int) -> list[int]:
    """The processes whose parent is `pid` (Linux: read from /proc)."""
    kids = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == pid:
            kids.append(int(stat.parent.name))
    return kids


def alive(pid: int) -> bool:
    """Whether `pid` still runs (a zombie has ended)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False
