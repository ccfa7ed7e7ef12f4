"""TensorBoard (issue 15 item 3): the event files hold the run's own numbers, read back with
TensorBoard's EventAccumulator, and a run killed and resumed continues the same curves with every
step once and none missing."""

import sys
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

from resnet_cli.training import schedule
from resnet_cli.cli import app
from resnet_cli.runs.writer import RunDir

from processes import here, kill_at

pytest.importorskip("tensorboard")  # in the dev extra, so CI has it
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator  # noqa: E402

# 23 iterations an epoch (batch 64 on 1,437 digits). Checkpoints at 23 and 30, syncs at 1, 20, 23, 30, 40,
# grad norms at 1, 8, ..., 43: a kill at step 45 leaves steps 40 and 43 written past the checkpoint.
RUN = ["digits/residual8", "--set", "model.widths=[4]", "--epochs", "3", "--set", "train.checkpoint_every=30",
       "--set", "train.grad_norm_every=7", "--tensorboard"]


def scalars(log_dir: Path) -> dict[str, list[tuple[int, float]]]:
    """Tag -> [(step, value)] as TensorBoard shows them (orphaned events purged)."""
    acc = EventAccumulator(str(log_dir), size_guidance={"scalars": 0})  # 0: keep every event
    acc.Reload()
    return {tag: [(e.step, e.value) for e in acc.Scalars(tag)] for tag in acc.Tags()["scalars"]}


def test_the_event_files_hold_the_runs_own_numbers(tmp_path):
    r = CliRunner().invoke(app, ["train", *RUN, "--out", str(tmp_path / "run")])
    assert r.exit_code == 0, r.stderr
    run = RunDir(tmp_path / "run")
    tb = scalars(run.file("tensorboard"))
    epochs = [m for m in run.metrics() if m["event"] == "epoch"]
    for name in ("train_loss", "train_error", "test_loss", "test_error", "images_per_s"):
        assert tb[f"epoch/{name}"] == [(m["iter"], pytest.approx(m[name], rel=1e-6)) for m in epochs]
    assert "epoch/val_error" not in tb  # no val split, no curve
    grads = [m for m in run.metrics() if m["event"] == "grad_norm"]
    assert [s for s, _ in tb["grad_norm/fc"]] == [m["iter"] for m in grads] == list(range(1, 70, 7))
    assert tb["grad_norm/fc"] == [(m["iter"], pytest.approx(m["weights"]["fc"], rel=1e-6)) for m in grads]
    assert len([t for t in tb if t.startswith("grad_norm/")]) == len(grads[0]["weights"])
    # the step loss and the lr every 20 steps, at step 1, every checkpoint (30) and every epoch end
    assert [s for s, _ in tb["train/loss"]] == [1, 20, 23, 30, 40, 46, 60, 69]
    optim = run_spec(run).optim
    assert tb["train/lr"] == [(s, pytest.approx(schedule.lr_at(s - 1, optim, 23), rel=1e-6))
                              for s, _ in tb["train/lr"]]  # the lr step s was taken with


def run_spec(run: RunDir):
    from resnet_cli import spec as S

    return S.resolve(S.validate(run.spec_tree()))


