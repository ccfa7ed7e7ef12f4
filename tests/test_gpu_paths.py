"""The CUDA-path decisions whose logic runs on the CPU: compile with activation checkpointing,
RNG state per device and rank, precision resolution, TF32, device choice under torchrun."""

import copy
import os

import pytest
import torch
import torch.nn.functional as F

from resnet_cli.training import checkpoint as ckpt
from resnet_cli.training import distributed, runtime
from resnet_cli import spec as S
from resnet_cli.errors import UserError
from resnet_cli.model import build_model

from processes import in_child, resnet



def _tiny(segments: int = 0):
    spec = S.load(None, [("data.dataset", "synthetic"), ("model.depth", 8), ("model.widths", [4, 8, 16])])
    torch.manual_seed(0)
    model = build_model(spec.model, 3, 10)
    model.checkpoint_segments = segments
    return model


def compiled_checkpointed_step_matches_eager() -> None:
    eager = _tiny(0)
    compiled_net = copy.deepcopy(eager)
    compiled_net.checkpoint_segments = 2
    x, y = torch.randn(6, 3, 16, 16), torch.randint(0, 10, (6,))
    F.cross_entropy(eager(x), y).backward()
    F.cross_entropy(torch.compile(compiled_net)(x), y).backward()
    for (name, p), q in zip(eager.named_parameters(), compiled_net.parameters()):
        torch.testing.assert_close(q.grad, p.grad, rtol=1e-4, atol=1e-5, msg=name)
    for (name, b), c in zip(eager.named_buffers(), compiled_net.buffers()):
        torch.testing.assert_close(c, b, rtol=1e-5, atol=1e-6, msg=name)


@pytest.mark.slow  # torch.compile: about a minute on a CPU
def test_compile_with_activation_checkpointing_matches_eager():
    """Dynamo refuses a lambda built inside forward as checkpoint's context_fn (issue 14, item 1);
    the compiled, checkpointed step must give the eager, plain step's gradients and BN statistics
    (the recomputation must not update the running statistics a second time). In a child: inductor's
    compile workers and caches stay in the process that compiled."""
    p = in_child("from test_gpu_paths import compiled_checkpointed_step_matches_eager as f; f()")
    assert p.returncode == 0, p.stderr[-3000:]


# -- device choice (issue 14, item 9) ------------------------------------------------------------

@pytest.mark.parametrize("requested,count,local_rank,torchrun,expected", [
    ("auto", 0, 0, False, "cpu"),
    ("cpu", 4, 0, False, "cpu"),
    ("auto", 2, 0, False, "cuda:0"),
    ("cuda", 2, 0, False, "cuda:0"),
    ("cuda:1", 2, 0, False, "cuda:1"),
    ("cuda", 4, 3, True, "cuda:3"),  # torchrun: each rank its local rank's GPU
    ("auto", 4, 2, True, "cuda:2"),
    ("cpu", 4, 2, True, "cpu"),  # gloo on the CPU
    ("auto", 0, 1, True, "cpu"),
])
def test_choose_device(requested, count, local_rank, torchrun, expected):
    assert str(runtime.choose_device(requested, count, local_rank, torchrun)) == expected


@pytest.mark.parametrize("requested,count,local_rank,torchrun,needle", [
    ("cuda", 0, 0, False, "no CUDA device"),
    ("cuda:0", 0, 0, False, "no CUDA device"),
    ("cuda:2", 2, 0, False, "only 2 CUDA device(s)"),
    ("cuda:1", 4, 0, True, "every rank on one GPU"),
    ("cuda", 2, 2, True, "local rank 2 has no GPU"),
])
def test_choose_device_refuses_in_one_line(requested, count, local_rank, torchrun, needle):
    with pytest.raises(UserError) as err:
        runtime.choose_device(requested, count, local_rank, torchrun)
    assert needle in err.value.message and "\n" not in err.value.message


# -- precision (items 7, 8, 10) ------------------------------------------------------------------

@pytest.mark.parametrize("capability,expected", [
    ((7, 0), "fp16"),  # V100: bf16 emulated only
    ((7, 5), "fp16"),  # T4
    ((8, 0), "bf16"),  # A100
    ((8, 6), "bf16"),
    ((9, 0), "bf16"),  # H100/H200
])
def test_auto_precision_on_gpus_follows_native_bf16(capability, expected):
    assert runtime.resolve_precision("auto", "cuda", capability) == expected


def test_auto_precision_on_the_cpu_is_fp32_and_fp16_there_is_refused():
    assert runtime.resolve_precision("auto", "cpu") == "fp32"
    assert runtime.resolve_precision("fp32", "cuda", (9, 0)) == "fp32"
    with pytest.raises(UserError, match="fp16"):
        runtime.resolve_precision("fp16", "cpu")
    with pytest.raises(UserError, match="bf16"):
        runtime.resolve_precision("bf16", "cpu", cpu_bf16=False)


