"""The recipe knobs: cosine schedule, label smoothing, Cutout, per-group learning rates (Fixup's
scalars at lr/10) and mixup. Each is off by default, and each is checked against a source of its
own: the closed form with hand-computed points, the loss written out from log-softmax, the masks
read back pixel by pixel from the augmented images, the authors' name rule, the soft-target loss."""

import json
import math

import pytest
import torch
import torch.nn.functional as F

from resnet_cli import data as D
from resnet_cli.training import schedule
from resnet_cli import spec as S
from resnet_cli.training.callbacks import Callback
from resnet_cli.errors import UserError
from resnet_cli.training.trainer import Trainer
from resnet_cli.cli import app
from resnet_cli.model import build_model
from resnet_cli.training import optimizers
from resnet_cli.training.mixup import Mixed
from typer.testing import CliRunner

from processes import killed_and_resumed_is_bitwise

# --- cosine schedule -------------------------------------------------------------------------------


def closed_form(t: int, lr: float, total: int, warmup: int, warmup_lr: float) -> float:
    """Loshchilov & Hutter 2017 (one cycle, lr_min 0) after He 2016b's constant warm-up."""
    return warmup_lr if t < warmup else 0.5 * lr * (1 + math.cos(math.pi * t / total))


COSINE = {"lr": 0.1, "schedule": "cosine", "iters": 100, "warmup_iters": 10, "warmup_lr": 0.01}


def test_cosine_trace_is_the_closed_form_after_the_warmup():
    optim = S.load(sets=[f"optim.{k}={v}" for k, v in COSINE.items()]).optim
    trace = [schedule.lr_at(t, optim, iters_per_epoch=7) for t in range(100)]
    assert trace == pytest.approx([closed_form(t, 0.1, 100, 10, 0.01) for t in range(100)], abs=1e-15)
    # by hand: cos(0.1 pi) = 0.9510565, cos(0.5 pi) = 0, cos(0.75 pi) = -0.7071068, cos(0.99 pi) = -0.9995066
    assert trace[:10] == [0.01] * 10
    assert trace[10] == pytest.approx(0.0975528, abs=1e-7)
    assert trace[50] == pytest.approx(0.05, abs=1e-12)
    assert trace[75] == pytest.approx(0.0146447, abs=1e-7)
    assert trace[99] == pytest.approx(2.467e-5, abs=1e-8)
    assert all(a >= b for a, b in zip(trace[10:], trace[11:]))  # decreasing after the warm-up


def test_cosine_in_epochs_runs_over_the_whole_length_in_iterations():
    optim = S.load(sets=["optim.schedule=cosine", "optim.iters=null", "optim.epochs=4", "optim.warmup_iters=0"]).optim
    assert optim.milestones is None  # resolve fills milestones for the step schedule only
    assert [schedule.lr_at(t, optim, iters_per_epoch=25) for t in (0, 50, 100)] == pytest.approx([0.1, 0.05, 0.0])


def test_the_default_schedule_is_still_the_papers_steps():
    optim = S.Spec().optim
    assert optim.schedule == "step" and optim.label_smoothing == 0.0
    optim = S.load("preact/resnet110-cifar10").optim  # He 2016b: 0.01 for 400 iterations, /10 at 32k and 48k
    lrs = [schedule.lr_at(t, optim, 391) for t in (0, 399, 400, 31999, 32000, 47999, 48000, 63999)]
    assert lrs == pytest.approx([0.01, 0.01, 0.1, 0.1, 0.01, 0.01, 0.001, 0.001])


class RecordLr(Callback):
    """The lr the optimizer applies at each step, read from its param group, and the step-1 loss."""

    def __init__(self):
        self.lrs, self.first = [], None

    def after_backward(self, t) -> None:
        self.lrs.append(t.optimizer.param_groups[0]["lr"])
        if self.first is None:
            self.first = (t.last_loss.detach().clone(), t.last_output.clone(), t.last_target.clone())


def tiny_trainer(*sets: str, callbacks=()) -> Trainer:
    spec = S.load("digits/residual8", sets=["model.widths=[4]", "optim.batch_size=64", *sets])
    return Trainer(spec, callbacks=callbacks)


def test_the_trainer_applies_the_cosine_trace_at_every_step():
    rec = RecordLr()
    t = tiny_trainer("optim.schedule=cosine", "optim.iters=30", "optim.epochs=null", "optim.warmup_iters=5",
                     "optim.lr=0.05", callbacks=[rec])
    t.run()
    assert rec.lrs == pytest.approx([closed_form(i, 0.05, 30, 5, 0.01) for i in range(30)], abs=1e-15)


