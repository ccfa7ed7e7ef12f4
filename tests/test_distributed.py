"""DistributedDataParallel under torchrun on the CPU (gloo): equivalence and restart."""

import json
import os
import signal
import sys
import time
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

from resnet_cli import data as D
from resnet_cli.training import schedule
from resnet_cli import spec as S
from resnet_cli.model import build_model

from processes import children, resnet, spawn, torchrun

pytestmark = pytest.mark.slow  # child processes and kills: `make test` runs them, `make test-quick` does not

ARGS = ["digits/residual8", "--set", "model.widths=[4]", "--iters", "4", "--batch-size", "32",
        "--set", "optim.weight_decay=1e-4", "--set", "train.checkpoint_every=0"]


@pytest.fixture(scope="module")
def two_ranks(tmp_path_factory):
    """`torchrun --nproc-per-node 2 resnet train ARGS`, once for the two tests that read it: its
    printed records and its run directory."""
    out = tmp_path_factory.mktemp("torchrun") / "ddp"
    p = resnet(cmd=torchrun("train", *ARGS, "--out", out, "--json"))
    assert p.returncode == 0, p.stderr
    return [json.loads(line) for line in p.stdout.splitlines()], out


@pytest.mark.xdist_group("two-ranks")  # one worker: the job above runs once
def test_two_gloo_ranks_match_one_process_accumulating_two_half_batches(two_ranks):
    out, run = two_ranks  # rank 0 alone prints
    assert out[-1]["event"] == "summary" and sum(r["event"] == "summary" for r in out) == 1
    ddp = torch.load(run / "checkpoint.pt", weights_only=True)["model"]

    # The reference: one process, each global batch split in the same two halves, gradients summed
    # over the halves (each half's BatchNorm normalises that half, as each rank does).
    spec = S.load(ARGS[0], sets=[a for a in ARGS[1:] if "=" in a and not a.startswith("--")],
                   overrides=[("optim.iters", 4), ("optim.epochs", None), ("optim.milestones", None),
                              ("optim.batch_size", 32)])
    torch.manual_seed(spec.run.seed)
    data = D.load(spec.data)
    model = build_model(spec.model, data.in_channels, data.num_classes)
    o = spec.optim
    opt = torch.optim.SGD(model.parameters(), lr=o.lr, momentum=o.momentum, weight_decay=o.weight_decay)
    # data.shuffle: global (the digits configs): the order is the next draw after the init,
    # rank 0's broadcast to both ranks
    assert spec.data.shuffle == "global"
    order = torch.randperm(len(data.train))
    for i in range(4):
        for g in opt.param_groups:
            g["lr"] = schedule.lr_at(i, o, 45)
        opt.zero_grad()
        for half in order[i * 32:(i + 1) * 32].tensor_split(2):
            (F.cross_entropy(model(data.train.x[half]), data.train.y[half]) / 2).backward()
        opt.step()
    for name, p_ref in model.named_parameters():
        torch.testing.assert_close(ddp[name], p_ref.detach(), atol=1e-5, rtol=1e-5, msg=name)


@pytest.mark.xdist_group("two-ranks")
def test_nproc_2_is_the_same_job_as_torchrun(tmp_path, two_ranks):
    """README: `resnet train ... --nproc 2` launches torchrun for you: the same two ranks, bitwise."""
    q = resnet("train", *ARGS, "--nproc", "2", "--out", tmp_path / "nproc", "--json")
    assert q.returncode == 0, q.stderr
    summary = json.loads((tmp_path / "nproc" / "summary.json").read_text())
    assert summary["status"] == "completed" and summary["iterations"] == 4
    assert json.loads((tmp_path / "nproc" / "meta.json").read_text()).get("world_size", 2) == 2
    a = torch.load(two_ranks[1] / "checkpoint.pt", weights_only=True)["model"]
    b = torch.load(tmp_path / "nproc" / "checkpoint.pt", weights_only=True)["model"]
    assert all(torch.equal(a[k], b[k]) for k in a)


POISON_RANK_1 = r"""
import os, sys
import torch
import torch.nn.functional as F
from resnet_cli.cli import main

calls = [0]
plain = F.cross_entropy

def poisoned(*args, **kw):  # rank 1 alone turns NaN from its 4th training step on (evaluation: no_grad)
    loss = plain(*args, **kw)
    if not torch.is_grad_enabled():
        return loss
    calls[0] += 1
    return loss * float("nan") if os.environ["RANK"] == "1" and calls[0] > 3 else loss

F.cross_entropy = poisoned
sys.argv = ["resnet", *sys.argv[1:]]
main()
"""


def test_a_divergence_on_one_rank_stops_both(tmp_path):
    script = tmp_path / "poison.py"
    script.write_text(POISON_RANK_1)
    args = ["train", "digits/residual8", "--set", "model.widths=[4]", "--iters", "40", "--batch-size", "32",
            "--set", "train.checkpoint_every=2", "--out", str(tmp_path / "run"), "--json"]
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2", str(script), *args]
    p = resnet(cmd=cmd)  # no hang: both ranks stop
    assert p.returncode != 0
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert summary["status"] == "diverged" and summary["diverged_at"]["iter"] == 4, summary
    state = torch.load(tmp_path / "run" / "checkpoint.pt", weights_only=True)
    assert state["progress"]["iteration"] == 2  # the last good checkpoint, before the NaN step
    assert all(torch.isfinite(v).all() for v in state["model"].values() if v.is_floating_point())


def _local_rank(pid: int) -> str | None:
    try:
        env = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    except OSError:
        return None
    for item in env:
        if item.startswith(b"LOCAL_RANK="):
            return item.split(b"=", 1)[1].decode()
    return None


def test_a_killed_rank_resumes_under_max_restarts(tmp_path):
    args = ["train", "digits/residual8", "--set", "model.widths=[8]", "--batch-size", "16", "--epochs", "2",
            "--set", "train.checkpoint_every=10", "--out", tmp_path / "run", "--resume", "auto", "--json"]
    proc = spawn(cmd=torchrun(*args, extra=["--max-restarts=1"]), start_new_session=True)
    try:
        ckpt = tmp_path / "run" / "checkpoint.pt"
        t0 = time.time()
        while not ckpt.exists():
            assert proc.poll() is None and time.time() - t0 < 120, proc.communicate()
            time.sleep(0.01)
        victim = next(pid for pid in children(proc.pid) if _local_rank(pid) == "1")
        os.kill(victim, signal.SIGKILL)
        out, err = proc.communicate(timeout=300)
    finally:  # never leave a hung process group behind a failed test
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    assert proc.returncode == 0, err
    assert "resuming" in err
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert summary["status"] == "completed" and summary["iterations"] == 2 * 90
    assert json.loads(out.splitlines()[-1])["status"] == "completed"
