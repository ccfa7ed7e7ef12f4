"""`resnet train` end to end on tiny digits nets: output contract, run directory, determinism."""

import json

import pytest
import torch

from resnet_cli.training import schedule
from resnet_cli import spec as S

from invoking import invoke
from processes import ENV, resnet, spawn

TINY = ["digits/residual8", "--set", "model.widths=[4]", "--epochs", "2"]


def json_lines(text):
    lines = [ln for ln in text.splitlines() if ln.strip()]
    return [json.loads(ln) for ln in lines]  # every stdout line must parse


def test_train_writes_json_lines_and_a_complete_run_dir(in_tmp):
    r = invoke("train", *TINY, "--out", "run")
    assert r.exit_code == 0, r.stderr
    records = json_lines(r.stdout)
    assert [x["event"] for x in records] == ["epoch", "epoch", "summary"]
    summary = records[-1]
    for key in ("test_error", "train_loss", "train_error", "params", "status", "run_dir"):
        assert key in summary
    assert summary["status"] == "completed" and summary["run_dir"] == "run"
    run = in_tmp / "run"
    for name in ("spec.yaml", "meta.json", "metrics.jsonl", "checkpoint.pt", "summary.json"):
        assert (run / name).is_file(), name
    meta = json.loads((run / "meta.json").read_text())
    for key in ("versions", "git_commit", "device", "seed", "command"):
        assert key in meta
    assert meta["data_source"] == "bundled with scikit-learn"
    import torch
    import torchvision

    assert meta["versions"]["torch"] == torch.__version__
    assert meta["versions"]["torchvision"] == torchvision.__version__  # read from its file, not imported
    assert len((run / "metrics.jsonl").read_text().splitlines()) == 2
    # the resolved spec reruns the same experiment
    assert S.load(str(run / "spec.yaml")).model.depth == 8


def test_same_seed_same_result_on_cpu(in_tmp):
    a = json_lines(invoke("train", *TINY, "--out", "a", "--seed", 3).stdout)[-1]
    b = json_lines(invoke("train", *TINY, "--out", "b", "--seed", 3).stdout)[-1]
    c = json_lines(invoke("train", *TINY, "--out", "c", "--seed", 4).stdout)[-1]
    assert a["train_loss"] == b["train_loss"] and a["test_error"] == b["test_error"]
    assert a["train_loss"] != c["train_loss"]
    wa = torch.load(in_tmp / "a" / "checkpoint.pt", weights_only=True)["model"]
    wb = torch.load(in_tmp / "b" / "checkpoint.pt", weights_only=True)["model"]
    assert all(torch.equal(wa[k], wb[k]) for k in wa)


def test_dry_run_trains_nothing(in_tmp):
    r = invoke("train", "--depth", 1001, "--preact", "--dry-run", "--json")
    assert r.exit_code == 0
    (rec,) = json_lines(r.stdout)
    assert rec["params"] == pytest.approx(10.2e6, rel=0.02)
    assert rec["spec"]["model"]["block"] == "bottleneck"
    assert not (in_tmp / "runs").exists()


def test_existing_run_is_never_overwritten(in_tmp):
    assert invoke("train", *TINY, "--out", "run").exit_code == 0
    before = (in_tmp / "run" / "summary.json").read_text()
    r = invoke("train", *TINY, "--out", "run")
    assert r.exit_code == 2 and "already holds a run" in r.stderr
    assert (in_tmp / "run" / "summary.json").read_text() == before


@pytest.mark.parametrize("args,needle", [
    (["--depth", 7, "--dataset", "synthetic", "--dry-run"], "6n+2"),
    (["--depth", 1000, "--set", "model.block=bottleneck", "--dry-run"], "9n+2"),
    (["--set", "model.unit=preact", "--dry-run"], "full_preact"),
    (["--set", "model.shortcut.kind=gate", "--dry-run"], "exclusive_gate"),
    (["--dataset", "cifar10", "--data-dir", "nowhere", "--set", "data.download=false", "--iters", 1], "--data-dir"),
    (["--epochs", 1, "--iters", 1], "exclusive"),
    # a spec path that is not there names itself, never trains the bundled config of the same file name
    (["/home/me/experiments/resnet110.yaml", "--dry-run"], "/home/me/experiments/resnet110.yaml: no such spec file"),
    (["experiments/resnet110", "--dry-run"], "cifar/resnet110"),
    (["resnet110.yml", "--dry-run"], "resnet configs"),
    # digits are scikit-learn's: a data.dir given for them would be silently ignored
    (["digits/residual8", "--data-dir", ".", "--iters", 1], "digits reads no files"),
    (["--dataset", "synthetic", "--data-dir", ".", "--iters", 1], "synthetic reads no files"),
])
def test_bad_input_is_one_line_exit_2(in_tmp, args, needle):
    r = invoke("train", *args)
    assert r.exit_code == 2
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("resnet: error:") and needle in lines[0], r.stderr
    assert "Traceback" not in r.stderr and r.stdout == ""