def test_schedule_values_are_strict_and_cosine_refuses_milestones():
    with pytest.raises(UserError, match="'step' or 'cosine'"):
        S.load(sets=["optim.schedule=linear"])
    with pytest.raises(UserError, match="optim.schedule: step only"):
        S.load(sets=["optim.schedule=cosine", "optim.milestones=[100]"])
    spec = S.load("digits/residual8", sets=["optim.schedule=cosine"])  # its milestones: [] are no steps
    assert S.validate(S.to_tree(spec)) == spec  # the resolved spec (spec.yaml) reloads as it was


# --- label smoothing -------------------------------------------------------------------------------


def smoothed_nll(logits: torch.Tensor, y: torch.Tensor, eps: float) -> torch.Tensor:
    """Szegedy et al. 2016 written out: the target puts 1 - eps on the label and eps / K on every
    class (the label included), so the loss is (1 - eps) NLL + eps * mean over classes of -log p."""
    logp = logits.double().log_softmax(1)
    nll = -logp.gather(1, y.view(-1, 1)).squeeze(1)
    return ((1 - eps) * nll + eps * (-logp).mean(1)).mean()


def test_the_hand_formula_is_torchs_label_smoothing():
    g = torch.Generator().manual_seed(0)
    logits, y = torch.randn(32, 10, generator=g) * 3, torch.randint(0, 10, (32,), generator=g)
    for eps in (0.0, 0.1, 0.5):
        assert smoothed_nll(logits, y, eps).item() == pytest.approx(
            F.cross_entropy(logits, y, label_smoothing=eps).item(), rel=1e-6)


@pytest.mark.parametrize("eps", [0.0, 0.1])
def test_the_trainer_trains_on_the_smoothed_loss(eps):
    rec = RecordLr()
    t = tiny_trainer(f"optim.label_smoothing={eps}", "optim.iters=1", "optim.epochs=null", callbacks=[rec])
    t.run()
    loss, out, y = rec.first
    assert loss.item() == pytest.approx(smoothed_nll(out, y, eps).item(), rel=1e-6)
    if eps:
        assert loss.item() > smoothed_nll(out, y, 0.0).item() * 1.001  # the smoothing is not a no-op here


def test_label_smoothing_is_a_fraction_below_one():
    with pytest.raises(UserError, match="optim.label_smoothing"):
        S.load(sets=["optim.label_smoothing=1.0"])


# --- Cutout ---------------------------------------------------------------------------------------


def holes(x: torch.Tensor) -> list[tuple[int, int, int, int]]:
    """Per image of a batch of ones: the zeroed pixels' bounding box (top, bottom, left, right,
    inclusive), after checking every channel has the same zeros and that they fill that box."""
    out = []
    for img in x:
        zero = img == 0  # (C, H, W)
        assert all(torch.equal(zero[0], zero[c]) for c in range(len(zero))), "the same square on every channel"
        rows, cols = zero[0].any(1).nonzero().view(-1), zero[0].any(0).nonzero().view(-1)
        assert len(rows), "every image has a square"
        top, bottom, left, right = rows.min().item(), rows.max().item(), cols.min().item(), cols.max().item()
        box = zero[0, top:bottom + 1, left:right + 1]
        assert box.all() and zero[0].sum() == box.numel(), "exactly one solid rectangle"
        out.append((top, bottom, left, right))
    return out


@pytest.mark.parametrize("size", [4, 5])
def test_cutout_is_one_clipped_square_per_image_at_its_own_place(size):
    n, h, w = 2000, 12, 10
    g = torch.Generator().manual_seed(0)
    x = D.augment_batch(torch.ones(n, 3, h, w), "none", 0, g, cutout=size)
    boxes = holes(x)
    for top, bottom, left, right in boxes:
        height, width = bottom - top + 1, right - left + 1
        assert height <= size and width <= size
        if top > 0 and bottom < h - 1:
            assert height == size  # an unclipped square is size pixels tall ...
        if left > 0 and right < w - 1:
            assert width == size  # ... and wide
    assert len(set(boxes)) > 50, "each image draws its own position"
    # centres uniform over the whole image: squares clipped at each of the four borders, and
    # centres reach every row (a square of odd size centred on row 0 spans rows 0..size//2)
    assert {t for t, *_ in boxes if t == 0} and {b for _, b, *_ in boxes if b == h - 1}
    assert {l for *_, l, _ in boxes if l == 0} and {r for *_, r in boxes if r == w - 1}
    smallest = min(bottom - top + 1 for top, bottom, *_ in boxes)
    assert smallest == size - size // 2  # centre on the last row (even size) or first row: half a square


