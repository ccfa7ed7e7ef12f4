"""Data paths for GPUs and torchrun (issue 14, items 6 and 12): image folders under torchrun use one
persistent DataLoader and yield each rank's slice of every global batch; evaluation splits stay
resident on the device; evaluation batches shard over ranks."""

import numpy as np
import pytest
import torch

from resnet_cli import data as D
from resnet_cli.data import batches as batches_mod
from resnet_cli.data import folders
from resnet_cli.spec import DataSpec


def fake_folder(root, per_class):
    from PIL import Image

    rng = np.random.RandomState(0)
    for cls, (n_train, n_val) in per_class.items():
        for sub, count in (("train", n_train), ("val", n_val)):
            (root / sub / cls).mkdir(parents=True, exist_ok=True)
            for i in range(count):
                Image.fromarray(rng.randint(0, 256, (40, 44, 3), dtype=np.uint8)).save(root / sub / cls / f"{i}.png")


@pytest.fixture
def loaders(monkeypatch):
    """Counts the DataLoaders the folder code makes."""
    made = []
    real = torch.utils.data.DataLoader

    def counting(*a, **k):
        loader = real(*a, **k)
        made.append(loader)
        return loader

    monkeypatch.setattr(folders.torch.utils.data, "DataLoader", counting)
    return made


def test_folder_ranks_slice_the_single_process_batches_from_one_persistent_loader(tmp_path, loaders):
    fake_folder(tmp_path, {"a": (7, 2), "b": (7, 2)})
    spec = DataSpec(dataset="imagenet", dir=str(tmp_path), image_size=32, workers=1)
    d = D.load(spec)
    one = D.batches_for(d, "train", 4, "crop_flip", 0, "cpu", seed=3)
    ranks = [D.batches_for(d, "train", 4, "crop_flip", 0, "cpu", seed=3, shard=(r, 2)) for r in (0, 1)]
    for epoch in (0, 1):
        whole = list(one.epoch(epoch))
        parts = [list(b.epoch(epoch)) for b in ranks]
        assert len(whole) == one.iters_per_epoch >= 3
        for i, (x, y) in enumerate(whole):  # rank 0 then rank 1: the single process's global batch, bitwise
            assert torch.equal(torch.cat([parts[0][i][0], parts[1][i][0]]), x)
            assert torch.equal(torch.cat([parts[0][i][1], parts[1][i][1]]), y)
    # One loader per batches object for the whole run (not one per global batch), workers kept.
    assert len(loaders) == 3 and all(loader.persistent_workers for loader in loaders)
    resumed = list(D.batches_for(d, "train", 4, "crop_flip", 0, "cpu", seed=3, shard=(1, 2)).epoch(1, start=2))  # a resume
    assert torch.equal(resumed[0][0], parts[1][2][0])


def test_folder_evaluation_shards_cover_the_split_once(tmp_path):
    fake_folder(tmp_path, {"a": (2, 5), "b": (2, 4)})
    d = D.load(DataSpec(dataset="imagenet", dir=str(tmp_path), image_size=32, workers=0))
    whole = torch.cat([y for _, y in D.eval_for(d, "test", 2, "cpu")])
    parts = [torch.cat([y for _, y in D.eval_for(d, "test", 2, "cpu", shard=(r, 3))]) for r in range(3)]
    assert sorted(torch.cat(parts).tolist()) == sorted(whole.tolist()) and len(whole) == 9


def test_tensor_evaluation_shards_are_every_worldth_batch():
    split = D.Split(torch.arange(10.0).view(10, 1, 1, 1), torch.arange(10))
    got = [[y.tolist() for _, y in batches_mod.eval_batches(split, 3, "cpu", shard=(r, 2))] for r in (0, 1)]
    assert got == [[[0, 1, 2], [6, 7, 8]], [[3, 4, 5], [9]]]


def test_evaluation_split_is_copied_to_the_device_once(monkeypatch):
    """On a GPU the split is copied once and then read in place (faked: a 'meta' device stands
    for CUDA, and `Tensor.to` is counted)."""
    split = D.Split(torch.randn(6, 1, 2, 2), torch.arange(6))
    copies = []
    real_to = torch.Tensor.to

    def counted(self, *a, **k):
        copies.append(a)
        return real_to(self, *a, **k)

    monkeypatch.setattr(torch.Tensor, "to", counted)
    for _ in range(5):
        list(batches_mod.eval_batches(split, 4, "meta"))
    assert len(copies) == 2  # x and y, once
    split.x = torch.randn(6, 1, 2, 2)  # new tensors: copied anew
    list(batches_mod.eval_batches(split, 4, "meta"))
    assert len(copies) == 4
