"""Never lose a run: kills, signals, divergence, locks and hostile input (issue: reliability)."""

import json
import math
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from resnet_cli.training import checkpoint as ckpt
from resnet_cli.runs.writer import RunDir

from invoking import invoke
from processes import ENV, handled, here, resnet, spawn, start_paused

# ~90 iterations an epoch (batch 16 on 1,437 digits), checkpoints every 10: kills land mid-epoch.
RUN = ["digits/residual8", "--set", "model.widths=[8]", "--batch-size", "16", "--epochs", "2",
       "--set", "train.checkpoint_every=10"]
PAUSE_AT = 25  # after the checkpoint of iteration 20, mid-epoch


def weights(run: Path):
    return torch.load(run / "checkpoint.pt", weights_only=True)["model"]


@pytest.mark.slow
def test_sigkill_mid_epoch_then_resume_is_bitwise_identical(tmp_path):
    ref = here("train", *RUN, "--out", tmp_path / "ref", "--json")
    assert ref.returncode == 0, ref.stderr
    proc, _ = start_paused(PAUSE_AT, "train", *RUN, "--out", "run", "--json", cwd=tmp_path)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    run = tmp_path / "run"
    assert not (run / "summary.json").exists()
    assert torch.load(run / "checkpoint.pt", weights_only=True)["progress"]["iteration"] == 20
    res = here("train", "--resume", run, "--json", cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    a, b = json.loads(ref.stdout.splitlines()[-1]), json.loads(res.stdout.splitlines()[-1])
    assert a["train_loss"] == b["train_loss"] and a["test_error"] == b["test_error"]
    wa, wb = weights(tmp_path / "ref"), weights(run)
    assert wa.keys() == wb.keys() and all(torch.equal(wa[k], wb[k]) for k in wa)
    # metrics after the checkpoint were dropped and rewritten: one record per epoch
    assert [r["epoch"] for r in RunDir(run).metrics()] == [1, 2]


@pytest.mark.slow
@pytest.mark.parametrize("sig,code", [(signal.SIGTERM, 143), (signal.SIGINT, 130)])
def test_sigterm_sigint_save_and_exit_then_resume(tmp_path, sig, code):
    proc, marker = start_paused(PAUSE_AT, "train", *RUN, "--out", "run", "--json", cwd=tmp_path)
    proc.send_signal(sig)
    assert handled(marker, proc) == sig
    marker.unlink()  # go on: the loop finds the flag at this step
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == code, err
    assert "Traceback" not in err and "resume with" in err
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert summary["status"] == "interrupted" and summary["iterations"] == PAUSE_AT
    assert json.loads(out.splitlines()[-1])["status"] == "interrupted"
    # saved at the step the signal came, not at the last periodic checkpoint (20)
    assert torch.load(tmp_path / "run" / "checkpoint.pt", weights_only=True)["progress"]["iteration"] == PAUSE_AT
    res = here("train", "--resume", "run", "--json", cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    assert json.loads(res.stdout.splitlines()[-1])["status"] == "completed"


@pytest.mark.slow
def test_second_ctrl_c_exits_at_once(tmp_path):
    """README: a second Ctrl-C exits at once. Both arrive while the child is held at its step, so it
    never gets to save: no summary, and the checkpoint is still the periodic one of iteration 20."""
    proc, marker = start_paused(PAUSE_AT, "train", *RUN, "--out", "run", "--json", cwd=tmp_path)
    proc.send_signal(signal.SIGINT)
    handled(marker, proc)
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err
    assert marker.exists()  # it left while still held: nothing after the pause ran
    assert not (tmp_path / "run" / "summary.json").exists()
    assert torch.load(tmp_path / "run" / "checkpoint.pt", weights_only=True)["progress"]["iteration"] == 20


KILL_WRITER = r"""
import sys, torch
from resnet_cli.training import checkpoint as ckpt
path = sys.argv[1]
torch.manual_seed(0)
base = torch.randn(4_000_000)
i = 0
while True:
    ckpt.save({"i": i, "w": base + i}, path)
    print(i, flush=True)
    i += 1
"""


@pytest.mark.slow
def test_kill_during_checkpoint_write_leaves_a_loadable_checkpoint(tmp_path):
    """SIGKILL while a temporary checkpoint file is being written (its presence proves the write was
    under way); the checkpoint path still holds the previous complete save, with the seeded values.
    The orphans are then removed by `resnet train --resume` at start-up."""
    torch.manual_seed(0)
    base = torch.randn(4_000_000)
    path = tmp_path / "checkpoint.pt"
    kept = tmp_path / "orphans"
    kept.mkdir()
    for trial in range(5):  # README: 5 trials
        proc = spawn(cmd=[sys.executable, "-c", KILL_WRITER, str(path)], stderr=None)
        proc.stdout.readline()  # one complete save
        deadline = time.monotonic() + 60
        while not list(tmp_path.glob(ckpt.TMP_PREFIX + "*")):  # the next write has begun
            assert time.monotonic() < deadline and proc.poll() is None
        proc.kill()
        proc.wait()
        left = list(tmp_path.glob(ckpt.TMP_PREFIX + "*"))
        assert left, "the kill did not land during a write"
        state = ckpt.load(path)
        assert torch.equal(state["w"], base + state["i"])
        for orphan in left:
            orphan.rename(kept / f"{orphan.name}-{trial}")
    run = tiny_run(tmp_path / "run")
    for orphan in kept.iterdir():
        orphan.rename(run / orphan.name)
    assert len(list(run.glob(ckpt.TMP_PREFIX + "*"))) == 5
    r = invoke("train", "--resume", run)
    assert r.exit_code == 0, r.stderr
    assert not list(run.glob(ckpt.TMP_PREFIX + "*"))


def tiny_run(path: Path):
    r = invoke("train", "digits/residual8", "--set", "model.widths=[4]", "--epochs", "1", "--out", path)
    assert r.exit_code == 0, r.stderr
    return path


def test_nan_loss_gives_diverged_exit_3_and_keeps_last_good_checkpoint(in_tmp, training_loss):
    training_loss(lambda loss, n: loss * float("nan") if n > 30 else loss)
    r = invoke("train", "digits/residual8", "--set", "model.widths=[4]", "--epochs", "3", "--out", "run",
               "--set", "train.checkpoint_every=5")
    assert r.exit_code == 3, r.stderr
    summary = json.loads(r.stdout.splitlines()[-1])
    assert summary["status"] == "diverged" and summary["diverged_at"]["loss"] == "nan"
    state = ckpt.load(in_tmp / "run" / "checkpoint.pt")
    assert state["progress"]["iteration"] <= 30
    assert all(torch.isfinite(v).all() for v in state["model"].values() if v.is_floating_point())


def test_exploding_loss_is_diverged_too(in_tmp):
    """The factor check, not the NaN check: a finite loss above train.diverge_factor x the step-1
    loss. A checkpoint every step syncs the loss every step, so the first such loss is caught."""
    r = invoke("train", "digits/residual8", "--set", "model.widths=[4]", "--epochs", "2", "--out", "run",
               "--lr", "20", "--set", "train.diverge_factor=1.5", "--set", "train.checkpoint_every=1",
               "--set", "optim.warmup_iters=0")
    assert r.exit_code == 3, r.stderr
    summary = json.loads((in_tmp / "run" / "summary.json").read_text())
    assert summary["status"] == "diverged"
    loss = summary["diverged_at"]["loss"]
    first = ckpt.load(in_tmp / "run" / "checkpoint.pt")["progress"]["first_loss"]
    assert isinstance(loss, float) and math.isfinite(loss) and loss > 1.5 * first, (loss, first)
    assert 1.5 < first < 3.5  # about ln 10 at the start, and not itself the exploded value


def test_resume_refuses_a_changed_spec_unless_forced(in_tmp):
    tiny_run(in_tmp / "run")
    r = invoke("train", "--resume", "run", "--set", "optim.lr=0.07", "--set", "optim.momentum=0.5")
    assert r.exit_code == 2 and "optim.lr" in r.stderr and "optim.momentum" in r.stderr
    assert invoke("train", "--resume", "run", "--set", "optim.lr=0.07", "--force-resume").exit_code == 0


def test_resume_of_a_finished_run_trains_nothing(in_tmp):
    tiny_run(in_tmp / "run")
    before = (in_tmp / "run" / "metrics.jsonl").read_text()
    r = invoke("train", "--resume", "run")
    assert r.exit_code == 0 and json.loads(r.stdout.splitlines()[-1])["status"] == "completed"
    assert (in_tmp / "run" / "metrics.jsonl").read_text() == before


def test_resume_auto_starts_fresh_when_there_is_nothing_to_resume(in_tmp):
    r = invoke("train", "digits/residual8", "--set", "model.widths=[4]", "--epochs", "1", "--out", "new",
               "--resume", "auto")
    assert r.exit_code == 0 and (in_tmp / "new" / "summary.json").exists()


def test_a_run_started_over_in_place_keeps_none_of_its_old_records(in_tmp):
    # A run that wrote records but never a checkpoint (killed before its first one) is started over
    # by --resume auto: its epochs are logged once, as the new run's, not after the old run's lines.
    args = ["train", "digits/residual8", "--set", "model.widths=[4]", "--epochs", "2", "--out", "run"]
    assert invoke(*args).exit_code == 0
    (in_tmp / "run" / "checkpoint.pt").unlink()
    (in_tmp / "run" / "summary.json").unlink()
    r = invoke(*args, "--resume", "auto")
    assert r.exit_code == 0, r.stderr
    epochs = [json.loads(line)["epoch"] for line in (in_tmp / "run" / "metrics.jsonl").read_text().splitlines()
              if json.loads(line).get("event") == "epoch"]
    assert epochs == [1, 2]


HOLDER = r"""
import sys
from resnet_cli.runs.writer import RunDir
RunDir(sys.argv[1]).lock()
print("locked", flush=True)
sys.stdin.read()  # hold it until killed
"""


def test_second_process_on_a_run_dir_is_refused_until_the_holder_dies(in_tmp):
    """The lock is held by another process; SIGKILL of that process releases it (flock)."""
    tiny_run(in_tmp / "run")
    holder = spawn(cmd=[sys.executable, "-c", HOLDER, str(in_tmp / "run")], stdin=subprocess.PIPE, stderr=None)
    try:
        assert holder.stdout.readline().strip() == "locked"
        r = invoke("train", "--resume", "run")
        assert r.exit_code == 4 and "in use" in r.stderr, r.stderr
    finally:
        holder.kill()
        holder.wait()
    r = invoke("train", "--resume", "run")
    assert r.exit_code == 0, r.stderr


@pytest.mark.slow
def test_a_paused_trainer_holds_its_run_dir(tmp_path):
    proc, marker = start_paused(PAUSE_AT, "train", *RUN, "--out", "run", "--json", cwd=tmp_path)
    try:
        r = resnet("train", "--resume", "run", "--json", cwd=tmp_path)
        assert r.returncode == 4 and "in use" in r.stderr, r.stderr
    finally:
        proc.kill()
        proc.wait()


@pytest.mark.parametrize("damage", ["truncate", "garbage", "foreign", "pickle"])
def test_damaged_checkpoints_give_one_line(in_tmp, damage):
    run = tiny_run(in_tmp / "run")
    path = run / "checkpoint.pt"
    if damage == "truncate":
        path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])
    elif damage == "garbage":
        path.write_bytes(os.urandom(4096))
    elif damage == "foreign":
        torch.save({"state_dict": {}}, path)
    else:  # an arbitrary pickled object: refused by weights_only loading
        torch.save({"format": ckpt.FORMAT, "x": Path("/")}, path)
    r = invoke("train", "--resume", "run")
    assert r.exit_code == 2, r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and "checkpoint" in lines[0] and "Traceback" not in r.stderr