@pytest.mark.parametrize("precision,scaled,dtype", [("fp16", True, torch.float16), ("bf16", False, torch.bfloat16),
                                                    ("fp32", False, None)])
def test_grad_scaler_only_for_fp16(precision, scaled, dtype):
    rt = runtime.Runtime(torch.device("cpu"), precision, channels_last=False)
    assert rt.scaler().is_enabled() is scaled
    with rt.autocast():
        out = torch.nn.functional.linear(torch.randn(2, 3), torch.randn(4, 3))
    assert out.dtype == (dtype or torch.float32)


def test_fp32_turns_tf32_off_and_bf16_leaves_cudnn_tf32_on():
    before = runtime.tf32_allowed()
    try:
        runtime.set_tf32(False)
        assert runtime.tf32_allowed() == (False, False)
        runtime.set_tf32(True)
        assert runtime.tf32_allowed() == (True, True)
    finally:
        runtime.set_tf32(before[0])


def test_select_on_cuda_sets_tf32_by_precision(monkeypatch):
    """select() itself, with CUDA faked: fp32 must switch TF32 off, bf16 leave it on."""
    calls = []
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: (9, 0))
    monkeypatch.setattr(torch.cuda, "set_device", lambda device: None)
    monkeypatch.setattr(runtime, "set_tf32", calls.append)
    monkeypatch.setattr(runtime, "set_determinism", lambda on, cuda: None)
    for precision, allowed in (("fp32", False), ("auto", True), ("fp16", True)):
        spec = S.load(None, [("run.precision", precision), ("run.device", "cuda")])
        rt = runtime.select(spec.run, spec.train)
        assert calls[-1] is allowed, precision
        assert rt.precision == {"auto": "bf16"}.get(precision, precision)


def test_deterministic_mode_sets_every_switch(monkeypatch):
    monkeypatch.delenv("CUBLAS_WORKSPACE_CONFIG", raising=False)
    try:
        runtime.set_determinism(True, cuda=True)
        assert torch.are_deterministic_algorithms_enabled()
        assert torch.backends.cudnn.deterministic and not torch.backends.cudnn.benchmark
        assert os.environ["CUBLAS_WORKSPACE_CONFIG"] in (":4096:8", ":16:8")  # PyTorch's documented values
        runtime.set_determinism(False, cuda=True)
        assert not torch.are_deterministic_algorithms_enabled()
        assert torch.backends.cudnn.benchmark and not torch.backends.cudnn.deterministic
    finally:
        runtime.set_determinism(False, cuda=False)


# -- RNG state per device and rank (item 2) ------------------------------------------------------

class FakeCudaRng:
    """torch.cuda's RNG functions on a machine with `count` GPUs, recording what is set where."""

    def __init__(self, monkeypatch, count):
        self.count, self.set_calls = count, []
        monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
        monkeypatch.setattr(torch.cuda, "device_count", lambda: count)
        monkeypatch.setattr(torch.cuda, "get_rng_state", self.get)
        monkeypatch.setattr(torch.cuda, "set_rng_state", self.set)
        monkeypatch.setattr(torch.cuda, "get_rng_state_all", lambda: [self.get(i) for i in range(count)])
        monkeypatch.setattr(torch.cuda, "set_rng_state_all", lambda states: [self.set(s, i) for i, s in enumerate(states)])

    def _index(self, device):
        index = device.index if isinstance(device, torch.device) else int(device)
        if index >= self.count:
            raise RuntimeError(f"invalid device ordinal {index}")  # what CUDA says
        return index

    def get(self, device="cuda"):
        return torch.full((16,), 10 + self._index(device), dtype=torch.uint8)

    def set(self, state, device="cuda"):
        self.set_calls.append((self._index(device), int(state[0])))


def test_rng_saved_on_four_gpus_restores_on_a_machine_with_one(monkeypatch):
    FakeCudaRng(monkeypatch, 4)
    saved = ckpt.rng_state(torch.device("cuda", 2))  # the run's own device: GPU 2
    assert int(saved["cuda"][0]) == 12
    one = FakeCudaRng(monkeypatch, 1)
    ckpt.set_rng_state(saved, torch.device("cuda", 0))
    assert one.set_calls == [(0, 12)]  # GPU 2's stream continues on this machine's GPU 0


