"""Data: ImageNet-style image folders (decoded per batch by DataLoader workers), read from tiny
fakes written into tmp_path; the same epoch order and resume contract as the tensor datasets."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from resnet_cli import data as D
from resnet_cli.errors import UserError
from resnet_cli.spec import DataSpec


@pytest.fixture(autouse=True)
def _isolated_cache(tmp_path, monkeypatch):
    # No test may read or fill the user's real cache.
    monkeypatch.setenv("RESNET_DATA", str(tmp_path / "cache"))


def assert_one_line(err: pytest.ExceptionInfo) -> str:
    msg = str(err.value)
    assert msg and "\n" not in msg
    return msg


def fake_folder(root, per_class: dict[str, tuple[int, int]]) -> None:
    """root/{train,val}/<class>/<i>.png: small random colour images of varying size."""
    from PIL import Image

    rng = np.random.RandomState(0)
    for cls, counts in per_class.items():
        for sub, count in zip(("train", "val"), counts):
            if count == 0:
                continue
            (root / sub / cls).mkdir(parents=True)
            for i in range(count):
                h, w = rng.randint(36, 60, 2)
                Image.fromarray(rng.randint(0, 256, (h, w, 3), dtype=np.uint8)).save(root / sub / cls / f"{i}.png")


def folder_spec(root, **kw) -> DataSpec:
    return DataSpec(dataset="imagenet", dir=str(root), image_size=32, workers=0, **kw)


def test_image_folder_loads_and_yields_batches(tmp_path):
    fake_folder(tmp_path, {"cat": (5, 2), "dog": (4, 2)})
    d = D.load(folder_spec(tmp_path))
    assert (d.train, d.num_classes, d.in_channels, d.image_size) == (None, 2, 3, 32)
    assert d.folder.classes == ["cat", "dog"] and D.num_examples(d, "train") == 9
    b = D.batches_for(d, "train", 4, "crop_flip", 4, "cpu", seed=0)
    assert b.iters_per_epoch == 2  # 4 + 4, the final single image dropped
    batches = list(b.epoch(0))
    assert [x.shape for x, _ in batches] == [(4, 3, 32, 32)] * 2
    xs, ys = zip(*D.eval_for(d, "test", 3, "cpu"))
    assert torch.cat(ys).tolist() == [0, 0, 1, 1] and xs[0].shape == (3, 3, 32, 32)


def test_image_folder_batches_resume_bitwise_and_ignore_worker_count(tmp_path):
    fake_folder(tmp_path, {"a": (4, 1), "b": (4, 1)})
    d0 = D.load(folder_spec(tmp_path))
    d2 = D.load(folder_spec(tmp_path).model_copy(update={"workers": 2}))
    rng_before = torch.get_rng_state()
    full = list(D.batches_for(d0, "train", 3, "crop_flip", 0, "cpu", 5).epoch(1))
    tail = list(D.batches_for(d2, "train", 3, "crop_flip", 0, "cpu", 5).epoch(1, start=1))
    assert torch.equal(torch.get_rng_state(), rng_before)  # the run's global RNG is untouched
    assert len(tail) == len(full) - 1
    for (x1, y1), (x2, y2) in zip(full[1:], tail):
        assert torch.equal(x1, x2) and torch.equal(y1, y2)
    other = list(D.batches_for(d0, "train", 3, "crop_flip", 0, "cpu", 5).epoch(2))
    assert not all(torch.equal(a[0], b[0]) for a, b in zip(full, other))


def test_image_folder_val_split_and_test_labels_follow_train_classes(tmp_path):
    fake_folder(tmp_path, {"a": (6, 0), "b": (6, 2)})  # val/ lacks class a
    d = D.load(folder_spec(tmp_path, val_split=4))
    assert [D.num_examples(d, s) for s in ("train", "val", "test")] == [8, 4, 2]
    assert [y.tolist() for _, y in D.eval_for(d, "test", 8, "cpu")] == [[1, 1]]


def test_image_folder_problems_are_one_line(tmp_path):
    with pytest.raises(UserError) as err:
        D.load(folder_spec(tmp_path / "missing"))
    assert "train/<class>" in assert_one_line(err)
    fake_folder(tmp_path, {"a": (2, 1), "b": (2, 0)})
    (tmp_path / "val" / "zebra").mkdir()
    (tmp_path / "val" / "zebra" / "0.png").write_bytes((tmp_path / "val" / "a" / "0.png").read_bytes())
    with pytest.raises(UserError) as err:
        D.load(folder_spec(tmp_path))
    assert "zebra" in assert_one_line(err)


def test_unreadable_image_is_named_in_one_line(tmp_path):
    fake_folder(tmp_path, {"a": (3, 1), "b": (3, 1)})
    (tmp_path / "train" / "b" / "1.png").write_bytes(b"not a png")
    d = D.load(folder_spec(tmp_path))
    with pytest.raises(UserError) as err:
        list(D.batches_for(d, "train", 2, "none", 0, "cpu", 0).epoch(0))
    assert "1.png" in assert_one_line(err)


@pytest.mark.parametrize("shuffle", ["keyed", "global"])
def test_trainer_runs_on_an_image_folder(tmp_path, shuffle):
    # data.shuffle global hands the batches a caller-drawn order; folder batches took none (TypeError).
    from resnet_cli import spec as spec_mod
    from resnet_cli.training.trainer import Trainer

    fake_folder(tmp_path, {"a": (3, 1), "b": (3, 1)})
    s = spec_mod.load("imagenet/resnet200", sets=[
        "model.depth=18", "model.widths=[2,2,2,2]", f"data.dir={tmp_path}", "data.image_size=32", "data.workers=0",
        f"data.shuffle={shuffle}", "optim.batch_size=3", "optim.iters=2", "optim.epochs=null",
        "optim.milestones=null", "train.eval_every=end", "train.checkpoint_every=0", "run.device=cpu"])
    assert Trainer(s).run()["status"] == "completed"


def test_image_folder_batches_follow_a_given_order(tmp_path):
    fake_folder(tmp_path, {"a": (2, 1), "b": (2, 1)})  # train: a/0, a/1, b/0, b/1
    d = D.load(folder_spec(tmp_path))
    b = D.batches_for(d, "train", 2, "none", 0, "cpu", 0)
    # Two orders with different label patterns: a loader that ignored `order` could match one only.
    for order, labels in (([3, 0, 2, 1], [[1, 0], [1, 0]]), ([0, 2, 1, 3], [[0, 1], [0, 1]])):
        assert [y.tolist() for _, y in b.epoch(0, order=torch.tensor(order))] == labels