def test_cutout_leaves_crops_and_flips_as_they_were():
    torch.manual_seed(0)
    x = torch.randn(64, 3, 16, 16) + 5  # no pixel is 0
    plain = D.augment_batch(x, "crop_flip", 4, torch.Generator().manual_seed(1))
    cut = D.augment_batch(x, "crop_flip", 4, torch.Generator().manual_seed(1), cutout=6)
    changed = cut != plain
    assert changed.any() and (cut[changed] == 0).all()  # only the squares differ, and they are zeros


def digits_split():
    return D.load(S.load("digits/residual8").data).train


def test_cutout_batches_are_a_pure_function_of_seed_epoch_and_position():
    split = digits_split()
    run = lambda seed, start=0: list(D.Batches(split, 64, "none", 0, "cpu", seed, cutout=4).epoch(2, start=start))  # noqa: E731
    a, b, other = run(3), run(3), run(4)
    assert all(torch.equal(xa, xb) and torch.equal(ya, yb) for (xa, ya), (xb, yb) in zip(a, b))
    assert not torch.equal(a[0][0], other[0][0])
    tail = run(3, start=7)  # resumed inside the epoch: the same masks on the same images
    assert len(tail) == len(a) - 7 and all(torch.equal(xa, xt) for (xa, _), (xt, _) in zip(a[7:], tail))
    plain = list(D.Batches(split, 64, "none", 0, "cpu", 3).epoch(2))
    for (xc, yc), (xp, yp) in zip(a, plain):  # the same images, each with its own square cut
        assert torch.equal(yc, yp)
        changed = (xc != xp).flatten(1)
        assert (xc.flatten(1)[changed] == 0).all() and changed.any()  # (a square on the blank border changes nothing)


# ~23 iterations an epoch (batch 64 on 1,437 digits), checkpoint every 10: the kill lands mid-epoch 2.
RECIPE_RUN = ["digits/residual8", "--set", "model.widths=[4]", "--epochs", "3", "--set", "train.checkpoint_every=10",
              "--set", "data.cutout=4", "--set", "optim.schedule=cosine", "--set", "optim.label_smoothing=0.1",
              "--set", "optim.mixup=0.4", "--set", "optim.lr_groups=[{select: [biases], lr_scale: 0.1}]"]


@pytest.mark.slow
def test_kill_mid_epoch_and_resume_is_bitwise_the_uninterrupted_run(tmp_path):
    killed_and_resumed_is_bitwise(tmp_path, RECIPE_RUN)


def test_cutout_on_image_folders_is_per_batch_and_resumes(tmp_path):
    from test_image_folders import fake_folder, folder_spec

    fake_folder(tmp_path, {"a": (4, 1), "b": (4, 1)})
    d = D.load(folder_spec(tmp_path))
    plain = list(D.batches_for(d, "train", 3, "crop_flip", 0, "cpu", 5).epoch(1))
    cut = list(D.batches_for(d, "train", 3, "crop_flip", 0, "cpu", 5, cutout=8).epoch(1))
    tail = list(D.batches_for(d, "train", 3, "crop_flip", 0, "cpu", 5, cutout=8).epoch(1, start=1))
    for (xc, yc), (xp, yp) in zip(cut, plain):
        assert torch.equal(yc, yp)
        changed = xc != xp
        assert (xc[changed] == 0).all() and changed.flatten(1).any(1).all()  # a square in every image
        holes(torch.where(changed, torch.zeros_like(xc), torch.ones_like(xc)))  # one rectangle each
    assert all(torch.equal(a, b) for (a, _), (b, _) in zip(cut[1:], tail))


# --- per-group learning rates and mixup ------------------------------------------------------------

FIXUP = ["model.depth=8", "model.widths=[4, 8, 8]", "model.norm=fixup", "optim.weight_decay=0.0",
         "optim.lr_groups=[{select: [scalars, biases], lr_scale: 0.1}]"]