@pytest.mark.parametrize("text", ["", "# only a comment\n"])
def test_an_empty_spec_file_is_refused_not_read_as_the_defaults(in_tmp, text):
    # An empty file used to train CIFAR-10 ResNet-20 with exit 0: a typo'd or truncated spec ran
    # something nobody asked for.
    (in_tmp / "empty.yaml").write_text(text)
    r = invoke("train", "empty.yaml", "--dry-run")
    assert r.exit_code == 2 and r.stdout == ""
    assert r.stderr.strip() == ("resnet: error: empty.yaml: the spec file is empty; write at least one section "
                                "(e.g. 'model: {depth: 56}'), or leave the spec out to train the defaults")


def test_a_bundled_name_still_finds_its_config(in_tmp):
    for name in ("cifar/resnet110", "resnet110", "cifar/resnet110.yaml"):
        r = invoke("train", name, "--dry-run", "--json")
        assert r.exit_code == 0, r.stderr
        assert json_lines(r.stdout)[0]["spec"]["model"]["depth"] == 110


def test_lr_trace_warmup_returns_to_base_and_steps():
    o = S.load(None, [], ["optim.iters=1000", "optim.warmup_iters=40"]).optim
    trace = [schedule.lr_at(i, o, iters_per_epoch=10) for i in range(1000)]
    assert set(trace[:40]) == {0.01}
    assert trace[40] == 0.1 and trace[499] == 0.1  # back to 0.1 after warm-up (a common peer bug)
    assert trace[500] == pytest.approx(0.01) and trace[749] == pytest.approx(0.01)
    assert trace[750] == pytest.approx(0.001) and trace[-1] == pytest.approx(0.001)


def test_epoch_milestones_convert_to_iterations():
    o = S.load(None, [], ["optim.epochs=10", "optim.milestones=[5]", "optim.warmup_iters=0"]).optim
    assert schedule.lr_at(49, o, 10) == 0.1 and schedule.lr_at(50, o, 10) == pytest.approx(0.01)
    assert schedule.total_iters(o, 10) == 100


def test_grad_norms_are_logged_into_metrics_during_train(in_tmp):
    r = invoke("train", *TINY, "--out", "run", "--set", "train.grad_norm_every=10")
    assert r.exit_code == 0, r.stderr
    records = [json.loads(line) for line in (in_tmp / "run" / "metrics.jsonl").read_text().splitlines()]
    norms = [x for x in records if x.get("event") == "grad_norm"]
    assert [x["iter"] for x in norms][:2] == [1, 11] and norms[0]["weights"]


@pytest.mark.slow
def test_readme_pipeline_keeps_every_epoch_record_with_stderr_on_a_terminal(in_tmp):
    """`resnet train digits/residual26 | jq ...` at a shell: stderr is a terminal (the live bar runs),
    stdout a pipe. Every epoch record must reach the pipe, not the screen."""
    import os
    import pty
    import threading

    master, slave = pty.openpty()
    screen = bytearray()

    def drain():  # a pty whose master is never read fills up and blocks the child
        while True:
            try:
                chunk = os.read(master, 4096)
            except OSError:
                return
            if not chunk:
                return
            screen.extend(chunk)

    reader = threading.Thread(target=drain, daemon=True)
    reader.start()
    proc = resnet("train", "digits/residual26", "--set", "model.widths=[4]", "--epochs", "3", "--out", "run",
                  cwd=in_tmp, env={**ENV, "COLUMNS": "100"}, text=False, stderr=slave)
    os.close(slave)
    reader.join(timeout=10)
    os.close(master)
    assert proc.returncode == 0, screen.decode(errors="replace")
    records = json_lines(proc.stdout.decode())
    assert [r["event"] for r in records] == ["epoch", "epoch", "epoch", "summary"]
    assert [r["epoch"] for r in records[:3]] == [1, 2, 3]
    assert b"epoch   1" in screen  # the progress lines went to the terminal