def test_rng_of_a_cpu_run_restores_on_a_gpu_and_back(monkeypatch):
    fake = FakeCudaRng(monkeypatch, 2)
    cpu_state = ckpt.rng_state(torch.device("cpu"))
    assert "cuda" not in cpu_state
    ckpt.set_rng_state(cpu_state, torch.device("cuda", 1))
    ckpt.set_rng_state(ckpt.rng_state(torch.device("cuda", 1)), torch.device("cpu"))
    assert fake.set_calls == []


def test_each_rank_restores_its_own_entry():
    states = [{"rank": 0}, {"rank": 1}]
    assert ckpt.rank_rng_state(states, 1) == {"rank": 1}
    assert ckpt.rank_rng_state(states, 2) is None  # resumed with more processes: fresh stream
    assert ckpt.rank_rng_state({"rank": 0}, 0) == {"rank": 0}  # one-dict checkpoints of before
    assert len({distributed.rank_seed(7, r) for r in range(8)}) == 8 and distributed.rank_seed(7, 0) == 7


# -- DDP on two gloo ranks: items 2, 4, 11 -------------------------------------------------------

@pytest.mark.slow  # two torchrun ranks
def test_two_ranks_own_rng_streams_grad_norms_once_and_sharded_evaluation(tmp_path):
    import json

    from resnet_cli import data as D

    out = tmp_path / "ddp"
    args = ["digits/residual8", "--set", "model.widths=[4]", "--iters", "4", "--batch-size", "32",
            "--set", "train.checkpoint_every=0", "--set", "train.grad_norm_every=2", "--device", "cpu",
            "--set", "data.shuffle=keyed"]  # global shuffling is one process's
    p = resnet("train", *args, "--nproc", "2", "--out", out, "--json", cwd=tmp_path)
    assert p.returncode == 0, p.stderr
    summary = json.loads(p.stdout.splitlines()[-1])
    records = [json.loads(ln) for ln in (out / "metrics.jsonl").read_text().splitlines()]
    # Steps 1 and 3 measured (every 2), written once: by rank 0 alone.
    assert [r["iter"] for r in records if r["event"] == "grad_norm"] == [1, 3]
    state = torch.load(out / "checkpoint.pt", weights_only=True)
    assert len(state["rng"]) == 2  # one entry per rank, each rank seeded apart
    assert not torch.equal(state["rng"][0]["torch"], state["rng"][1]["torch"])
    # The sharded, all-reduced evaluation equals evaluating the saved model on the whole test split.
    spec = S.load(str(out / "spec.yaml"))
    data = D.load(spec.data)
    model = build_model(spec.model, data.in_channels, data.num_classes)
    model.load_state_dict(state["model"])
    model.eval()
    with torch.no_grad():
        logits = model(data.test.x)
    assert summary["test_error"] == pytest.approx(100.0 * (logits.argmax(1) != data.test.y).float().mean().item())
    assert summary["test_loss"] == pytest.approx(F.cross_entropy(logits, data.test.y).item(), rel=1e-5)


# -- make gpu-check, as far as a CPU can run it ---------------------------------------------------

