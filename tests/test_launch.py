"""Launch paths keep the error contract (issue 14, items 13-15): a run that cannot start says so
in one line and leaves nothing behind; `--nproc N` reports a child's bad input once, exit 2;
a finished run removes its .lock; a file that is not our checkpoint gets our own words."""

import json
import os

import pytest
import torch


from invoking import invoke
from processes import ENV, resnet

TINY = ["digits/residual8", "--set", "model.widths=[4]", "--iters", "2", "--set", "train.checkpoint_every=0"]
NO_CIFAR = ["cifar/resnet20", "--set", "data.download=false", "--iters", "2"]


def one_line(r, needle):
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and needle in lines[0] and "Traceback" not in r.stderr, r.stderr
    return lines[0]


@pytest.mark.skipif(torch.cuda.is_available(), reason="needs a machine without CUDA")
@pytest.mark.parametrize("extra", [[], ["--dry-run"]])
def test_device_cuda_without_cuda_is_one_line_and_leaves_no_run_dir(in_tmp, extra):
    r = invoke("train", *TINY, "--device", "cuda", *extra)
    assert r.exit_code == 2
    one_line(r, "no CUDA device")
    assert not (in_tmp / "runs").exists()


def test_missing_dataset_leaves_nothing_and_the_fixed_rerun_starts(in_tmp):
    r = invoke("train", *NO_CIFAR, "--data-dir", in_tmp / "nowhere", "--out", "run")
    assert r.exit_code == 2
    one_line(r, "CIFAR-10 not found")
    assert not (in_tmp / "run").exists()  # no spec.yaml, meta.json or .lock a rerun would trip on
    r = invoke("train", *TINY, "--out", "run")
    assert r.exit_code == 0, r.stderr


def test_a_finished_run_removes_its_lock_and_records_its_precision(in_tmp):
    r = invoke("train", *TINY, "--out", "run")
    assert r.exit_code == 0, r.stderr
    assert sorted(p.name for p in (in_tmp / "run").iterdir()) == [
        "checkpoint.pt", "meta.json", "metrics.jsonl", "spec.yaml", "summary.json"]
    # `auto` is resolved when the run starts and recorded: fp32 on the CPU (He 2016a trained in fp32).
    assert "precision: fp32" in (in_tmp / "run" / "spec.yaml").read_text()
    saved = torch.load(in_tmp / "run" / "checkpoint.pt", weights_only=True)
    assert saved["spec"]["run"]["precision"] == "fp32"
    assert json.loads((in_tmp / "run" / "meta.json").read_text())["precision"] == "fp32"


def test_deterministic_mode_trains_on_the_cpu_and_is_recorded(in_tmp):
    from resnet_cli.training.runtime import set_determinism

    try:
        r = invoke("train", *TINY, "--out", "run", "--set", "run.deterministic=true")
    finally:
        set_determinism(False, cuda=False)  # global torch state: leave it as other tests expect
    assert r.exit_code == 0, r.stderr
    assert json.loads((in_tmp / "run" / "meta.json").read_text())["deterministic"] is True


def test_a_bf16_run_resumed_here_keeps_bf16_or_refuses(in_tmp):
    """A run started with `auto` on a bf16 GPU records bf16; resumed on this CPU it must not
    silently continue in fp32."""
    assert invoke("train", *TINY, "--out", "run").exit_code == 0
    run = in_tmp / "run"
    state = torch.load(run / "checkpoint.pt", weights_only=True)
    state["spec"]["run"]["precision"] = "bf16"
    torch.save(state, run / "checkpoint.pt")
    (run / "spec.yaml").write_text((run / "spec.yaml").read_text().replace("precision: fp32", "precision: bf16"))
    (run / "summary.json").unlink()
    r = invoke("train", "--resume", "run")
    if torch.ops.mkldnn._is_mkldnn_bf16_supported():  # a CPU with native bf16 continues in bf16
        assert r.exit_code == 0, r.stderr
        assert json.loads((run / "meta.json").read_text())["precision"] == "bf16"
    else:
        assert r.exit_code == 2
        one_line(r, "bf16")


