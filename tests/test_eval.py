"""`resnet eval`: a trained run's error (against the run's own log), per-class error and confusion
matrix (against hand counts), flip TTA (against a flip-invariant net), and one line for bad input."""

import collections
import json
import shutil

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from resnet_cli.analysis import evaluate as EV
from resnet_cli.analysis.trained import load_run
from resnet_cli.errors import UserError

from invoking import invoke


def json_lines(text):
    return [json.loads(line) for line in text.splitlines()]  # every stdout line must parse


def logged(run_dir):
    """The training run's own records, read straight from metrics.jsonl."""
    return [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]


def snapshot(run_dir):
    return {p.name: (p.stat().st_size, p.stat().st_mtime_ns) for p in run_dir.iterdir()}


def test_error_is_the_runs_own_last_test_error_exactly(residual8_run):
    before = snapshot(residual8_run)
    r = invoke("eval", residual8_run)
    assert r.exit_code == 0, r.stderr
    row = json_lines(r.stdout)[0]
    last = logged(residual8_run)[-1]
    assert row["event"] == "eval" and row["status"] == "completed" and row["iter"] == last["iter"]
    assert row["error"] == last["test_error"]  # exactly: the same sums over the same batches
    assert row["loss"] == pytest.approx(last["test_loss"], abs=1e-6)
    assert row["images"] == 360 and row["logged_error"] == last["test_error"]
    assert snapshot(residual8_run) == before  # nothing written into the run directory


def test_a_test_subset_is_evaluated_without_the_runs_figure_beside_it(residual8_run):
    r = invoke("eval", residual8_run, "--set", "data.test_subset=50")
    assert r.exit_code == 0, r.stderr
    row = json_lines(r.stdout)[0]
    assert row["images"] == 50 and row["logged_error"] is None  # 50 images, not the 360 it logged


def eval_after_step(training_loss, at, then, exit_code):
    """Train 3 epochs of 23 steps with `then(loss, step)` applied to the loss from step `at` on
    (the plain loss before it), and evaluate what the run left."""
    training_loss(lambda loss, n: then(loss, n) if n >= at else loss)
    t = invoke("train", "digits/residual8", "--set", "model.widths=[4]", "--epochs", "3", "--out", "run")
    assert t.exit_code == exit_code, t.stderr
    r = invoke("eval", "run")
    assert r.exit_code == 0, r.stderr
    return json_lines(r.stdout)[0]


def test_a_diverged_run_is_evaluated_at_its_last_good_checkpoint(in_tmp, training_loss):
    # NaN from step 31: epoch 2 diverges, the checkpoint of epoch 1's end (step 23) stays.
    row = eval_after_step(training_loss, 31, lambda loss, n: loss * float("nan"), exit_code=3)
    epoch1 = logged(in_tmp / "run")[0]
    assert row["status"] == "diverged" and row["iter"] == epoch1["iter"] == 23
    assert row["error"] == epoch1["test_error"]


def test_an_interrupted_run_is_evaluated_at_its_mid_epoch_checkpoint(in_tmp, training_loss):
    import os
    import signal

    from resnet_cli.training.runtime import analysis_runtime
    from resnet_cli.training.evaluation import evaluate

    def sigterm(loss, n):  # during step 30: the run saves there and stops
        if n == 30:
            os.kill(os.getpid(), signal.SIGTERM)
        return loss

    row = eval_after_step(training_loss, 30, sigterm, exit_code=143)
    assert row["status"] == "interrupted" and row["iter"] == 30 and row["logged_error"] is None
    run = load_run("run")  # the trainer's own evaluation of the same checkpoint
    assert row["error"] == evaluate(run.model, run.data, "test", analysis_runtime(run.device))[1]


def test_per_class_error_and_confusion_against_a_hand_count():
    """Seven images whose predictions are fixed: true 0,0,1,1,2,2,2 -> predicted 0,1,1,1,0,2,1."""
    preds = torch.tensor([0, 1, 1, 1, 0, 2, 1])
    y = torch.tensor([0, 0, 1, 1, 2, 2, 2])

    class Fixed(nn.Module):
        def forward(self, x):  # x holds each image's index
            return F.one_hot(preds[x.view(len(x), -1)[:, 0].long()], 3).float() * 5

    x = torch.arange(7).float().view(7, 1, 1, 1)
    batches = [(x[:4], y[:4]), (x[4:], y[4:])]  # sums over two batches
    sums = EV.counts(Fixed(), batches, 3)
    assert sums["confusion"].tolist() == [[1, 1, 0], [0, 2, 0], [1, 1, 1]]  # rows: true class
    rows = EV.per_class(sums["confusion"], ["a", "b", "c"])
    assert [(r["images"], r["wrong"]) for r in rows] == [(2, 1), (2, 0), (3, 2)]
    assert [r["error"] for r in rows] == pytest.approx([50.0, 0.0, 200 / 3])
    assert EV.error_of(sums["confusion"]) == (7, pytest.approx(300 / 7))