@pytest.mark.slow
def test_kill_and_resume_continues_the_curves_with_each_step_once(tmp_path):
    ref = here("train", *RUN, "--out", "ref", cwd=tmp_path)
    assert ref.returncode == 0, ref.stderr
    kill_at(45, "train", *RUN, "--out", "run", cwd=tmp_path)
    killed = scalars(tmp_path / "run" / "tensorboard")
    assert (40, pytest.approx(dict(scalars(tmp_path / "ref" / "tensorboard")["train/loss"])[40])) in \
        killed["train/loss"], "the killed run had written past its checkpoint (30): the case under test"
    # TensorBoard reads event files in name order, the start second first: date the killed writer's
    # file one second ahead, as a kill within the resume's second (or on a node whose clock runs ahead)
    # would, so the resumed writer's file must still come to sort after it.
    (old,) = (tmp_path / "run" / "tensorboard").iterdir()
    parts = old.name.split(".")
    parts[3] = f"{int(time.time()) + 1:010d}"
    old.rename(old.with_name(".".join(parts)))
    res = here("train", "--resume", "run", cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    assert len(list((tmp_path / "run" / "tensorboard").iterdir())) == 2  # the resumed writer's own file
    want, got = scalars(tmp_path / "ref" / "tensorboard"), scalars(tmp_path / "run" / "tensorboard")
    assert got.keys() == want.keys()
    for tag in want:
        steps = [s for s, _ in got[tag]]
        assert steps == sorted(set(steps)), f"{tag}: steps {steps} not strictly increasing"
        # every step once, none lost to the kill, and the resumed run's values are the uninterrupted
        # run's (resume is bitwise on the CPU; images/s is a timing, not a result)
        assert steps == [s for s, _ in want[tag]], tag
        if tag != "epoch/images_per_s":
            assert got[tag] == want[tag], tag


def test_without_the_package_it_is_one_line_and_exit_2(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "tensorboard", None)  # `import tensorboard` now raises ImportError
    r = CliRunner().invoke(app, ["train", "digits/residual8", "--epochs", "1", "--tensorboard",
                                 "--out", str(tmp_path / "run")])
    assert r.exit_code == 2, r.output
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and "pip install 'resnet-cli[tensorboard]'" in lines[0] and "Traceback" not in r.stderr
    assert not (tmp_path / "run").exists()  # a run that could not start leaves nothing behind
    r = CliRunner().invoke(app, ["train", "--set", "train.tensorboard=maybe", "--dry-run"])
    assert r.exit_code == 2 and "train.tensorboard" in r.stderr


def test_each_sync_is_on_disk_before_a_checkpoint_can_follow(tmp_path):
    """A checkpoint is saved right after a sync; a kill after it must not lose the scalars up to it
    (the resumed run never recomputes them). So every sync's events are on disk when on_sync returns."""
    from types import SimpleNamespace

    from resnet_cli.training.tensorboard_log import TensorBoardCallback

    cb = TensorBoardCallback(tmp_path / "tb")
    t = SimpleNamespace(p=SimpleNamespace(iteration=0), lr=0.1)
    cb.on_start(t)
    t.p.iteration = 20
    cb.on_sync(t, 1.5)
    assert scalars(tmp_path / "tb")["train/loss"] == [(20, 1.5)]  # read while the writer is still open
    cb.on_end(t, {})


def test_gate_means_and_precise_bn_figures_are_curves_too(tmp_path):
    r = CliRunner().invoke(app, ["train", "digits/residual8", "--set", "model.widths=[4]", "--epochs", "2",
                                 "--set", "model.shortcut.kind=exclusive_gate", "--set", "train.precise_bn=3",
                                 "--tensorboard", "--out", str(tmp_path / "run")])
    assert r.exit_code == 0, r.stderr
    run = RunDir(tmp_path / "run")
    tb = scalars(run.file("tensorboard"))
    epochs = [m for m in run.metrics() if m["event"] == "epoch"]
    for unit in range(3):
        assert tb[f"gate/{unit}"] == [(m["iter"], pytest.approx(m["gate_mean"][unit], rel=1e-6)) for m in epochs]
    assert tb["epoch/test_error_precise_bn"] == [(m["iter"], pytest.approx(m["test_error_precise_bn"], rel=1e-6))
                                                 for m in epochs]


def test_an_event_file_dated_far_ahead_is_named_not_waited_for(tmp_path, capsys):
    from resnet_cli.training.tensorboard_log import _wait_to_sort_last

    ahead = int(time.time()) + 100  # another node's clock, 100 s ahead: no sleep can fix the order
    (tmp_path / f"events.out.tfevents.{ahead:010d}.other-node.7.0").write_bytes(b"")
    start = time.monotonic()
    _wait_to_sort_last(tmp_path)
    assert time.monotonic() - start < 1.0
    err = capsys.readouterr().err
    assert "dated 100 s ahead" in err or "dated 99 s ahead" in err  # 99: the second turned, err
