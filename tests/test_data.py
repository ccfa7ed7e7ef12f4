"""Data: datasets and splits, CIFAR batch files, whole-batch augmentation, resumable epoch batches
(image folders: test_image_folders.py).

Offline and CPU-only: CIFAR batch files are tiny fakes written into tmp_path, and the
one download path is exercised with torchvision's dataset class replaced by one that fails.
"""

from __future__ import annotations

import pickle
import urllib.error

import numpy as np
import pytest
import torch
from torch import nn

from resnet_cli import data as D
from resnet_cli.data import splits, synthetic
from resnet_cli.errors import UserError
from resnet_cli.spec import DataSpec, SyntheticSpec

SMALL_SYNTH = SyntheticSpec(image_size=8, channels=2, classes=4, train_size=512, test_size=256)


@pytest.fixture(autouse=True)
def _isolated_cache(tmp_path, monkeypatch):
    # No test may read or fill the user's real cache.
    monkeypatch.setenv("RESNET_DATA", str(tmp_path / "cache"))


@pytest.fixture(scope="module")
def digits() -> D.Data:
    return D.load(DataSpec(dataset="digits"))


def assert_one_line(err: pytest.ExceptionInfo) -> str:
    msg = str(err.value)
    assert msg and "\n" not in msg
    return msg


# ---------------------------------------------------------------------------------------------
# digits


@pytest.mark.slow  # a child process: the import is measured in a fresh interpreter
def test_digits_load_without_importing_scikit_learns_datasets():
    """The stored split and scikit-learn's data file: a digits run does not pay for importing
    scikit-learn's datasets and model selection (SciPy with them) at every start."""
    from processes import in_child

    out = in_child("import sys; from resnet_cli.data import digits; raw = digits.read(None); "
                   "print(len(raw.train.y), len(raw.test.y), sorted(m for m in sys.modules if m.startswith('sklearn')))")
    assert out.returncode == 0, out.stderr
    assert out.stdout.split("\n")[0] == "1437 360 []"


def test_digits_read_from_scikit_learn_itself_where_its_file_is_not_found(monkeypatch):
    from resnet_cli.data import digits

    images, labels = digits.all_digits()
    monkeypatch.setattr(digits.importlib.util, "find_spec", lambda name: None)
    asked = digits.all_digits()  # through sklearn.datasets.load_digits
    assert np.array_equal(asked[0], images) and np.array_equal(asked[1], labels)
    assert images.shape == (1797, 8, 8) and np.bincount(labels).tolist() == [178, 182, 177, 183, 181, 182, 181,
                                                                             179, 174, 180]


def test_digits_is_the_seed_split(digits):
    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split

    assert (len(digits.train), len(digits.test), digits.val) == (1437, 360, None)
    assert digits.train.x.shape == (1437, 1, 8, 8) and digits.train.x.dtype == torch.float32
    assert digits.train.y.dtype == torch.int64
    assert (digits.num_classes, digits.in_channels, digits.image_size) == (10, 1, 8)
    # Exactly the seed experiment's inputs: pixel/16 in the order train_test_split returns.
    ref = load_digits()
    idx_tr, idx_te = train_test_split(np.arange(1797), test_size=0.2, random_state=0, stratify=ref.target)
    for part, idx in ((digits.train, idx_tr), (digits.test, idx_te)):
        assert torch.equal(part.x, torch.tensor(ref.images[idx] / 16.0, dtype=torch.float32).unsqueeze(1))
        assert torch.equal(part.y, torch.tensor(ref.target[idx]))
    assert digits.train.x.min() == 0 and digits.train.x.max() == 1


def test_val_split_is_stratified_disjoint_and_fixed(digits):
    spec = DataSpec(dataset="digits", val_split=200)
    a, b = D.load(spec), D.load(spec)
    assert (len(a.train), len(a.val), len(a.test)) == (1237, 200, 360)
    assert torch.equal(a.val.x, b.val.x) and torch.equal(a.train.y, b.train.y)
    # train + val is the full training set, without overlap.
    def rows(split):
        return {tuple(r) for r in split.x.flatten(1).tolist()}

    assert len(rows(a.train) | rows(a.val)) == len(rows(digits.train))
    assert torch.bincount(a.val.y, minlength=10).sub(20).abs().max() <= 1


