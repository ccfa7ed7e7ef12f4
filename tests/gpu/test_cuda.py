"""The CUDA paths, run on a GPU (`make gpu-check`; skipped as one module where there is no CUDA).

Each test is small: tiny digits nets, a few steps, except the one ResNet-1001 step with activation
checkpointing. They check what cannot be checked on a CPU: bf16/fp16 autocast, channels_last,
compile, bitwise resume under `run.deterministic`, analyses against the CPU, NCCL.
"""

import copy
import json
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest
import torch

if not torch.cuda.is_available():
    pytest.skip("no CUDA device: the GPU checks in tests/gpu are skipped", allow_module_level=True)

import torch.nn.functional as F  # noqa: E402

from resnet_cli.training import checkpoint as ckpt  # noqa: E402
from resnet_cli.training import runtime  # noqa: E402
from resnet_cli import spec as S  # noqa: E402
from resnet_cli.model import build_model  # noqa: E402

import processes  # noqa: E402  (tests/processes.py: the one way the tests start `resnet`)

pytestmark = pytest.mark.gpu
TINY = ["digits/residual8", "--set", "model.widths=[8]", "--set", "train.checkpoint_every=0"]
ENV = {**os.environ, "PYTHONUNBUFFERED": "1"}  # all the CPU threads: unlike processes.ENV, not 1


def resnet(*args, cwd=None, timeout=600):
    return processes.resnet(*args, cwd=cwd, env=ENV, timeout=timeout)


def summary_of(p):
    assert p.returncode == 0, p.stderr[-3000:]
    return json.loads(p.stdout.splitlines()[-1])


def weights(run: Path):
    return torch.load(run / "checkpoint.pt", weights_only=True, map_location="cpu")["model"]


def test_auto_training_on_cuda_bf16_channels_last(tmp_path):
    s = summary_of(resnet("train", *TINY, "--iters", "60", "--device", "cuda", "--set", "train.channels_last=on",
                          "--out", tmp_path / "r", "--json"))
    meta = json.loads((tmp_path / "r" / "meta.json").read_text())
    major = torch.cuda.get_device_capability()[0]
    assert meta["precision"] == ("bf16" if major >= 8 else "fp16") and meta["channels_last"]
    assert f"precision: {meta['precision']}" in (tmp_path / "r" / "spec.yaml").read_text()
    assert s["status"] == "completed" and s["train_loss"] < 2.0  # digits: chance is ln 10 = 2.30


def test_fp16_with_grad_scaler_trains_and_saves_the_scale(tmp_path):
    s = summary_of(resnet("train", *TINY, "--iters", "60", "--device", "cuda", "--set", "run.precision=fp16",
                          "--out", tmp_path / "r", "--json"))
    assert s["status"] == "completed" and s["train_loss"] < 2.0
    state = torch.load(tmp_path / "r" / "checkpoint.pt", weights_only=True)
    assert state["scaler"]["scale"] > 0 and state["spec"]["run"]["precision"] == "fp16"


def test_compile_with_checkpointing_on_cuda_matches_eager():
    spec = S.load(None, [("data.dataset", "synthetic"), ("model.depth", 8)])  # 3 units: compiles in seconds
    torch.manual_seed(0)
    eager = build_model(spec.model, 3, 10).cuda()
    compiled = copy.deepcopy(eager)
    compiled.checkpoint_segments = 3
    x, y = torch.randn(16, 3, 32, 32, device="cuda"), torch.randint(0, 10, (16,), device="cuda")
    runtime.set_tf32(False)
    F.cross_entropy(eager(x), y).backward()
    F.cross_entropy(torch.compile(compiled)(x), y).backward()
    for (name, p), q in zip(eager.named_parameters(), compiled.parameters()):
        torch.testing.assert_close(q.grad, p.grad, rtol=1e-3, atol=1e-4, msg=name)


def test_checkpointing_cuts_resnet1001_peak_memory():
    spec = S.load("preact/resnet1001-cifar10")
    torch.manual_seed(0)
    model = build_model(spec.model, 3, 10).cuda().to(memory_format=torch.channels_last)
    x = torch.randn(64, 3, 32, 32, device="cuda").contiguous(memory_format=torch.channels_last)
    y = torch.randint(0, 10, (64,), device="cuda")
    peaks, losses = [], []
    for segments in (0, 12):
        model.checkpoint_segments = segments
        model.zero_grad(set_to_none=True)
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        base = torch.cuda.memory_allocated()
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = F.cross_entropy(model(x).float(), y)
        loss.backward()
        torch.cuda.synchronize()
        peaks.append(torch.cuda.max_memory_allocated() - base)
        losses.append(loss.item())
    assert peaks[1] < 0.5 * peaks[0], peaks  # Chen et al. 2016: O(sqrt(n)) stored activations
    assert abs(losses[0] - losses[1]) < 1e-2


