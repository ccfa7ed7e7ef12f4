"""`resnet train --seeds ... --stack` (training/stacked_run.py): each seed of a stack is an ordinary run
directory holding that seed's own run, resumes bitwise after SIGKILL, diverges alone, and the
cases stacking cannot reproduce train separately (or are refused) with one line saying why.

The arithmetic of the stack against separate runs is tests/test_stacked.py's; here the reference is
again the separate run (`resnet train --seeds` without --stack), read from its run directory."""

import json
import math
import signal

import pytest
import torch

from processes import handled, here, kill_at, start_paused
from resnet_cli import spec as S
from resnet_cli.runs.reader import RunRecord
from resnet_cli.training import stacked_run
from resnet_cli.training.trainer import Trainer

NET = ["--set", "model.family=digits", "--depth", "8", "--set", "model.widths=[4]", "--dataset", "digits",
       "--set", "data.train_subset=320", "--batch-size", "32", "--lr", "0.02", "--device", "cpu", "--threads", "1",
       "--set", "optim.warmup_iters=0", "--set", "optim.milestones=[]", "--set", "train.channels_last=off"]


def weights(path) -> dict:
    return torch.load(path / "checkpoint.pt", weights_only=True)


def gap(a: dict, b: dict) -> float:
    return max((a[n].float() - b[n].float()).abs().max().item() for n in a if a[n].is_floating_point())


def test_each_seed_is_its_own_ordinary_run(tmp_path):
    """Seeds 3 and 5 stacked against the same seeds trained separately, 20 steps: each stacked
    member's directory holds its seed's spec and summary, and weights and momentum within 1e-4 of
    that seed's separate run (float tolerance: test_stacked.py), while the two seeds' runs stand
    far apart (more than 1e-2), so a member written into the other seed's directory fails."""
    args = [*NET, "--iters", "20", "--seeds", "3,5", "--json"]
    stacked = here("train", *args, "--stack", "--out", "stacked", cwd=tmp_path)
    separate = here("train", *args, "--out", "separate", cwd=tmp_path)
    assert stacked.returncode == 0 and separate.returncode == 0, stacked.stderr + separate.stderr
    assert "as one stacked net" in stacked.stderr and "stacked" not in separate.stderr
    def seeds_of_epochs(res):  # a pipe reading several seeds' records must tell them apart
        return [r.get("seed") for r in map(json.loads, res.stdout.splitlines()) if r["event"] == "epoch"]

    assert seeds_of_epochs(stacked) == [3, 5, 3, 5] and seeds_of_epochs(separate) == [3, 3, 5, 5]
    summaries = [json.loads(line) for line in stacked.stdout.splitlines() if '"summary"' in line]
    assert [(s["seed"], s["status"], s["iterations"]) for s in summaries] == [(3, "completed", 20), (5, "completed", 20)]
    for seed, other in ((3, 5), (5, 3)):
        mine = tmp_path / "stacked" / f"seed{seed}"
        rec = RunRecord.read(mine)
        assert rec.finished and rec.summary["seed"] == seed
        assert weights(mine)["spec"]["run"]["seed"] == seed and f"seed: {seed}" in (mine / "spec.yaml").read_text()
        assert json.loads((mine / "meta.json").read_text())["stack"]["seeds"] == [3, 5]  # provenance
        a, b, c = weights(mine), weights(tmp_path / "separate" / f"seed{seed}"), weights(tmp_path / "separate" / f"seed{other}")
        assert gap(a["model"], b["model"]) < 1e-4 < 1e-2 < gap(a["model"], c["model"])
        momentum = lambda w: {str(k): v["momentum_buffer"] for k, v in w["optimizer"]["state"].items()}  # noqa: E731
        assert gap(momentum(a), momentum(b)) < 1e-4 < 1e-2 < gap(momentum(a), momentum(c))
        epochs = [json.loads(line) for line in (mine / "metrics.jsonl").read_text().splitlines()]
        assert [r["iter"] for r in epochs if r["event"] == "epoch"] == [10, 20]