def test_val_split_must_leave_training_images():
    with pytest.raises(UserError) as err:
        D.load(DataSpec(dataset="digits", val_split=1437))
    assert "val_split" in assert_one_line(err)


def test_subsets_are_stratified_nested_prefixes():
    small = D.load(DataSpec(dataset="digits", train_subset=50, test_subset=20))
    big = D.load(DataSpec(dataset="digits", train_subset=100))
    assert (len(small.train), len(small.test), len(big.train)) == (50, 20, 100)
    assert torch.bincount(small.train.y, minlength=10).tolist() == [5] * 10
    assert torch.bincount(small.test.y, minlength=10).tolist() == [2] * 10
    big_rows = {tuple(r) for r in big.train.x.flatten(1).tolist()}
    assert all(tuple(r) in big_rows for r in small.train.x.flatten(1).tolist())
    with pytest.raises(UserError) as err:
        D.load(DataSpec(dataset="digits", test_subset=361))
    assert "test_subset" in assert_one_line(err)


def test_stratified_order_prefixes_are_balanced():
    labels = np.repeat(np.arange(4), [40, 20, 20, 20])
    order = splits._stratified_order(labels)
    assert sorted(order.tolist()) == list(range(100))
    assert np.bincount(labels[order[:10]], minlength=4).tolist() == [4, 2, 2, 2]


# ---------------------------------------------------------------------------------------------
# synthetic


def test_synthetic_shapes_determinism_and_normalisation():
    spec = DataSpec(dataset="synthetic", synthetic=SMALL_SYNTH)
    a, b = D.load(spec), D.load(spec)
    assert a.train.x.shape == (512, 2, 8, 8) and a.test.x.shape == (256, 2, 8, 8)
    assert (a.num_classes, a.in_channels, a.image_size) == (4, 2, 8)
    assert torch.equal(a.train.x, b.train.x) and torch.equal(a.test.y, b.test.y)
    assert torch.bincount(a.train.y).tolist() == [128] * 4
    mean, std = a.train.x.mean(dim=(0, 2, 3)), a.train.x.std(dim=(0, 2, 3), correction=0)
    assert torch.allclose(mean, torch.zeros(2), atol=1e-5) and torch.allclose(std, torch.ones(2), atol=1e-4)
    # The test set does not depend on how many training images were asked for.
    # (Compared before normalisation, whose statistics come from the training images.)
    raw = synthetic.read(spec)
    more = synthetic.read(DataSpec(dataset="synthetic", synthetic=SMALL_SYNTH.model_copy(update={"train_size": 600})))
    assert torch.equal(more.test.x, raw.test.x) and torch.equal(more.test.y, a.test.y)