def test_random_bytes_checkpoint_gets_our_words_whole(in_tmp):
    assert invoke("train", *TINY, "--out", "run").exit_code == 0
    (in_tmp / "run" / "checkpoint.pt").write_bytes(os.urandom(4096))
    r = invoke("train", "--resume", "run")
    line = one_line(r, "not a loadable checkpoint")
    assert "Re-running" not in line and "weights_only" not in line and line.endswith("start a new one")


def test_pickle_of_foreign_objects_is_not_ours_and_not_unpickled(in_tmp):
    assert invoke("train", *TINY, "--out", "run").exit_code == 0
    torch.save({"format": "resnet-cli/checkpoint-v1", "x": in_tmp}, in_tmp / "run" / "checkpoint.pt")
    r = invoke("train", "--resume", "run")
    line = one_line(r, "not a resnet-cli checkpoint")
    assert "arbitrary code" in line and "Re-running" not in line


@pytest.mark.slow
def test_nproc_child_bad_input_is_reported_once_with_exit_2(tmp_path):
    p = resnet("train", *NO_CIFAR, "--nproc", "2", "--device", "cpu", "--data-dir", tmp_path / "nowhere",
               "--out", tmp_path / "run", cwd=tmp_path,
               env={k: v for k, v in ENV.items() if k != "OMP_NUM_THREADS"})  # as a user's shell has it
    assert p.returncode == 2, p.stderr
    errors = [ln for ln in p.stderr.splitlines() if ln.startswith("resnet: error:")]
    assert len(errors) == 1 and "CIFAR-10 not found" in errors[0], p.stderr
    assert "OMP_NUM_THREADS" not in p.stderr, p.stderr  # torchrun's banner: we set it for the children
    assert "Traceback" not in p.stderr and "ChildFailedError" not in p.stderr, p.stderr
    assert not (tmp_path / "run").exists()


def test_nproc_checks_what_it_can_before_starting_processes(in_tmp):
    r = invoke("train", *TINY, "--nproc", "2")  # no --out
    assert r.exit_code == 2
    one_line(r, "--out")
    r = invoke("train", *TINY, "--nproc", "2", "--device", "cuda:1", "--out", "run")
    assert r.exit_code == 2
    one_line(r, "cuda" if torch.cuda.is_available() else "no CUDA device")
    r = invoke("train", *TINY, "--nproc", "3", "--batch-size", "64", "--out", "run")
    assert r.exit_code == 2
    assert "valid --nproc for this batch: 1, 2, 4, 8" in one_line(r, "optim.batch_size 64")
    # Stochastic depth drops units per process: under DDP the ranks would wait on each other's
    # unused parameters, so it is refused before any process starts.
    r = invoke("train", *TINY, "--nproc", "2", "--set", "model.stochastic_depth=0.5", "--out", "run")
    assert r.exit_code == 2
    one_line(r, "model.stochastic_depth 0.5 runs in one process only")
    assert not (in_tmp / "run").exists()


def test_a_sweep_shows_a_runs_error_line_whole(tmp_path, monkeypatch):
    from resnet_cli.errors import UserError
    from resnet_cli.runs.files import LOG
    from resnet_cli.sweep import launchers, one_run, plan as study, stacks

    line = ("CIFAR-10 not found in /a/rather/long/path/to/the/data/directory/of/this/cluster and "
            "data.download is off: download cifar-10-python.tar.gz from "
            "https://www.cs.toronto.edu/~kriz/cifar-10-python.tar.gz, extract it and pass --data-dir DIR")

    def refuse(plan, run):
        raise UserError(line)

    monkeypatch.setattr(one_run, "run_one", refuse)
    plan = study.plan("shortcut", "quick", results=tmp_path)
    run = plan.runs[0]
    outcome = launchers._run_logged((plan, stacks.Unit((run,))))[run.key]  # what a worker reports for the run
    log = run.path / LOG
    assert outcome.status == "error" and line in outcome.message and outcome.message.endswith(f"(log: {log})")
