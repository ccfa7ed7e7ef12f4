"""A full disk at each write of a run (issue 78): one line naming the file and the device, exit 5,
no temporary file left, what was written before intact, and a rerun that resumes to the same figures
as a run never interrupted (which is the independent reference here)."""

import json
import sys

import pytest

from resnet_cli import errors
from resnet_cli.training import checkpoint

from full_disk import fill_at
from invoking import invoke
from tiny_study import tiny_study

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc/self/fd")

TINY = ["digits/residual8", "--set", "model.widths=[4]", "--epochs", "2", "--threads", "1"]
FIGURES = ("status", "test_error", "test_loss", "train_loss", "train_error", "params", "iterations", "epochs")


def figures(run):
    summary = json.loads((run / "summary.json").read_text())
    return {k: summary[k] for k in FIGURES}


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    out = tmp_path_factory.mktemp("ref") / "run"
    assert invoke("train", *TINY, "--out", out).exit_code == 0
    return figures(out)


def one_error_line(result):
    lines = [line for line in result.output.splitlines() if line.startswith("resnet: error:")]
    assert len(lines) == 1 and "Traceback" not in result.output, result.output
    return lines[0]


def leftovers(run):
    return sorted(p.name for p in run.glob(".*") if p.name != ".lock") if run.exists() else []


# (file, which opening of it fails, whether a checkpoint was saved before: then `train --resume` goes on)
@pytest.mark.parametrize("name, nth, saved", [
    ("spec.yaml", 1, False),
    ("meta.json", 1, False),      # written by create
    ("meta.json", 2, False),      # update_meta, once the net is built
    (".tmp-ckpt-", 2, True),      # the second epoch's checkpoint: the first stays
    ("metrics.jsonl", 2, True),   # the second epoch's line
    ("summary.json", 1, True),
])
def test_a_full_disk_at_each_write_of_a_run_is_one_line_and_the_rerun_resumes(in_tmp, monkeypatch, reference,
                                                                               name, nth, saved):
    with monkeypatch.context() as m:
        seen = fill_at(m, name, nth)
        r = invoke("train", *TINY, "--out", "run")
    assert seen["hit"] >= nth, f"the write of {name} was never made"
    assert r.exit_code == errors.RESOURCES, r.output
    line = one_error_line(r)
    assert "no space left on /" in line and (name.strip(".-") if name != ".tmp-ckpt-" else "checkpoint.pt") in line
    assert leftovers(in_tmp / "run") == []  # no .NAME.tmp, no .tmp-ckpt-*
    run = in_tmp / "run"
    if saved:
        assert "resume with: resnet train --resume run" in line
        checkpoint.load(run / "checkpoint.pt")  # intact: the last complete one
        again = invoke("train", "--resume", "run")
    else:
        assert "rerun the same command to resume" in line
        assert not (run / "spec.yaml").exists()  # nothing a rerun would trip on
        again = invoke("train", *TINY, "--out", "run")
    assert again.exit_code == 0, again.output
    assert figures(run) == reference


def test_a_full_disk_writing_report_output_keeps_the_old_file(in_tmp, monkeypatch):
    assert invoke("train", *TINY, "--out", "runs/a").exit_code == 0
    (in_tmp / "t.csv").write_text("old\n")
    with monkeypatch.context() as m:
        fill_at(m, "t.csv")
        r = invoke("report", "runs", "--runs", "--format", "csv", "--output", "t.csv")
    assert r.exit_code == errors.RESOURCES and "while writing t.csv" in one_error_line(r)
    assert (in_tmp / "t.csv").read_text() == "old\n" and leftovers(in_tmp) == []
    assert invoke("report", "runs", "--runs", "--format", "csv", "--output", "t.csv").exit_code == 0


STUDY = tiny_study([0, 1])


@pytest.mark.parametrize("name", ["claims.json", "study.json", "spec.yaml"])
def test_a_full_disk_in_a_sweep_stops_it_cleanly_and_the_same_command_finishes_it(in_tmp, monkeypatch, name):
    (in_tmp / "s.yaml").write_text(STUDY)
    cmd = ["ablate", "s.yaml", "--out", "res", "--jobs", "1", "--json"]
    with monkeypatch.context() as m:
        fill_at(m, name, nth=2 if name != "claims.json" else 1)  # the second run's file, or the study's own
        r = invoke(*cmd)
    assert r.exit_code == errors.RESOURCES, r.output
    assert "no space left on /" in one_error_line(r) and name in one_error_line(r)
    for run in (in_tmp / "res").glob("*"):
        assert leftovers(run) == [], run
    assert leftovers(in_tmp / "res") == []
    again = invoke(*cmd)
    assert again.exit_code == 0, again.output
    done = sorted(json.loads(p.read_text())["status"] for p in (in_tmp / "res").glob("*/summary.json"))
    assert done == ["completed", "completed"]