def test_deterministic_runs_are_bitwise_equal_and_kill9_resume_too(tmp_path):
    args = [*TINY, "--iters", "60", "--device", "cuda", "--set", "run.deterministic=true",
            "--set", "train.checkpoint_every=10", "--json"]
    summary_of(resnet("train", *args, "--out", tmp_path / "a"))
    summary_of(resnet("train", *args, "--out", tmp_path / "b"))
    wa, wb = weights(tmp_path / "a"), weights(tmp_path / "b")
    assert all(torch.equal(wa[k], wb[k]) for k in wa), "two deterministic CUDA runs differ"
    proc = processes.spawn("train", *args, "--out", "k", cwd=tmp_path, env=ENV, stdout=subprocess.DEVNULL,
                           stderr=subprocess.DEVNULL)
    t0 = time.time()
    while not (tmp_path / "k" / "checkpoint.pt").exists() and proc.poll() is None and time.time() - t0 < 300:
        time.sleep(0.01)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    at = torch.load(tmp_path / "k" / "checkpoint.pt", weights_only=True)["progress"]["iteration"]
    assert at < 60
    summary_of(resnet("train", "--resume", tmp_path / "k", "--json"))
    wk = weights(tmp_path / "k")
    assert all(torch.equal(wa[k], wk[k]) for k in wa), f"kill -9 at iteration {at} and resume differs"


def test_cuda_rng_state_round_trips_on_the_run_device():
    device = torch.device("cuda", torch.cuda.device_count() - 1)
    state = ckpt.rng_state(device)
    a = torch.rand(4, device=device)
    ckpt.set_rng_state(state, device)
    assert torch.equal(a, torch.rand(4, device=device))


def test_fp32_analyses_on_cuda_agree_with_the_cpu():
    """Item 7: fp32 on CUDA is fp32 (TF32 off): evaluation and gradients match the CPU closely."""
    spec = S.load(None, [("data.dataset", "synthetic"), ("model.depth", 20)])
    torch.manual_seed(0)
    cpu = build_model(spec.model, 3, 10)
    gpu = copy.deepcopy(cpu).cuda()
    x, y = torch.randn(64, 3, 32, 32), torch.randint(0, 10, (64,))
    runtime.analysis_runtime(torch.device("cuda"))
    assert runtime.tf32_allowed() == (False, False)
    F.cross_entropy(cpu(x), y).backward()
    F.cross_entropy(gpu(x.cuda()), y.cuda()).backward()
    for (name, p), q in zip(cpu.named_parameters(), gpu.parameters()):
        torch.testing.assert_close(q.grad.cpu(), p.grad, rtol=1e-4, atol=1e-5, msg=name)


def test_one_process_nccl_ddp(tmp_path):
    p = processes.resnet(cmd=processes.torchrun("train", *TINY, "--iters", "20", "--device", "cuda",
                                                "--out", tmp_path / "r", "--json", nproc=1), env=ENV, timeout=600)
    assert summary_of(p)["status"] == "completed"


@pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs two GPUs")
def test_two_process_nccl_ddp_with_sync_bn(tmp_path):
    s = summary_of(resnet("train", *TINY, "--iters", "20", "--device", "cuda", "--nproc", "2",
                          "--set", "train.sync_bn=true", "--set", "data.shuffle=keyed", "--out", tmp_path / "r", "--json"))
    assert s["status"] == "completed"
    assert len(torch.load(tmp_path / "r" / "checkpoint.pt", weights_only=True)["rng"]) == 2


def test_nproc_beyond_the_visible_gpus_is_one_line(tmp_path):
    n = torch.cuda.device_count() + 1
    p = resnet("train", *TINY, "--iters", "2", "--device", "cuda", "--nproc", n, "--out", tmp_path / "r")
    assert p.returncode == 2 and "Traceback" not in p.stderr
    assert [ln for ln in p.stderr.splitlines() if ln.startswith("resnet: error:")][0].count("GPU") >= 1


def test_stacked_seeds_on_cuda_end_near_their_separate_runs(tmp_path):
    """`train --seeds 0,1 --stack` on CUDA in fp32: one stack (meta.json says so), and each seed's
    weights end far nearer its own separate run than the other seed's (a grouped cuDNN kernel sums
    in another order, so not bitwise; a member written into the other seed's directory fails)."""
    args = ["train", *TINY, "--iters", "20", "--device", "cuda", "--set", "run.precision=fp32",
            "--set", "data.shuffle=keyed", "--seeds", "0,1", "--json"]  # the article's global shuffle does not stack
    for out, extra in (("st", ["--stack"]), ("sep", [])):
        p = resnet(*args, *extra, "--out", tmp_path / out)
        assert p.returncode == 0, p.stderr[-3000:]
    for seed in (0, 1):
        meta = json.loads((tmp_path / "st" / f"seed{seed}" / "meta.json").read_text())
        assert meta["stack"]["seeds"] == [0, 1]
    mine, own, other = (weights(tmp_path / d / s) for d, s in (("st", "seed0"), ("sep", "seed0"), ("sep", "seed1")))
    gap = lambda a, b: max((a[k] - b[k]).abs().max().item() for k in a if a[k].is_floating_point())  # noqa: E731
    # Relative, as a value within rounding of a ReLU's kink can send a member down a slightly
    # different path (tests/test_stacked.py): the same runs on this project's CPU: 1.3e-7 against 0.72.
    assert gap(mine, own) < 0.1 * gap(mine, other), (gap(mine, own), gap(mine, other))
