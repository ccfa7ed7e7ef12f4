"""README promises that had no test: output on terminals and pipes, NaN in JSON, `resnet configs`,
resume (global RNG, another thread count, --force-resume) and "last epoch, never the best"."""

import json
import math
import os
import pty
import signal

import pytest
import torch

from resnet_cli import output
from resnet_cli import spec as S
from resnet_cli.runs.writer import RunDir

from invoking import invoke
from processes import ENV, here, resnet, spawn, start_paused
from test_reliability import PAUSE_AT, RUN, weights

TINY = ["digits/residual8", "--set", "model.widths=[4]", "--epochs", "1"]


# -- terminals and pipes -------------------------------------------------------------------------


def on_a_terminal(args, cwd):
    """Run with stdout on a pseudo-terminal (stderr a pipe); returns what the terminal showed."""
    master, slave = pty.openpty()
    proc = spawn(*args, cwd=cwd, stdout=slave, env={**ENV, "COLUMNS": "200"})
    os.close(slave)
    chunks = []
    while True:
        try:
            data = os.read(master, 4096)
        except OSError:  # EIO: the child closed the terminal
            break
        if not data:
            break
        chunks.append(data)
    os.close(master)
    proc.wait(timeout=300)
    assert proc.returncode == 0, proc.stderr.read()
    return b"".join(chunks).decode(errors="replace")


@pytest.mark.slow
def test_a_terminal_gets_a_table_and_a_pipe_only_json_even_with_force_color(tmp_path):
    shown = on_a_terminal(["train", *TINY, "--out", "tty"], tmp_path)
    assert "test error" in shown.lower() or "test_error" in shown
    assert not any(line.strip().startswith("{") for line in shown.splitlines())  # a table, not JSON
    piped = resnet("train", *TINY, "--out", "pipe", cwd=tmp_path, env={**ENV, "FORCE_COLOR": "1"})
    assert piped.returncode == 0, piped.stderr
    lines = [ln for ln in piped.stdout.splitlines() if ln.strip()]
    assert [json.loads(ln)["event"] for ln in lines] == ["epoch", "summary"]  # every line parses
    assert "\x1b[" not in piped.stdout  # no colour codes on the pipe


def test_nan_and_infinity_are_written_as_strings(capsys):
    output.emit({"event": "epoch", "train_loss": float("nan"), "grad": [float("inf"), -float("inf"), 1.5]})
    line = capsys.readouterr().out
    assert json.loads(line) == {"event": "epoch", "train_loss": "nan", "grad": ["inf", "-inf", 1.5]}
    assert "NaN" not in line and "Infinity" not in line  # what json.dumps writes by default: not JSON


# -- resnet configs ------------------------------------------------------------------------------


def test_configs_lists_every_bundled_file_and_each_spec_builds():
    r = invoke("configs", "--json")
    assert r.exit_code == 0, r.stderr
    rows = [json.loads(line) for line in r.stdout.splitlines()]
    assert {row["event"] for row in rows} == {"config"}  # every JSON line says what it is (README)
    on_disk = {str(p.relative_to(S.configs_dir()).with_suffix("")) for p in S.configs_dir().rglob("*.yaml")}
    assert {row["name"] for row in rows} == on_disk
    specs = [row for row in rows if row["kind"] == "spec"]
    assert {"cifar/resnet110", "preact/resnet1001-cifar10", "imagenet/resnet50", "digits/plain26"} <= \
        {row["name"] for row in specs}
    for row in specs:
        assert row["use"] == f"resnet train {row['name']}" and row["about"]
        S.load(row["name"])  # the advertised command's spec is valid
    assert {row["kind"] for row in rows} == {"spec", "study", "degrade"}


# -- resume --------------------------------------------------------------------------------------

DROPOUT = [*RUN, "--set", "model.shortcut.kind=dropout"]