@pytest.mark.slow
def test_a_stack_killed_mid_epoch_resumes_bitwise(tmp_path):
    """SIGKILL after step 15 (the members' checkpoints at 10), then --resume auto: every member ends
    bitwise equal to the uninterrupted stack, weights and summary."""
    args = [*NET, "--set", "data.train_subset=640", "--iters", "30", "--set", "train.checkpoint_every=10",
            "--seeds", "0,1,2", "--stack"]
    ref = here("train", *args, "--out", "ref", "--json", cwd=tmp_path)
    assert ref.returncode == 0, ref.stderr
    kill_at(15, "train", *args, "--out", "run", cwd=tmp_path)
    for seed in (0, 1, 2):
        assert weights(tmp_path / "run" / f"seed{seed}")["progress"]["iteration"] == 10
    res = here("train", *args, "--out", "run", "--resume", "auto", "--json", cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    for seed in (0, 1, 2):
        a, b = weights(tmp_path / "ref" / f"seed{seed}"), weights(tmp_path / "run" / f"seed{seed}")
        assert a["progress"]["iteration"] == b["progress"]["iteration"] == 30
        assert all(torch.equal(a["model"][k], b["model"][k]) for k in a["model"])
        sa, sb = (RunRecord.read(tmp_path / d / f"seed{seed}").summary for d in ("ref", "run"))
        assert sa["train_loss"] == sb["train_loss"] and sa["test_error"] == sb["test_error"]


@pytest.mark.slow
def test_a_seed_left_alone_trains_as_its_ordinary_run_and_stops_on_a_signal(tmp_path):
    """`--stack 3` over four seeds: seed 3, left alone, trains as the ordinary run (no stack in its
    meta.json, weights bitwise those of `train --seeds 3`). Killed in the stack of 0-2 (at step 15,
    their checkpoints at 10) and resumed with seed 3 named first, seed 3 trains alone first while
    the last member opened holds the signal handlers: a SIGINT at its step 5 still stops it there
    (saved, interrupted, exit 130), and the stack after it does not start."""
    args = [*NET, "--set", "data.train_subset=640", "--iters", "30", "--set", "train.checkpoint_every=10"]
    ref = here("train", *args, "--seeds", "0,1,2,3", "--stack", "3", "--out", "ref", cwd=tmp_path)
    alone = here("train", *args, "--seeds", "3", "--out", "alone", cwd=tmp_path)
    assert ref.returncode == 0 and alone.returncode == 0, ref.stderr + alone.stderr
    meta = json.loads((tmp_path / "ref" / "seed3" / "meta.json").read_text())
    assert "stack" not in meta and json.loads((tmp_path / "ref" / "seed0" / "meta.json").read_text())["stack"]
    a, b = weights(tmp_path / "ref" / "seed3"), weights(tmp_path / "alone" / "seed3")
    assert all(torch.equal(a["model"][k], b["model"][k]) for k in a["model"])

    kill_at(15, "train", *args, "--seeds", "0,1,2,3", "--stack", "3", "--out", "run", cwd=tmp_path)
    proc, marker = start_paused(5, "train", *args, "--seeds", "3,0,1,2", "--stack", "3", "--out", "run",
                                "--resume", "auto", cwd=tmp_path)
    proc.send_signal(signal.SIGINT)
    assert handled(marker, proc) == signal.SIGINT  # seed 3's loop saw it
    marker.unlink()
    assert proc.wait(timeout=120) == 130, proc.stderr.read()
    assert RunRecord.read(tmp_path / "run" / "seed3").summary["status"] == "interrupted"
    assert weights(tmp_path / "run" / "seed3")["progress"]["iteration"] == 5
    for seed in (0, 1, 2):
        assert weights(tmp_path / "run" / f"seed{seed}")["progress"]["iteration"] == 10


def tiny_spec(seed: int, **model):
    tree = {"model": {"family": "digits", "depth": 8, "widths": [4], **model},
            "data": {"dataset": "digits", "train_subset": 160},
            "optim": {"batch_size": 32, "lr": 0.02, "iters": 20, "warmup_iters": 0, "milestones": []},
            "train": {"channels_last": "off", "checkpoint_every": 0, "eval_every": "end"},
            "run": {"device": "cpu", "seed": seed, "threads": 1}}
    return S.resolve(S.validate(tree))


def test_a_member_that_diverges_is_recorded_alone_and_changes_no_other():
    """Member 1's weights are made NaN before the first step: it is recorded as diverged at the
    first check (step 1), and members 0 and 2 end bitwise where they end in the same stack with
    member 1 healthy."""
    torch.set_num_threads(1)

    def stack(poison: bool):
        members = [Trainer(tiny_spec(seed)) for seed in (0, 1, 2)]
        run = stacked_run.StackedRun(members)
        if poison:
            with torch.no_grad():
                for p in run.net.parameters():
                    p[1] = math.nan
        run.run()
        return members

    clean, poisoned = stack(False), stack(True)
    assert [m.status for m in clean] == ["running"] * 3  # at the budget; train() records them completed
    assert poisoned[1].status == "diverged" and poisoned[1].diverged_at["iter"] == 1
    for i in (0, 2):
        assert poisoned[i].status == "running" and poisoned[i].p.iteration == 20
        a, b = clean[i].model.state_dict(), poisoned[i].model.state_dict()
        assert all(torch.equal(a[k], b[k]) for k in a), f"member {i} changed by member 1's NaN"


@pytest.mark.parametrize("model, optim, data, words", [
    ({"shortcut": {"kind": "dropout"}}, {}, {}, "draws random numbers"),  # He 2016b Table 1's dropout shortcut
    ({"stochastic_depth": 0.5}, {}, {}, "draws random numbers"),
    ({"dropout": 0.3}, {}, {}, "draws random numbers"),
    ({}, {"mixup": 0.2}, {}, "optim.mixup"),
    ({}, {}, {"shuffle": "global"}, "data.shuffle global"),
    ({}, {"lr_groups": [{"select": ["scalars"], "lr_scale": 0.1}]}, {}, "optim.lr_groups"),
])
def test_what_cannot_be_stacked_says_why(model, optim, data, words):
    tree = S.to_tree(tiny_spec(0, **model))
    tree["optim"].update(optim)
    tree["data"].update(data)
    assert words in stacked_run.why_not(S.resolve(S.validate(tree)))


def test_what_can_be_stacked_is_let_through():
    for model in ({}, {"shortcut": {"kind": "exclusive_gate"}}, {"unit": "full_preact"},
                  {"shortcut": {"kind": "none"}}, {"shortcut": {"kind": "rezero"}}):
        assert stacked_run.why_not(tiny_spec(0, **model)) is None, model


def test_the_cli_runs_unstackable_seeds_separately_and_refuses_ddp(tmp_path):
    res = here("train", *NET, "--iters", "4", "--set", "model.shortcut.kind=dropout", "--seeds", "0,1", "--stack",
               "--out", "drop", "--json", cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    assert "--stack: the net draws random numbers" in res.stderr and "one after another" in res.stderr
    assert all(RunRecord.read(tmp_path / "drop" / f"seed{s}").finished for s in (0, 1))
    for argv in (["--seeds", "0,1", "--stack", "--nproc", "2"], ["--seeds", "0,1", "--seed", "3"]):
        res = here("train", *NET, "--iters", "4", *argv, "--out", "x", cwd=tmp_path)
        assert res.returncode == 2 and "Traceback" not in res.stderr and len(res.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "x").exists()


STUDY = """
title: stack test
spec:
  model: {family: digits, depth: 8, widths: [4]}
  data: {dataset: digits, train_subset: 160, test_subset: 60}
  optim: {iters: 10, batch_size: 32, lr: 0.02, warmup_iters: 0, milestones: []}
  train: {checkpoint_every: 0, channels_last: "off"}
seeds: [0, 1, 2]
rows:
  - label: identity
  - label: dropout
    overrides: {model.shortcut.kind: dropout}
"""


@pytest.fixture(scope="module")
def separate_study(tmp_path_factory):
    """The study trained without --stack, once for both --jobs counts below (the reference)."""
    where = tmp_path_factory.mktemp("separate")
    (where / "s.yaml").write_text(STUDY)
    ref = here("ablate", "s.yaml", "--jobs", 1, "--threads", 1, "--json", "--out", "sep", cwd=where)
    assert ref.returncode == 0, ref.stderr
    return where / "sep"


@pytest.mark.slow
@pytest.mark.xdist_group("stacked-ablate")  # one worker: the reference above is trained once
@pytest.mark.parametrize("jobs", [1, 2])
def test_ablate_stacks_each_rows_seeds_up_to_k(tmp_path, jobs, separate_study):
    """`--stack 2` over three seeds: seeds 0 and 1 of the stackable row train as one stack (each
    run's meta.json names its stack), seed 2 as an ordinary run (a stack of one is slower); the
    dropout row's seeds
    train separately with one line saying why. Each run ends within float tolerance of the same
    run trained without --stack, and a rerun finds every run finished."""
    (tmp_path / "s.yaml").write_text(STUDY)
    common = ["ablate", "s.yaml", "--jobs", jobs, "--threads", 1, "--json"]
    res = here(*common, "--stack", 2, "--out", "st", cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    assert res.stderr.count("--stack: row dropout trains its seeds one after another") == 1
    def stack_of(run: str):  # meta.json names the seeds a run shared its stack with; none if separate
        return json.loads((tmp_path / "st" / run / "meta.json").read_text()).get("stack", {}).get("seeds")

    assert [stack_of(f"01-identity-s{s}") for s in (0, 1, 2)] == [[0, 1], [0, 1], None]
    assert [stack_of(f"02-dropout-s{s}") for s in (0, 1, 2)] == [None, None, None]
    for row in ("01-identity", "02-dropout"):
        for s in (0, 1, 2):
            a, b = weights(tmp_path / "st" / f"{row}-s{s}"), weights(separate_study / f"{row}-s{s}")
            assert gap(a["model"], b["model"]) < 1e-4, (row, s)
            assert (tmp_path / "st" / f"{row}-s{s}" / "study.json").is_file()
    again = here(*common, "--stack", "--out", "st", cwd=tmp_path)  # a bare --stack: every seed of a row
    assert again.returncode == 0 and "0 run(s) trained, 6 already finished" in again.stderr, again.stderr


def test_stack_takes_a_positive_count_or_nothing(tmp_path):
    res = here("train", *NET, "--iters", "2", "--seeds", "0,1", "--stack", "0", "--out", "x", cwd=tmp_path)
    assert res.returncode == 2 and "--stack 0: expected a number of seeds" in res.stderr
    assert not (tmp_path / "x").exists()