def test_default_run_names_made_in_the_same_second_differ(in_tmp, monkeypatch):
    import datetime as dt

    from resnet_cli.runs import writer as rundir

    class Frozen(dt.datetime):
        @classmethod
        def now(cls, tz=None):
            return dt.datetime(2026, 1, 2, 3, 4, 5)

    monkeypatch.setattr(rundir.dt, "datetime", Frozen)
    spec = S.load("digits/residual8")
    a, b = rundir.default_path(spec), rundir.default_path(spec)
    assert a != b and a.is_dir() and b.is_dir()
    assert a.name.startswith("20260102-030405-") and b.name == a.name + "-2"


@pytest.mark.slow
def test_two_trains_started_together_without_out_both_finish(in_tmp):
    procs = [spawn("train", *TINY, "--json", cwd=in_tmp) for _ in range(2)]
    outs = [p.communicate(timeout=300) for p in procs]
    assert [p.returncode for p in procs] == [0, 0], [err for _, err in outs]
    dirs = {json_lines(out)[-1]["run_dir"] for out, _ in outs}
    assert len(dirs) == 2 and all((in_tmp / d / "summary.json").is_file() for d in dirs)


def test_resume_of_a_finished_run_says_there_was_nothing_to_train(in_tmp):
    # It printed the old summary alone, as if the command had trained it now.
    first = invoke("train", *TINY, "--out", "run")
    assert first.exit_code == 0, first.stderr
    again = invoke("train", "--resume", "run")
    assert again.exit_code == 0 and json_lines(again.stdout) == [json_lines(first.stdout)[-1]]
    iters = json_lines(first.stdout)[-1]["iterations"]
    assert again.stderr.strip() == (f"run: nothing to train, the run had already ended (completed at iteration "
                                    f"{iters}); its summary:")


def test_resume_of_a_missing_run_is_one_line_and_loads_no_data(in_tmp):
    r = invoke("train", "--resume", "runs/nothere")
    assert r.exit_code == 2
    assert r.stderr.strip().splitlines() == [r.stderr.strip()] and "no such run directory" in r.stderr
    assert not (in_tmp / "data").exists() and not (in_tmp / "runs").exists()


def test_version_prints_the_installed_version():
    from importlib.metadata import version

    r = invoke("--version")
    assert r.exit_code == 0 and r.stdout.strip() == f"resnet {version('resnet-cli')}"


@pytest.mark.parametrize("args,needle", [
    (["train", "--threads", "-1"], "train: Invalid value for '--threads'"),
    (["train", "--nproc", "x"], "train: Invalid value for '--nproc'"),
    (["train", "--bogus"], "train: No such option: --bogus"),
    (["nosuchcommand"], "No such command 'nosuchcommand'"),
])
def test_click_usage_errors_are_one_line_with_exit_2(args, needle):
    r = invoke(*args)
    assert r.exit_code == 2
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("resnet: error: ") and needle in lines[0], r.stderr
    assert r.stdout == ""


def test_resnet_alone_still_prints_the_help():
    r = invoke()
    assert "Commands:" in r.stdout + r.stderr and "train" in r.stdout + r.stderr


@pytest.mark.parametrize("change,needle", [
    (["--set", "model.widths=[8]"], "'stem.0.weight' is [4, 1, 3, 3] in the checkpoint, [8, 1, 3, 3] in this net"),
    (["--depth", "10"], "this net's 'units.3.branch.1.weight' (and 11 more) missing from the checkpoint"),
])
def test_a_checkpoint_of_another_net_names_the_first_difference(in_tmp, change, needle):
    assert invoke("train", "digits/residual8", "--set", "model.widths=[4]", "--epochs", 1, "--out", "run").exit_code == 0
    r = invoke("train", "--resume", "run", *change, "--force-resume")
    assert r.exit_code == 2
    (line,) = r.stderr.strip().splitlines()
    assert line.startswith("resnet: error: run/checkpoint.pt: weights do not fit this net: ") and needle in line, line
    assert "start a new --out" in line
