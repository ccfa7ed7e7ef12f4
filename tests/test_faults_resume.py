"""Resume after SIGTERM is bitwise in every figure the run reports (issue 78): a run stopped by a
real SIGTERM mid-stretch between two checkpoints, then resumed, ends with the same summary (every
field but the timing and the path) and the same weights as the run never interrupted."""

import json
import os
import signal

import torch

from resnet_cli.training import testhook

from invoking import invoke

# ~90 iterations an epoch (batch 16 on 1,437 digits), checkpoints every 10; the signal at 25 lands
# between two checkpoints, where the epoch's loss sums are half-way through one float32 stretch.
RUN = ["digits/residual8", "--set", "model.widths=[8]", "--batch-size", "16", "--epochs", "2",
       "--set", "train.checkpoint_every=10", "--threads", "1", "--json"]
STOP_AT = 25
TIMING = {"wall_time_s", "images_per_s", "run_dir"}


def summary(run):
    return json.loads((run / "summary.json").read_text())


def test_sigterm_then_resume_repeats_every_summary_field_and_the_weights(in_tmp, monkeypatch):
    assert invoke("train", *RUN, "--out", "ref").exit_code == 0
    with monkeypatch.context() as m:
        # The trainer's own test hook at step STOP_AT: a real SIGTERM to this process, which the
        # trainer's handler turns into its stop flag, as a `kill` from outside would.
        m.setattr(testhook, "PAUSE_AT", STOP_AT)
        m.setattr(testhook, "pause", lambda stop: os.kill(os.getpid(), signal.SIGTERM))
        stopped = invoke("train", *RUN, "--out", "run")
    assert stopped.exit_code == 143, stopped.output
    assert summary(in_tmp / "run")["status"] == "interrupted" and summary(in_tmp / "run")["iterations"] == STOP_AT
    assert invoke("train", "--resume", "run", "--json").exit_code == 0
    ref, res = summary(in_tmp / "ref"), summary(in_tmp / "run")
    assert ref.keys() == res.keys()
    assert {k: res[k] for k in ref if k not in TIMING} == {k: ref[k] for k in ref if k not in TIMING}
    wa = torch.load(in_tmp / "ref" / "checkpoint.pt", weights_only=True)["model"]
    wb = torch.load(in_tmp / "run" / "checkpoint.pt", weights_only=True)["model"]
    assert all(torch.equal(wa[k], wb[k]) for k in wa)
    # Every epoch's record too (its train_loss is the epoch's loss sum over its images).
    lines = [[json.loads(x) for x in (in_tmp / d / "metrics.jsonl").read_text().splitlines()] for d in ("ref", "run")]
    drop = {"elapsed_s", "images_per_s"}
    assert [{k: v for k, v in r.items() if k not in drop} for r in lines[0]] == \
           [{k: v for k, v in r.items() if k not in drop} for r in lines[1]]