def test_synthetic_is_learnable_by_a_conv_net_but_not_by_class_means():
    torch.manual_seed(0)
    d = D.load(DataSpec(dataset="synthetic", synthetic=SMALL_SYNTH))
    # Pixel-wise class means (what a linear model can use) average the shifted templates away.
    means = torch.stack([d.train.x[d.train.y == c].mean(0) for c in range(4)]).flatten(1)
    nearest = torch.cdist(d.test.x.flatten(1), means).argmin(1)
    assert (nearest == d.test.y).float().mean() < 0.45
    net = nn.Sequential(nn.Conv2d(2, 16, 3, padding=1), nn.BatchNorm2d(16), nn.ReLU(),
                        nn.Conv2d(16, 16, 3, padding=1), nn.BatchNorm2d(16), nn.ReLU(),
                        nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(16, 4))
    opt = torch.optim.Adam(net.parameters(), 1e-2)
    batches = D.Batches(d.train, 64, "none", 0, "cpu", seed=0)
    for epoch in range(19):  # 152 steps
        for x, y in batches.epoch(epoch):
            loss = nn.functional.cross_entropy(net(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
    net.eval()
    with torch.no_grad():
        accuracy = (net(d.test.x).argmax(1) == d.test.y).float().mean()
    assert accuracy > 0.5  # chance is 0.25


# ---------------------------------------------------------------------------------------------
# CIFAR python batches


def write_batch(path, images: np.ndarray, labels: list[int], label_key: bytes) -> None:
    batch = {b"batch_label": b"fake", label_key: labels, b"data": images, b"filenames": [b"x.png"] * len(labels)}
    with open(path, "wb") as f:
        pickle.dump(batch, f, protocol=2)


def fake_cifar(root, kind: str, per_file: int = 12) -> tuple[np.ndarray, np.ndarray]:
    """Write a tiny CIFAR in the python-batches format; return all training images and labels."""
    rng = np.random.RandomState(1)
    if kind == "cifar10":
        folder, names, key, classes = root / "cifar-10-batches-py", [f"data_batch_{i}" for i in range(1, 6)], b"labels", 10
    else:
        folder, names, key, classes = root / "cifar-100-python", ["train"], b"fine_labels", 100
    folder.mkdir(parents=True)
    train_x, train_y = [], []
    for name in names:
        x = rng.randint(0, 256, (per_file, 3072), dtype=np.uint8)
        y = rng.randint(0, classes, per_file).tolist()
        write_batch(folder / name, x, y, key)
        train_x.append(x)
        train_y += y
    test = "test_batch" if kind == "cifar10" else "test"
    write_batch(folder / test, rng.randint(0, 256, (7, 3072), dtype=np.uint8), list(range(7)), key)
    return np.concatenate(train_x), np.asarray(train_y)


@pytest.mark.parametrize("kind,n_train,classes", [("cifar10", 60, 10), ("cifar100", 12, 100)])
@pytest.mark.parametrize("point_at_batches", [False, True])
def test_fake_cifar_reads_back(tmp_path, kind, n_train, classes, point_at_batches):
    images, labels = fake_cifar(tmp_path, kind)
    folder = next(tmp_path.iterdir()) if point_at_batches else tmp_path
    d = D.load(DataSpec(dataset=kind, dir=str(folder), download=False))
    assert d.train.x.shape == (n_train, 3, 32, 32) and d.test.x.shape == (7, 3, 32, 32)
    assert (d.num_classes, d.in_channels, d.image_size) == (classes, 3, 32)
    assert d.train.y.tolist() == labels.tolist() and d.test.y.tolist() == list(range(7))
    # Per-channel normalisation with training statistics; undoing it gives the stored pixels,
    # laid out as 1024 red, 1024 green, 1024 blue values per row.
    raw = torch.from_numpy(images).float().div(255).view(-1, 3, 32, 32)
    var, mean = torch.var_mean(raw, dim=(0, 2, 3), correction=0)
    restored = d.train.x * var.sqrt().view(1, 3, 1, 1) + mean.view(1, 3, 1, 1)
    assert torch.allclose(restored, raw, atol=1e-5)
    assert torch.allclose(d.train.x.mean(dim=(0, 2, 3)), torch.zeros(3), atol=1e-5)


def test_normalisation_uses_training_images_after_the_split(tmp_path):
    fake_cifar(tmp_path, "cifar10")
    d = D.load(DataSpec(dataset="cifar10", dir=str(tmp_path), download=False, val_split=10))
    assert (len(d.train), len(d.val)) == (50, 10)
    assert torch.allclose(d.train.x.mean(dim=(0, 2, 3)), torch.zeros(3), atol=1e-5)
    assert not torch.allclose(d.val.x.mean(dim=(0, 2, 3)), torch.zeros(3), atol=1e-3)


def test_missing_cifar_without_download_is_one_line(tmp_path):
    (tmp_path / "empty").mkdir()
    with pytest.raises(UserError) as err:
        D.load(DataSpec(dataset="cifar10", dir=str(tmp_path / "empty"), download=False))
    msg = assert_one_line(err)
    assert "CIFAR-10 not found" in msg and "cifar-10-python.tar.gz" in msg and "--data-dir" in msg


def test_a_data_dir_that_is_not_there_is_never_filled_by_a_download(tmp_path, monkeypatch):
    import torchvision.datasets

    monkeypatch.setattr(torchvision.datasets, "CIFAR10", lambda **kw: pytest.fail("downloaded into a typo"))
    with pytest.raises(UserError) as err:
        D.load(DataSpec(dataset="cifar10", dir=str(tmp_path / "nowhere"), download=True))
    msg = assert_one_line(err)
    assert "CIFAR-10 not found" in msg and f"--data-dir {tmp_path / 'nowhere'}" in msg and "does not exist" in msg
    assert not (tmp_path / "nowhere").exists()


def test_failed_download_is_one_line(tmp_path, monkeypatch):
    import torchvision.datasets

    def offline(*args, **kwargs):
        raise urllib.error.URLError("[Errno -3] Temporary failure in name resolution")

    monkeypatch.setattr(torchvision.datasets, "CIFAR100", offline)
    with pytest.raises(UserError) as err:
        D.load(DataSpec(dataset="cifar100", download=True))  # looks in the (empty) cache dir
    msg = assert_one_line(err)
    assert "could not be downloaded" in msg and "URLError" in msg and str(tmp_path / "cache") in msg


def _truncate(path):
    path.write_bytes(path.read_bytes()[:500])


def _garbage(path):
    path.write_bytes(b"\x00not a pickle at all")


def _wrong_shape(path):
    write_batch(path, np.zeros((12, 100), np.uint8), [0] * 12, b"labels")


def _code(path):
    # A pickle that would run a command if loaded with plain pickle.load.
    path.write_bytes(b"cos\nsystem\n(S'touch pwned'\ntR.")


@pytest.mark.parametrize("damage", [_truncate, _garbage, _wrong_shape, _code])
def test_damaged_batch_is_one_line(tmp_path, monkeypatch, damage):
    fake_cifar(tmp_path, "cifar10")
    monkeypatch.chdir(tmp_path)
    damage(tmp_path / "cifar-10-batches-py" / "data_batch_3")
    with pytest.raises(UserError) as err:
        D.load(DataSpec(dataset="cifar10", dir=str(tmp_path), download=False))
    assert "data_batch_3" in assert_one_line(err)
    assert not (tmp_path / "pwned").exists()


def test_incomplete_cifar_folder_names_missing_files(tmp_path):
    fake_cifar(tmp_path, "cifar10")
    (tmp_path / "cifar-10-batches-py" / "test_batch").unlink()
    with pytest.raises(UserError) as err:
        D.load(DataSpec(dataset="cifar10", dir=str(tmp_path), download=True))
    assert "missing test_batch" in assert_one_line(err)


def test_cache_dir_follows_environment(tmp_path, monkeypatch):
    monkeypatch.setenv("RESNET_DATA", str(tmp_path / "elsewhere"))
    assert D.cache_dir() == tmp_path / "elsewhere"
    monkeypatch.delenv("RESNET_DATA")
    assert D.cache_dir().parts[-2:] == (".cache", "resnet-cli")


# ---------------------------------------------------------------------------------------------
# augment_batch


def padded_windows(x: torch.Tensor, pad: int) -> dict[tuple[int, int], torch.Tensor]:
    """Slow reference: every HxW window of the zero-padded batch, by offset."""
    _, _, h, w = x.shape
    p = torch.zeros(x.shape[0], x.shape[1], h + 2 * pad, w + 2 * pad)
    p[:, :, pad:pad + h, pad:pad + w] = x
    return {(dy, dx): p[:, :, dy:dy + h, dx:dx + w] for dy in range(2 * pad + 1) for dx in range(2 * pad + 1)}


def gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


@pytest.mark.parametrize("mode", D.AUGMENT_MODES)
def test_augment_keeps_shape_dtype_and_is_deterministic(mode):
    x = torch.randn(16, 3, 10, 12)
    out = D.augment_batch(x, mode, 4, gen(1))
    assert out.shape == x.shape and out.dtype == x.dtype and out.device == x.device
    assert torch.equal(out, D.augment_batch(x, mode, 4, gen(1)))
    if mode == "none":
        assert torch.equal(out, x)  # the identity
    else:
        assert not torch.equal(out, D.augment_batch(x, mode, 4, gen(2)))


def test_crop_is_the_drawn_window_of_the_padded_image():
    x = torch.randn(300, 2, 6, 7)
    out = D.augment_batch(x, "crop", 3, gen(5))
    windows = padded_windows(x, 3)
    # Offsets are the generator's first draw (documented order: crop offsets, then flips).
    offsets = torch.randint(0, 7, (300, 2), generator=gen(5))
    for i, (dy, dx) in enumerate(offsets.tolist()):
        assert torch.equal(out[i], windows[dy, dx][i])
    assert len({tuple(o) for o in offsets.tolist()}) == 49  # every offset is reachable


def test_flip_mirrors_a_random_half():
    x = torch.randn(400, 1, 5, 5)
    out = D.augment_batch(x, "flip", 4, gen(0))
    flipped = torch.tensor([torch.equal(o, xi.flip(2)) for o, xi in zip(out, x)])
    kept = torch.tensor([torch.equal(o, xi) for o, xi in zip(out, x)])
    assert bool((flipped ^ kept).all())
    assert 150 < int(flipped.sum()) < 250


def test_crop_flip_is_a_window_then_maybe_a_mirror():
    x = torch.randn(50, 3, 8, 8)
    out = D.augment_batch(x, "crop_flip", 2, gen(3))
    windows = padded_windows(x, 2)
    for i in range(50):
        views = [w[i] for w in windows.values()]
        assert any(torch.equal(out[i], v) or torch.equal(out[i], v.flip(2)) for v in views)


def test_unknown_augment_mode_is_refused():
    with pytest.raises(ValueError, match="crop_flip"):
        D.augment_batch(torch.zeros(2, 1, 4, 4), "auto", 4, gen(0))


# ---------------------------------------------------------------------------------------------
# epoch order and Batches


def indexed_split(n: int, classes: int = 3) -> D.Split:
    """Image i is filled with the value i, so a batch says which images it holds."""
    x = torch.arange(n, dtype=torch.float32).view(n, 1, 1, 1).expand(n, 1, 4, 4).contiguous()
    return D.Split(x, torch.arange(n) % classes)


def test_epoch_order_is_a_pure_permutation():
    order = D.epoch_order(100, seed=3, epoch=2)
    assert order.dtype == torch.int64 and sorted(order.tolist()) == list(range(100))
    assert torch.equal(order, D.epoch_order(100, 3, 2))
    assert not torch.equal(order, D.epoch_order(100, 3, 1))
    assert not torch.equal(order, D.epoch_order(100, 4, 2))


@pytest.mark.parametrize("n,bs,iters", [(9, 3, 3), (10, 3, 3), (11, 3, 4), (2, 128, 1), (129, 128, 1)])
def test_iters_per_epoch_drops_a_final_single_image(n, bs, iters):
    b = D.Batches(indexed_split(n), bs, "none", 0, "cpu", 0)
    assert b.iters_per_epoch == iters
    sizes = [len(y) for _, y in b.epoch(0)]
    assert len(sizes) == iters and min(sizes) >= 2


def test_batches_follow_epoch_order_with_matching_labels():
    split = indexed_split(20)
    b = D.Batches(split, 6, "none", 0, "cpu", seed=7)
    seen = torch.cat([x[:, 0, 0, 0] for x, _ in b.epoch(4)]).long()
    assert torch.equal(seen, D.epoch_order(20, 7, 4))
    for x, y in b.epoch(4):
        assert torch.equal(y, x[:, 0, 0, 0].long() % 3)


def test_resume_mid_epoch_is_bitwise_the_tail():
    split = D.Split(torch.randn(50, 3, 8, 8), torch.randint(0, 10, (50,)))
    b = D.Batches(split, 8, "crop_flip", 4, "cpu", seed=11)
    full = list(b.epoch(3))
    resumed = list(D.Batches(split, 8, "crop_flip", 4, "cpu", seed=11).epoch(3, start=4))
    assert len(resumed) == len(full) - 4
    for (x1, y1), (x2, y2) in zip(full[4:], resumed):
        assert torch.equal(x1, x2) and torch.equal(y1, y2)
    assert list(b.epoch(3, start=b.iters_per_epoch)) == []
    with pytest.raises(ValueError):
        next(b.epoch(3, start=b.iters_per_epoch + 1))


def test_different_epochs_and_seeds_give_different_batches():
    split = indexed_split(40)

    def first(seed, epoch):
        return next(D.Batches(split, 10, "none", 0, "cpu", seed).epoch(epoch))[0]

    assert not torch.equal(first(0, 0), first(0, 1))
    assert not torch.equal(first(0, 0), first(1, 0))
    assert torch.equal(first(0, 0), first(0, 0))


def test_eval_batches_and_entry_points_on_tensor_data(digits):
    xs, ys = zip(*D.eval_for(digits, "test", 100, "cpu"))
    assert [len(y) for y in ys] == [100, 100, 100, 60]
    assert torch.equal(torch.cat(xs), digits.test.x) and torch.equal(torch.cat(ys), digits.test.y)
    assert (D.num_examples(digits, "train"), D.num_examples(digits, "val")) == (1437, 0)
    assert isinstance(D.batches_for(digits, "train", 64, "none", 0, "cpu", 0), D.Batches)
    with pytest.raises(ValueError, match="no 'val'"):
        D.batches_for(digits, "val", 64, "none", 0, "cpu", 0)