@pytest.mark.slow
def test_sigkill_resume_of_a_dropout_shortcut_run_is_bitwise(tmp_path):
    """The dropout shortcut draws from the global RNG: resume must restore it (README, Resume)."""
    ref = here("train", *DROPOUT, "--out", "ref", "--json", cwd=tmp_path)
    assert ref.returncode == 0, ref.stderr
    proc, _ = start_paused(PAUSE_AT, "train", *DROPOUT, "--out", "run", "--json", cwd=tmp_path)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    res = here("train", "--resume", "run", "--json", cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    wa, wb = weights(tmp_path / "ref"), weights(tmp_path / "run")
    assert all(torch.equal(wa[k], wb[k]) for k in wa)
    a, b = json.loads(ref.stdout.splitlines()[-1]), json.loads(res.stdout.splitlines()[-1])
    assert a["train_loss"] == b["train_loss"]


@pytest.mark.slow
def test_resume_on_another_thread_count_is_allowed_and_recorded(tmp_path):
    proc, _ = start_paused(PAUSE_AT, "train", *RUN, "--out", "run", "--json", "--set", "run.threads=1", cwd=tmp_path)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    res = here("train", "--resume", "run", "--set", "run.threads=2", "--json", cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    assert json.loads(res.stdout.splitlines()[-1])["status"] == "completed"
    meta = json.loads((tmp_path / "run" / "meta.json").read_text())
    assert meta["threads"] == 2, meta
    # docs/train.md: another count gives other bits, so the resume says so
    assert "trained at 1 CPU threads and resumes at 2" in res.stderr


@pytest.mark.slow
def test_an_automatic_count_is_chosen_again_on_resume_and_a_change_is_said(tmp_path):
    """run.threads auto (the default) under OMP_NUM_THREADS: the count is the variable's at each
    start, so a resume under another value trains on at that count, recorded, with the note."""
    proc, _ = start_paused(PAUSE_AT, "train", *RUN, "--out", "run", "--json", "--set", "run.threads=auto",
                           cwd=tmp_path)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert json.loads((tmp_path / "run" / "meta.json").read_text())["threads"] == 1  # ENV pins one
    res = here("train", "--resume", "run", "--json", cwd=tmp_path, env={"OMP_NUM_THREADS": "2"})
    assert res.returncode == 0, res.stderr
    meta = json.loads((tmp_path / "run" / "meta.json").read_text())
    assert meta["threads"] == 2 and meta["threads_auto"]["pinned"], meta
    assert "trained at 1 CPU threads and resumes at 2" in res.stderr


def test_force_resume_trains_the_new_spec(in_tmp):
    r = invoke("train", *TINY, "--out", "run")
    assert r.exit_code == 0, r.stderr
    r = invoke("train", "--resume", "run", "--epochs", 2, "--set", "optim.warmup_iters=0",
               "--set", "optim.milestones=[]", "--lr", 0.03, "--force-resume")
    assert r.exit_code == 0, r.stderr
    records = RunDir(in_tmp / "run").metrics()
    assert [x["epoch"] for x in records if x.get("event") == "epoch"] == [1, 2]  # the second epoch trained
    assert records[-1]["lr"] == 0.03  # at the new spec's lr
    saved = torch.load(in_tmp / "run" / "checkpoint.pt", weights_only=True)["spec"]
    assert saved["optim"]["epochs"] == 2 and saved["optim"]["lr"] == 0.03


def test_force_resume_rewrites_spec_yaml_and_keeps_the_old_one(in_tmp):
    """After --force-resume the run directory describes the run as it went on: spec.yaml is the new
    spec (report and eval read it, a plain --resume accepts it), the old one kept beside it."""
    assert invoke("train", *TINY, "--out", "run").exit_code == 0
    before = (in_tmp / "run" / "spec.yaml").read_text()
    r = invoke("train", "--resume", "run", "--epochs", 2, "--lr", 0.03, "--force-resume")
    assert r.exit_code == 0, r.stderr
    assert "spec.yaml rewritten" in r.stderr
    (kept,) = (in_tmp / "run").glob("spec.before-*.yaml")
    assert kept.read_text() == before
    assert S.load(str(in_tmp / "run" / "spec.yaml")).optim.lr == 0.03
    assert S.load(str(kept)).optim.lr == 0.05  # digits/residual8's own
    (change,) = json.loads((in_tmp / "run" / "meta.json").read_text())["spec_changes"]
    assert change["previous"] == kept.name and "optim.lr" in change["keys"] and "optim.epochs" in change["keys"]
    first = [x for x in RunDir(in_tmp / "run").metrics() if x.get("event") == "epoch"][0]
    assert change["iteration"] == first["iter"]  # where the new spec took over: the end of epoch 1
    r = invoke("train", "--resume", "run")  # plain: the spec on disk is the checkpoint's
    assert r.exit_code == 0, r.stderr
    assert json.loads(r.stdout.splitlines()[-1])["status"] == "completed"


def test_the_summary_is_the_last_epoch_never_the_best(in_tmp):
    """A run whose test error is lowest before its last epoch reports the last (README: no
    selection on the test set, He 2016a reports the final net)."""
    r = invoke("train", "digits/residual8", "--set", "model.widths=[4]", "--epochs", 4, "--lr", 0.8,
               "--set", "optim.warmup_iters=0", "--set", "optim.milestones=[]", "--out", "run")
    assert r.exit_code == 0, r.stderr
    errors = [x["test_error"] for x in RunDir(in_tmp / "run").metrics() if x.get("event") == "epoch"]
    assert len(errors) == 4 and min(errors) < errors[-1], errors  # the best epoch is not the last
    summary = json.loads((in_tmp / "run" / "summary.json").read_text())
    assert summary["test_error"] == errors[-1]
    assert math.isfinite(summary["test_error"])
