"""`resnet eval`: a trained run's error, loss, per-class error and confusion matrix on one split.

Evaluation is what `resnet train` does at each epoch's end (He 2016a sec. 4.2): BN in eval mode
(the trained running statistics), no augmentation, the single original view, batches of 1000,
cross-entropy summed in fp32. On a run trained in fp32 this gives back the run's own logged test
error exactly. `--tta flip` adds a second figure beside it: the softmax averaged over the image and
its mirror, offered only to runs that trained with flips (a mirrored digit or kana is another
symbol, and a net never shown mirrors has no reason to agree with itself on them).
`--recalibrate-bn` adds another: the error with BN statistics re-estimated for the checkpoint's
weights over training batches (precise BN, Wu & Johnson 2021; resnet_cli/training/precise_bn.py).

The confusion matrix counts test images by (true class, predicted class): rows are the true class,
so a row sums to that class's images and its off-diagonal share is the class's error.
"""

from __future__ import annotations

from pathlib import Path

import torch
import torch.nn.functional as F

from .. import data as data_mod
from ..training import precise_bn
from ..errors import UserError
from ..runs.reader import RunRecord
from .trained import Trained, load_spec, runtime_for

TTA_MODES = ("flip",)
FLIP_AUGMENTS = ("flip", "crop_flip")
BATCH = 1000  # as `resnet train` evaluates (training/evaluation.py): the same sums in the same order


def check_request(path: str | Path, spec, split: str, tta: str | None) -> None:
    """What can be refused from the run's spec alone, before any data is read: an unknown or absent
    split, an unknown test-time augmentation, flips for a run that never saw one. One line each."""
    if split not in data_mod.SPLITS:
        raise UserError(f"--split {split}: not a split; use {', '.join(data_mod.SPLITS)}")
    if split == "val" and not spec.data.val_split:
        raise UserError(f"{path}: no 'val' split: the run held no training images out (data.val_split 0); "
                        "use --split test or train")
    if tta is None:
        return
    if tta not in TTA_MODES:
        raise UserError(f"--tta {tta}: not a test-time augmentation; use {', '.join(TTA_MODES)}")
    if spec.data.augment not in FLIP_AUGMENTS:
        raise UserError(f"--tta flip: {path} trained without flips (data.augment {spec.data.augment}), so a "
                        "mirrored image is not one it learned to classify; evaluate the single view")


@torch.no_grad()
def counts(model: torch.nn.Module, batches, num_classes: int, tta: str | None = None) -> dict:
    """Sums over (x, y) batches: the loss, and the confusion matrix (true, predicted) as int64
    counts, for the single view and, with `tta`, for the flip-averaged view."""
    loss = torch.zeros((), dtype=torch.float32)  # fp32 sums, as training/evaluation.py accumulates them
    confusion = torch.zeros(num_classes, num_classes, dtype=torch.int64)
    tta_loss, tta_confusion = torch.zeros((), dtype=torch.float64), torch.zeros_like(confusion)
    for x, y in batches:
        out = model(x).float()  # (N, classes)
        loss += F.cross_entropy(out, y, reduction="sum").cpu()
        confusion += _confusion(y, out.argmax(1), num_classes)
        if tta == "flip":
            mirrored = model(x.flip(3)).float()  # dim 3 is the width: a horizontal mirror
            probs = (out.softmax(1) + mirrored.softmax(1)) / 2  # (N, classes)
            tta_loss += F.nll_loss(probs.clamp_min(1e-12).log(), y, reduction="sum").double().cpu()
            tta_confusion += _confusion(y, probs.argmax(1), num_classes)
    result = {"loss_sum": loss.item(), "confusion": confusion}
    if tta == "flip":
        result.update(tta_loss_sum=tta_loss.item(), tta_confusion=tta_confusion)
    return result


def _confusion(y: torch.Tensor, pred: torch.Tensor, num_classes: int) -> torch.Tensor:
    """(classes, classes) counts: entry [t, p] = images of true class t predicted as p."""
    flat = torch.bincount((y * num_classes + pred).cpu(), minlength=num_classes * num_classes)
    return flat.view(num_classes, num_classes)


def per_class(confusion: torch.Tensor, names: list[str]) -> list[dict]:
    """One row per true class: its images, how many were predicted as another class, error %."""
    rows = []
    for c, name in enumerate(names):
        images = int(confusion[c].sum())
        wrong = images - int(confusion[c, c])
        rows.append({"class": c, "name": name, "images": images, "wrong": wrong,
                     "error": 100.0 * wrong / images if images else None})
    return rows


def error_of(confusion: torch.Tensor) -> tuple[int, float]:
    """(images, error %) from a confusion matrix: everything off the diagonal is wrong."""
    n = int(confusion.sum())
    return n, 100.0 * (n - int(confusion.trace())) / n