def test_per_class_rows_of_a_run_match_a_count_image_by_image(residual8_run):
    r = invoke("eval", residual8_run, "--json")
    assert r.exit_code == 0, r.stderr
    lines = json_lines(r.stdout)
    classes = [x for x in lines if x["event"] == "eval_class"]
    matrix = next(x for x in lines if x["event"] == "confusion")["matrix"]
    t = load_run(residual8_run)
    pairs = collections.Counter()
    with torch.no_grad():
        for i in range(len(t.data.test)):  # one image at a time: no batching shared with eval
            pairs[int(t.data.test.y[i]), int(t.model(t.data.test.x[i:i + 1]).argmax())] += 1
    assert matrix == [[pairs[(a, b)] for b in range(10)] for a in range(10)]
    for row in classes:
        c = row["class"]
        images = sum(n for (a, _), n in pairs.items() if a == c)
        assert (row["images"], row["wrong"]) == (images, images - pairs[(c, c)])


class Mirrored(nn.Module):
    """f(x) + f(mirror of x): invariant to a horizontal flip, not to a vertical one."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.f = nn.Sequential(nn.Conv2d(1, 4, 3), nn.ReLU(), nn.Flatten(), nn.Linear(4 * 6 * 6, 3))

    def forward(self, x):
        return self.f(x) + self.f(x.flip(3))


def test_flip_tta_changes_nothing_for_a_flip_invariant_net():
    g = torch.Generator().manual_seed(1)
    x, y = torch.randn(40, 1, 8, 8, generator=g), torch.randint(0, 3, (40,), generator=g)
    sums = EV.counts(Mirrored(), [(x[:25], y[:25]), (x[25:], y[25:])], 3, tta="flip")
    assert sums["confusion"].sum() == 40 and sums["confusion"].trace() < 40  # a net with errors
    assert torch.equal(sums["tta_confusion"], sums["confusion"])
    assert sums["tta_loss_sum"] == pytest.approx(sums["loss_sum"], rel=1e-5)


def test_flip_tta_is_refused_for_a_run_trained_without_flips(residual8_run):
    r = invoke("eval", residual8_run, "--tta", "flip")
    assert r.exit_code == 2 and r.stdout == ""
    assert r.stderr.count("\n") == 1 and r.stderr.endswith(
        "trained without flips (data.augment none), so a mirrored image is not one it learned to classify; "
        "evaluate the single view\n")


def test_flip_tta_beside_the_single_view_of_a_run_trained_with_flips(in_tmp):
    t = invoke("train", "digits/residual8", "--set", "model.widths=[4]", "--epochs", "1", "--out", "flip",
               "--set", "data.augment=flip")
    assert t.exit_code == 0, t.stderr
    r = invoke("eval", "flip", "--tta", "flip")
    assert r.exit_code == 0, r.stderr
    row = json_lines(r.stdout)[0]
    assert row["error"] == logged(in_tmp / "flip")[-1]["test_error"]  # the papers' figure is untouched
    run = load_run("flip")
    with torch.no_grad():  # the mirror-averaged softmax, computed here on its own
        x, y = run.data.test.x, run.data.test.y
        probs = (run.model(x).softmax(1) + run.model(torch.flip(x, dims=[3])).softmax(1)) / 2
    assert row["tta"] == "flip"
    assert row["tta_error"] == pytest.approx(100 * (probs.argmax(1) != y).float().mean().item())
    assert row["tta_loss"] == pytest.approx(F.nll_loss(probs.log(), y).item(), rel=1e-5)
    # its confusion matrix, counted image by image from the mirror-averaged prediction
    hand = [[0] * 10 for _ in range(10)]
    for t, p in zip(y.tolist(), probs.argmax(1).tolist()):
        hand[t][p] += 1
    assert EV.evaluate_run(run, tta="flip")["tta"]["confusion"] == hand


def test_several_runs_give_one_row_each_and_files_only_where_asked(residual8_run, in_tmp):
    before = snapshot(residual8_run)
    r = invoke("eval", residual8_run, residual8_run, "--out", "results", "--figure", "cm.png")
    assert r.exit_code == 0, r.stderr
    lines = json_lines(r.stdout)
    assert [x["event"] for x in lines].count("eval") == 2
    assert [x["path"] for x in lines if x["event"] in ("results", "figure")] == [
        "results/eval-test.json", "results/confusion-test.png", "cm.png"]
    saved = json.loads((in_tmp / "results" / "eval-test.json").read_text())
    assert len(saved) == 2 and saved[0]["confusion"] == saved[1]["confusion"]
    for png in (in_tmp / "results" / "confusion-test.png", in_tmp / "cm.png"):
        assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert snapshot(residual8_run) == before


def test_the_table_on_a_terminal(residual8_run, monkeypatch):
    from resnet_cli import output

    monkeypatch.setenv("COLUMNS", "80")
    monkeypatch.setattr(output, "choose", lambda json_flag: output.Format.TABLE)
    r = invoke("eval", residual8_run)
    assert r.exit_code == 0, r.stderr
    assert "error %" in r.stdout and "per class" in r.stdout and f"{logged(residual8_run)[-1]['test_error']:.2f}" in r.stdout
    assert max(len(line) for line in r.stdout.splitlines()) <= 80  # CliRunner's console: 80 columns


@pytest.fixture
def broken_runs(residual8_run, tmp_path):
    """Copies of the shared run, each spoilt in one way."""
    def copy(name):
        return shutil.copytree(residual8_run, tmp_path / name)

    corrupt = copy("corrupt")
    (corrupt / "checkpoint.pt").write_bytes(b"not a checkpoint")
    missing = copy("missing")
    (missing / "checkpoint.pt").unlink()
    (tmp_path / "empty").mkdir()
    return {"corrupt": corrupt, "missing": missing, "empty": tmp_path / "empty", "run": residual8_run,
            "nowhere": tmp_path / "nowhere", "file": corrupt / "checkpoint.pt"}


@pytest.mark.parametrize("which, extra, says", [
    ("nowhere", [], "no such run directory"),
    ("empty", [], "not a run directory (no spec.yaml"),
    ("file", [], "not a run directory (a file"),
    ("corrupt", [], "not a loadable checkpoint"),
    ("missing", [], "no checkpoint.pt"),
    ("run", ["--split", "tests"], "--split tests: not a split; use train, val, test"),
    ("run", ["--split", "val"], "no 'val' split: the run held no training images out (data.val_split 0); "
                                "use --split test or train\n"),
    ("run", ["--tta", "crop"], "--tta crop: not a test-time augmentation; use flip\n"),
    ("run", ["--set", "model.depth=20"], "--set model.depth: a trained run keeps its data splits"),
    ("run", ["--data-dir", "/nonexistent", "--set", "data.dataset=cifar10"], "--set data.dataset"),
])
def test_bad_input_is_one_line_and_exit_2(broken_runs, which, extra, says):
    r = invoke("eval", broken_runs[which], *extra)
    assert r.exit_code == 2, (r.stdout, r.stderr)
    assert r.stderr.startswith("resnet: error: ") and r.stderr.count("\n") == 1, r.stderr
    assert says in r.stderr and "Traceback" not in r.stderr and r.stdout == ""


def test_the_confusion_figure_shows_each_rows_share_and_its_counts(monkeypatch, tmp_path):
    """Read back from matplotlib: colour is the share of the true class (each row sums to 1, an empty
    row stays 0), the numbers are the counts (none for 0), white on a dark cell; the title gives the
    error to two places. Three classes by hand: true 0 -> predicted 0 three times and 2 once."""
    import numpy as np

    from drawn import drawn_figure

    confusion = [[3, 0, 1], [0, 0, 0], [1, 1, 2]]
    result = {"label": "ResNet-8", "split": "test", "error": 42.857, "run": "runs/r8", "classes": ["0", "1", "2"],
              "confusion": confusion}
    fig = drawn_figure(monkeypatch, lambda path: EV.figure([result], path), tmp_path / "cm.png")
    ax = fig.axes[0]
    (image,) = ax.get_images()
    assert np.allclose(image.get_array(), [[0.75, 0, 0.25], [0, 0, 0], [0.25, 0.25, 0.5]])
    assert image.get_clim() == (0, 1)
    numbers = {(t.get_position(), t.get_text(), t.get_color()) for t in ax.texts}
    assert numbers == {((0, 0), "3", "white"), ((2, 0), "1", "black"), ((0, 2), "1", "black"),
                       ((1, 2), "1", "black"), ((2, 2), "2", "black")}  # (predicted, true): share 0.5 is not dark
    assert [t.get_text() for t in ax.get_xticklabels()] == ["0", "1", "2"]
    assert ax.get_title() == "ResNet-8, test: 42.86% error\nruns/r8"
    assert (ax.get_xlabel(), ax.get_ylabel()) == ("predicted class", "true class")
    assert fig.axes[-1].get_ylabel() == "share of the true class"  # the colour bar
    assert image.get_cmap().name == "Blues" and not any(g.get_visible() for g in ax.get_xgridlines())
    assert [t.get_rotation() for t in ax.get_xticklabels()] == [90.0] * 3  # class names read up the x axis


def test_confusion_figures_sit_side_by_side_sized_to_their_classes(monkeypatch, tmp_path):
    """Two runs: one row of two equal panels and one colour bar; a panel 3.6 inches a side up to 11
    classes, 0.32 inch a class beyond (20 classes: 6.4), plus 0.8 for the bar; counts and names up
    to 20 classes, none at 21 (unreadable). A true class seen once is wholly its own share."""
    import numpy as np

    from drawn import drawn_figure

    def result(c, confusion=None):
        return {"label": f"{c} classes", "split": "test", "error": 0.0, "run": "r", "classes": [str(i) for i in range(c)],
                "confusion": confusion or np.eye(c, dtype=int).tolist()}

    fig = drawn_figure(monkeypatch, lambda path: EV.figure([result(3, [[1, 0, 0], [0, 2, 0], [0, 0, 3]]),
                                                             result(3)], path), tmp_path / "two.png")
    left, right, bar = fig.axes
    assert tuple(fig.get_size_inches()) == pytest.approx((3.6 * 2 + 0.8, 3.6))
    a, b = left.get_position(), right.get_position()
    assert a.y0 == pytest.approx(b.y0) and a.x1 < b.x0 and a.width == pytest.approx(b.width)
    assert np.allclose(left.get_images()[0].get_array()[0], [1.0, 0, 0])  # one image, all of its row
    assert bar.get_ylabel() == "share of the true class"
    twenty = drawn_figure(monkeypatch, lambda path: EV.figure([result(20)], path), tmp_path / "20.png")
    assert tuple(twenty.get_size_inches()) == pytest.approx((6.4 + 0.8, 6.4))
    assert len(twenty.axes[0].texts) == 20 and len(twenty.axes[0].get_xticklabels()) == 20
    many = drawn_figure(monkeypatch, lambda path: EV.figure([result(21)], path), tmp_path / "21.png")
    assert len(many.axes[0].texts) == 0 and tuple(many.get_size_inches()) == pytest.approx((0.32 * 21 + 0.8, 0.32 * 21))


def test_the_precise_bn_figure_is_the_recalibrated_nets_error_counted_by_hand(residual8_run):
    """evaluate_run's defaults (the test split, the run's own status) and, with `bn_batches`, the
    error and loss of the net whose BN statistics precise_bn re-estimated over those training batches
    (test_precise_bn.py checks the statistics by hand), counted here image by image; the run keeps
    its own statistics for the single-view figure."""
    from resnet_cli.training import precise_bn

    result = EV.evaluate_run(load_run(residual8_run), bn_batches=3)
    assert (result["split"], result["run"], result["status"], result["bn_batches"]) == (
        "test", str(residual8_run), "completed", 3)
    assert result["classes"] == [str(c) for c in range(10)]  # the digits' names
    assert result["error"] == logged(residual8_run)[-1]["test_error"]
    run = load_run(residual8_run)
    x, y = run.data.test.x, run.data.test.y
    with precise_bn.recalibrated(run.model, precise_bn.train_batches(run.data, run.spec, run.device), 3,
                                 seed=run.spec.run.seed), torch.no_grad():
        out = run.model(x)
    assert result["error_precise_bn"] == pytest.approx(100 * (out.argmax(1) != y).sum().item() / len(y))
    assert result["loss_precise_bn"] == pytest.approx(F.cross_entropy(out, y).item(), rel=1e-5)
    assert result["error_precise_bn"] != result["error"] or result["loss_precise_bn"] != result["loss"]


def test_a_run_without_its_summary_is_unfinished_and_the_training_split_has_no_logged_figure(residual8_run, tmp_path):
    cut = shutil.copytree(residual8_run, tmp_path / "cut")
    (cut / "summary.json").unlink()
    assert EV.evaluate_run(load_run(cut))["status"] == "unfinished"
    train = EV.evaluate_run(load_run(residual8_run), split="train")
    assert train["logged_error"] is None and train["images"] == 1437  # a running mean under augmentation is not this


def test_a_class_with_no_image_has_no_error():
    confusion = torch.tensor([[3, 1], [0, 0]])
    assert EV.per_class(confusion, ["a", "b"]) == [
        {"class": 0, "name": "a", "images": 4, "wrong": 1, "error": 25.0},
        {"class": 1, "name": "b", "images": 0, "wrong": 0, "error": None}]


def test_classes_without_names_are_numbered_and_a_direct_call_refuses_what_the_command_does(residual8_run):
    run = load_run(residual8_run)
    run.data.classes = []  # a data set that names no class
    assert EV.evaluate_run(run)["classes"] == ["0", "1", "2", "3", "4", "5", "6", "7", "8", "9"]
    with pytest.raises(UserError) as refused:
        EV.evaluate_run(run, tta="flip")
    assert str(refused.value).startswith(f"--tta flip: {residual8_run} trained without flips")
    # bn_batches 0: one epoch's batches up to 50 (1437 training images at batch 64: 23)
    assert EV.evaluate_run(run, bn_batches=0)["bn_batches"] == 23