def test_fixup_groups_are_the_authors_name_rule_and_step_at_a_tenth():
    """Fixup's cifar_train.py puts every parameter whose name holds 'bias' or 'scale' at lr/10. One
    SGD step from zero momentum moves each parameter by lr * scale * grad: 0.005 for those, 0.05 for
    the rest."""
    spec = S.load(None, sets=FIXUP)
    torch.manual_seed(0)
    net = build_model(spec.model, 3, 10)
    opt = optimizers.build(net, spec.optim)
    slow = {name for name, _ in net.named_parameters() if "bias" in name or "scale" in name}
    assert len(slow) > 10
    grouped = {id(p) for g in opt.param_groups if g["lr_scale"] == 0.1 for p in g["params"]}
    assert {name for name, p in net.named_parameters() if id(p) in grouped} == slow
    optimizers.set_lrs(opt, 0.05)
    before = {name: p.detach().clone() for name, p in net.named_parameters()}
    F.cross_entropy(net(torch.randn(4, 3, 8, 8)), torch.tensor([0, 1, 2, 3])).backward()
    grads = {name: p.grad.clone() for name, p in net.named_parameters()}
    opt.step()
    for name, p in net.named_parameters():
        lr = 0.005 if name in slow else 0.05
        torch.testing.assert_close(p.detach(), before[name] - lr * grads[name], rtol=0, atol=1e-7)


def test_mixup_mixes_each_image_with_one_other_and_scores_the_soft_target():
    """Each mixed image is lam x_i + (1 - lam) x_j, the j a permutation; the loss equals the
    cross-entropy against the mixed one-hot target (a different computation), and a hit counts lam
    for the first target and 1 - lam for the second."""
    torch.manual_seed(3)
    x, y = torch.randn(6, 1, 4, 4), torch.tensor([0, 1, 2, 0, 1, 2])
    m = Mixed(x, y, 1.0)
    assert 0.0 < m.lam < 1.0
    rest = (m.x - m.lam * x).flatten(1)  # (1 - lam) x_j
    js = [int(torch.cdist(r[None], (1 - m.lam) * x.flatten(1)).argmin()) for r in rest]
    assert sorted(js) == list(range(6))
    torch.testing.assert_close(m.x, m.lam * x + (1 - m.lam) * x[js])
    assert torch.equal(m.y_other, y[js])
    out = torch.randn(6, 3)
    soft = m.lam * F.one_hot(y, 3).float() + (1 - m.lam) * F.one_hot(y[js], 3).float()
    torch.testing.assert_close(m.loss(out), F.cross_entropy(out, soft))
    pred = out.argmax(1)
    hand = sum(m.lam * float(pred[i] == y[i]) + (1 - m.lam) * float(pred[i] == y[js[i]]) for i in range(6))
    assert abs(float(m.hits(out)) - hand) < 1e-6


def test_a_mixup_run_repeats_and_resumes_bitwise(in_tmp, monkeypatch):
    """mixup draws from the global generator the checkpoints save: the same seed gives the same run,
    and one cut after its first epoch resumes to the uninterrupted result. The per-group lr of each
    epoch is in its metrics record."""
    args = ["train", "digits/residual8", "--set", "model.widths=[4]", "--set", "data.train_subset=256",
            "--epochs", "2", "--set", "optim.mixup=0.4", "--set", "model.norm=fixup",
            "--set", "optim.lr_groups=[{select: [scalars], lr_scale: 0.1}]", "--json"]
    for out in ("a", "b"):
        assert CliRunner().invoke(app, [*args, "--out", out]).exit_code == 0
    real = Trainer._end_epoch

    def stop_after_epoch_1(self):
        real(self)
        raise KeyboardInterrupt

    monkeypatch.setattr(Trainer, "_end_epoch", stop_after_epoch_1)
    assert CliRunner().invoke(app, [*args, "--out", "cut"]).exit_code != 0
    monkeypatch.setattr(Trainer, "_end_epoch", real)
    assert CliRunner().invoke(app, ["train", "--resume", "cut", "--json"]).exit_code == 0
    a, b, cut = (json.loads((in_tmp / d / "summary.json").read_text()) for d in ("a", "b", "cut"))
    assert (a["train_loss"], a["train_error"], a["test_error"]) == (b["train_loss"], b["train_error"], b["test_error"])
    assert (a["train_loss"], a["train_error"], a["test_error"]) == (cut["train_loss"], cut["train_error"], cut["test_error"])
    record = json.loads((in_tmp / "a" / "metrics.jsonl").read_text().splitlines()[0])
    assert record["lr_groups"] == {"scalars": record["lr"] * 0.1, "rest": record["lr"]}