def logged_error(trained: Trained, split: str) -> float | None:
    """The run's own figure for this checkpoint: metrics.jsonl's `<split>_error` at the checkpoint's
    iteration (None for the training split, whose logged error is the running mean under
    augmentation and in train mode, and for a checkpoint taken between evaluations)."""
    if split == "train" or trained.iteration is None:
        return None
    own = load_spec(trained.path).data
    if (own.test_subset, own.image_size) != (trained.spec.data.test_subset, trained.spec.data.image_size):
        return None  # --set data.test_subset / image_size: other images than the run evaluated
    key = f"{split}_error"
    hits = [r[key] for r in RunRecord.read(trained.path).metrics() if r.get("iter") == trained.iteration and key in r]
    return hits[-1] if hits else None


def evaluate_run(trained: Trained, split: str = "test", tta: str | None = None, batch_size: int = BATCH,
                 bn_batches: int | None = None) -> dict:
    """The whole evaluation of one run; errors in %, losses per image. `bn_batches`: also evaluate
    with BN statistics re-estimated over that many training batches (0: min(DEFAULT_BATCHES, one
    epoch)); the model is given back with its own running statistics."""
    check_request(trained.path, trained.spec, split, tta)
    data, model = trained.data, trained.model
    runtime_for(trained.device)  # fp32, TF32 off on CUDA: the net's own numbers
    model.eval()
    n = data_mod.num_examples(data, split)
    batches = data_mod.eval_for(data, split, min(batch_size, n), trained.device)
    sums = counts(model, batches, data.num_classes, tta)
    names = data.classes or [str(c) for c in range(data.num_classes)]
    images, error = error_of(sums["confusion"])
    summary = RunRecord.read(trained.path).summary or {}
    result = {
        "run": str(trained.path), "label": trained.label, "status": summary.get("status", "unfinished"),
        "iter": trained.iteration, "split": split, "images": images, "error": error,
        "loss": sums["loss_sum"] / images, "logged_error": logged_error(trained, split),
        "classes": names, "per_class": per_class(sums["confusion"], names),
        "confusion": sums["confusion"].tolist(),
    }
    if bn_batches is not None:
        result.update(recalibrated(trained, split, batch_size, bn_batches))
    if tta:
        result["tta"] = {"mode": tta, "error": error_of(sums["tta_confusion"])[1],
                         "loss": sums["tta_loss_sum"] / images, "confusion": sums["tta_confusion"].tolist()}
    return result


def recalibrated(trained: Trained, split: str, batch_size: int, bn_batches: int) -> dict:
    """The split's error and loss with precise-BN statistics over `bn_batches` training batches."""
    data, model, spec = trained.data, trained.model, trained.spec
    batches = precise_bn.train_batches(data, spec, trained.device)
    n = bn_batches or min(precise_bn.DEFAULT_BATCHES, batches.iters_per_epoch)
    with precise_bn.recalibrated(model, batches, n, seed=spec.run.seed):
        size = min(batch_size, data_mod.num_examples(data, split))
        sums = counts(model, data_mod.eval_for(data, split, size, trained.device), data.num_classes)
    images, error = error_of(sums["confusion"])
    return {"bn_batches": n, "error_precise_bn": error, "loss_precise_bn": sums["loss_sum"] / images}


def figure(results: list[dict], path: str | Path) -> Path:
    """One confusion matrix per run, side by side: colour is the share of each true class (a row
    sums to 1), numbers are counts where the classes are few enough to read them."""
    from .. import figures

    plt = figures.pyplot()
    k = len(results)
    size = max(3.6, 0.32 * len(results[0]["classes"]))
    fig, axes = plt.subplots(1, k, figsize=(size * k + 0.8, size), squeeze=False)
    for ax, r in zip(axes[0], results):
        counts_ = torch.tensor(r["confusion"], dtype=torch.float64)
        share = counts_ / counts_.sum(1, keepdim=True).clamp_min(1)
        image = ax.imshow(share.numpy(), cmap="Blues", vmin=0, vmax=1)
        c = len(r["classes"])
        ticks = range(c)
        if c <= 20:
            ax.set_xticks(ticks, r["classes"], rotation=90, fontsize=7)
            ax.set_yticks(ticks, r["classes"], fontsize=7)
            for t in ticks:
                for p in ticks:
                    if counts_[t, p]:
                        ax.text(p, t, f"{int(counts_[t, p])}", ha="center", va="center", fontsize=6,
                                color="white" if share[t, p] > 0.5 else "black")
        ax.grid(False)
        ax.set(xlabel="predicted class", ylabel="true class",
               title=f"{r['label']}, {r['split']}: {r['error']:.2f}% error\n{r['run']}")
    fig.colorbar(image, ax=axes[0].tolist(), fraction=0.03, label="share of the true class")
    return figures.save(fig, path)