def _check_module():
    import importlib.util
    from pathlib import Path

    path = Path(__file__).parent / "gpu" / "check.py"
    spec = importlib.util.spec_from_file_location("gpu_check", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.slow  # pytest in a child
@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the no-CUDA path")
def test_gpu_check_without_cuda_writes_a_skipped_summary_and_tests_gpu_skip_as_one(tmp_path):
    import json
    import subprocess
    import sys

    check = _check_module()
    assert check.main(["--out", str(tmp_path / "s.json")]) == 0
    summary = json.loads((tmp_path / "s.json").read_text())
    assert summary["result"].startswith("skipped") and summary["environment"]["torch"] == torch.__version__
    p = subprocess.run([sys.executable, "-m", "pytest", str(check.ROOT / "tests" / "gpu"), "-q", "-rs", "-p",
                        "no:cacheprovider"], capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert p.returncode in (0, 5), p.stdout  # 5: pytest's "no tests ran" when the one module is skipped
    assert [ln for ln in p.stdout.splitlines() if ln.startswith("SKIPPED")] == [
        next(ln for ln in p.stdout.splitlines() if ln.startswith("SKIPPED"))] and "SKIPPED [1]" in p.stdout and "no CUDA device" in p.stdout


@pytest.mark.slow  # resnet bench in a child
def test_gpu_check_reads_the_bench_rows_it_reports(in_tmp):
    """The figures come from `resnet bench --json`: run the check's own reader on a tiny CPU bench."""
    check = _check_module()
    row = check.run_bench("cifar/resnet20", compiled=False, timeout=300, steps=2,
                          extra=("--set", "model.widths=[4,8,16]", "--batch-size", "16", "--device", "cpu"))
    assert row["status"] == "ok", row
    assert row["images_per_s"] > 0 and row["schedule_iters"] > 0 and row["projected_schedule_min"] > 0
    assert row["goal_min"] is None and row["batch_size"] == 16


@pytest.mark.slow  # resnet bench --stack in a child
def test_gpu_check_reads_the_stacked_rows_it_reports(in_tmp):
    """The stacked-seeds figures come from `resnet bench --stack 1,8 --json`: the check's reader on a
    tiny CPU net, whose per-seed rates are the bench's rates over k (a rate misread as per seed, or
    the k=1 row read as k=8, fails)."""
    check = _check_module()
    row = check.run_stack_bench("tiny", ("cifar/resnet20", "--set", "data.dataset=digits", "--set", "model.depth=8",
                                         "--set", "model.widths=[4,8,16]", "--threads", "1", "--device", "cpu"), 300)
    assert row["status"] == "ok" and row["device"] == "cpu", row
    assert row["separate_images_per_s_per_seed_k1"] == pytest.approx(8 * row["separate_images_per_s_per_seed_k8"],
                                                                     rel=0.01)
    assert row["ratio_k8"] == pytest.approx(row["stacked_images_per_s_per_seed_k8"]
                                            / row["separate_images_per_s_per_seed_k8"], rel=0.05)


# -- resnet bench: no CUDA context in the parent (item 12) ---------------------------------------

def test_bench_parent_checks_the_device_without_touching_the_gpu(monkeypatch, in_tmp):
    from typer.testing import CliRunner

    from resnet_cli import bench as bench_mod
    from resnet_cli.cli import app

    def no_context(*a, **k):
        raise AssertionError("the bench parent created a CUDA context")

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    for name in ("set_device", "get_device_capability", "get_device_properties", "init", "_lazy_init"):
        monkeypatch.setattr(torch.cuda, name, no_context)
    monkeypatch.setattr(bench_mod, "bench", lambda *a, **k: [])  # the children are not the point here
    r = CliRunner().invoke(app, ["bench", "cifar/resnet20", "--device", "cuda", "--no-baseline", "--json"])
    assert "CUDA context" not in str(r.exception), r.exception
    r = CliRunner().invoke(app, ["bench", "cifar/resnet20", "--device", "cuda:3", "--json"])
    assert r.exit_code == 2 and "only 1 CUDA device" in r.stderr


def test_gpu_check_summary_passes_with_unreached_runs_and_fails_on_a_failed_one(tmp_path, monkeypatch):
    import json

    check = _check_module()
    monkeypatch.setattr(check, "environment", lambda: {"cuda_available": True})
    monkeypatch.setattr(check, "run_tests", lambda timeout, junit: {"status": "passed", "tests": {}})

    def bench(spec, compiled, timeout):
        if compiled and "1001" in spec:
            return {"spec": spec, "compile": True, "status": "timed out after 30 s"}
        return {"spec": spec, "compile": compiled, "status": "ok", "images_per_s": 9e3, "projected_schedule_min": 9.0}

    def stack(name, args, timeout):
        if name == "cifar-20":
            return {"spec": name, "stack": 8, "status": "timed out after 90 s"}
        return {"spec": name, "stack": 8, "status": "ok", "stacked_images_per_s_per_seed_k8": 190.0,
                "separate_images_per_s_per_seed_k8": 135.0, "ratio_k8": 1.41}

    monkeypatch.setattr(check, "run_bench", bench)
    monkeypatch.setattr(check, "run_stack_bench", stack)
    assert check.main(["--out", str(tmp_path / "a.json")]) == 0
    a = json.loads((tmp_path / "a.json").read_text())
    assert a["result"] == "passed" and a["incomplete"] == [
        "preact/resnet1001-cifar10 compile=True: timed out after 30 s", "cifar-20 --stack 8: timed out after 90 s"]
    assert a["goals"]["cifar/resnet110"] == {"goal_min": 10.0, "best_min": 9.0}
    assert [r["spec"] for r in a["stack"]] == ["digits-110", "cifar-20"] and a["stack"][0]["ratio_k8"] == 1.41
    monkeypatch.setattr(check, "run_stack_bench", lambda name, args, timeout: {"spec": name, "stack": 8,
                                                                               "status": "failed (exit 1)"})
    assert check.main(["--out", str(tmp_path / "c.json")]) == 1  # a stacked bench that fails fails the check
    monkeypatch.setattr(check, "run_bench", lambda spec, compiled, timeout: {"spec": spec, "compile": compiled,
                                                                             "status": "failed (exit 1)"})
    assert check.main(["--out", str(tmp_path / "b.json")]) == 1
    assert json.loads((tmp_path / "b.json").read_text())["result"] == "failed"