@pytest.mark.parametrize("text,needle", [
    ("model: {depth: 20\n", "malformed YAML"),
    ("optim:\n  lr: 0.1\n  lr: 0.2\n", "duplicate key"),
    ("optim:\n  learning_rate: 0.1\n", "optim.learning_rate"),
    ("optim:\n  batch_size: big\n", "optim.batch_size"),
    ("model:\n  depth: 100\n", "nearest"),
    ("\x00\x01binary", "malformed YAML"),  # the project's words, not PyYAML's "special characters"
])
def test_hostile_spec_files(in_tmp, text, needle):
    (in_tmp / "s.yaml").write_text(text)
    r = invoke("train", "s.yaml", "--dry-run")
    assert r.exit_code == 2
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and needle in lines[0], r.stderr


@pytest.mark.slow
def test_closed_pipe_is_quiet(tmp_path):
    # No race: the trainer pauses at step 24 (epoch 2, after epoch 1's line), and is released only
    # once `head` has exited and the reading side has closed the pipe, so its next write must fail.
    marker = tmp_path / "paused"
    cmd = (f"{sys.executable} -m resnet_cli train digits/residual8 --set model.widths=[4] --epochs 3 "
           f"--out {tmp_path / 'run'} --json | {{ head -1; exec 0<&-; "
           f"while [ ! -e {marker} ]; do sleep 0.05; done; rm -f {marker}; }}; echo rc=${{PIPESTATUS[0]}} >&2")
    env = {**ENV, "RESNET_TEST_PAUSE": f"24:{marker}"}
    p = resnet(cmd=["bash", "-c", cmd], env=env)
    assert json.loads(p.stdout)["event"] == "epoch"
    assert "Traceback" not in p.stderr and "rc=141" in p.stderr, p.stderr
    assert (tmp_path / "run" / "checkpoint.pt").exists()  # the work done is kept
    # ...and the run says why it stopped (not a run still training), unlocked and resumable
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert summary["status"] == "stopped: output pipe closed" and summary["epochs"] == 2, summary
    assert not (tmp_path / "run" / ".lock").exists()
    again = here("train", "--resume", tmp_path / "run", "--json")
    assert again.returncode == 0, again.stderr
    assert json.loads(again.stdout.splitlines()[-1])["status"] == "completed"
    assert json.loads((tmp_path / "run" / "summary.json").read_text())["epochs"] == 3
