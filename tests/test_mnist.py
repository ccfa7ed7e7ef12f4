"""The MNIST family: the IDX reader, where the files are looked for, one-line errors, and the papers'
CIFAR nets on 28x28 one-channel images.

Offline: every IDX file here is a tiny fake the test writes, with a header packed by `struct` from
the format's description (LeCun et al.'s MNIST page), not by the reader's code. One test reads the
real Fashion-MNIST files of the Debian package when they are installed.
"""

from __future__ import annotations

import gzip
import struct
import urllib.error
from pathlib import Path

import numpy as np
import pytest
import torch

from resnet_cli import data as D
from resnet_cli import spec as S
from resnet_cli.data import idx, mnist
from resnet_cli.errors import UserError
from resnet_cli.spec import DataSpec

from invoking import invoke

DEBIAN_FASHION = Path("/usr/share/datasets/fashion-mnist")


@pytest.fixture(autouse=True)
def _isolated(tmp_path, monkeypatch):
    # No test may read or fill the user's cache, nor find the real Debian files by accident.
    monkeypatch.setenv("RESNET_DATA", str(tmp_path / "cache"))
    monkeypatch.setattr(mnist, "DEBIAN_ROOT", tmp_path / "debian")


def write_idx(path: Path, array: np.ndarray, *, gz: bool) -> Path:
    """An IDX file as the format page describes it: 0, 0, type 0x08 (ubyte), ndim; big-endian dims."""
    head = bytes([0, 0, 0x08, array.ndim]) + struct.pack(f">{array.ndim}I", *array.shape)
    body = head + np.ascontiguousarray(array, dtype=np.uint8).tobytes()
    path.parent.mkdir(parents=True, exist_ok=True)
    if gz:
        path = path.with_name(path.name + ".gz")
        path.write_bytes(gzip.compress(body))
    else:
        path.write_bytes(body)
    return path


def fake_set(folder: Path, n_train: int = 40, n_test: int = 20, seed: int = 0, gz: bool = True,
             size: int = 28) -> dict[str, np.ndarray]:
    """The four files of a tiny MNIST-like set; labels cycle through all 10 classes."""
    rng = np.random.RandomState(seed)
    arrays = {}
    for which, n in (("train", n_train), ("test", n_test)):
        images_name, labels_name = mnist.FILES[which]
        arrays[f"{which}_x"] = rng.randint(0, 256, (n, size, size)).astype(np.uint8)
        arrays[f"{which}_y"] = (np.arange(n) % 10).astype(np.uint8)
        write_idx(folder / images_name, arrays[f"{which}_x"], gz=gz)
        write_idx(folder / labels_name, arrays[f"{which}_y"], gz=gz)
    return arrays


def one_error_line(result) -> str:
    assert result.exit_code == 2, (result.stdout, result.stderr)
    lines = [ln for ln in result.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and "Traceback" not in result.stderr, result.stderr
    return lines[0]


# ---------------------------------------------------------------------------------------------
# The reader


@pytest.mark.parametrize("gz", [False, True])
def test_idx_reads_back_what_was_written(tmp_path, gz):
    images = np.random.RandomState(1).randint(0, 256, (3, 5, 4)).astype(np.uint8)
    labels = np.array([7, 0, 9], np.uint8)
    x = idx.read_idx(write_idx(tmp_path / "img", images, gz=gz), idx.IMAGES_MAGIC)
    y = idx.read_idx(write_idx(tmp_path / "lab", labels, gz=gz), idx.LABELS_MAGIC)
    assert x.shape == (3, 5, 4) and np.array_equal(x, images) and np.array_equal(y, labels)


def test_idx_header_by_hand(tmp_path):
    # A 1x2x2 image stack spelt byte by byte: magic 0x00000803, dims 1, 2, 2, then rows.
    path = tmp_path / "hand"
    path.write_bytes(bytes.fromhex("00000803" "00000001" "00000002" "00000002") + bytes([1, 2, 3, 4]))
    assert idx.read_idx(path, idx.IMAGES_MAGIC).tolist() == [[[1, 2], [3, 4]]]


def _truncate(path: Path) -> None:
    path.write_bytes(path.read_bytes()[:-7])  # gz: cut inside the stream


def _foreign(path: Path) -> None:
    path.write_bytes(b"\x89PNG\r\n\x1a\n" + bytes(64))


def _swap_for_labels(path: Path) -> None:
    path.write_bytes(gzip.compress(bytes.fromhex("00000801" "00000003") + bytes([1, 2, 3])))


@pytest.mark.parametrize("damage,needle", [
    (_truncate, "truncated"), (_foreign, "not an IDX images file"), (_swap_for_labels, "magic number 0x00000801"),
])
def test_damaged_images_file_is_one_line_via_cli(in_tmp, damage, needle):
    fake_set(in_tmp / "fm")
    damage(in_tmp / "fm" / "train-images-idx3-ubyte.gz")
    r = invoke("train", "--dataset", "fashion_mnist", "--data-dir", in_tmp / "fm", "--iters", 1, "--out", "run")
    line = one_error_line(r)
    assert needle in line and "train-images-idx3-ubyte.gz" in line


def test_raw_file_cut_short_is_truncated(tmp_path):
    path = write_idx(tmp_path / "img", np.zeros((4, 28, 28), np.uint8), gz=False)
    path.write_bytes(path.read_bytes()[:-100])
    with pytest.raises(UserError, match=r"truncated: an IDX images file of shape \(4, 28, 28\)"):
        idx.read_idx(path, idx.IMAGES_MAGIC)


def test_labels_out_of_range_and_count_mismatch(tmp_path):
    images = write_idx(tmp_path / "img", np.zeros((3, 28, 28), np.uint8), gz=True)
    bad = write_idx(tmp_path / "bad", np.array([0, 10, 2], np.uint8), gz=True)
    short = write_idx(tmp_path / "short", np.array([0, 1], np.uint8), gz=True)
    with pytest.raises(UserError, match="label 10, outside 0..9"):
        idx.read_pair(images, bad, 10)
    with pytest.raises(UserError, match="3 images but .* 2 labels"):
        idx.read_pair(images, short, 10)


# ---------------------------------------------------------------------------------------------
# Loading and where the files are looked for


@pytest.mark.parametrize("gz", [False, True])
def test_fake_fashion_mnist_loads_normalised_like_cifar(tmp_path, gz):
    arrays = fake_set(tmp_path / "fm", gz=gz)
    d = D.load(DataSpec(dataset="fashion_mnist", dir=str(tmp_path / "fm"), download=False))
    assert d.train.x.shape == (40, 1, 28, 28) and d.test.x.shape == (20, 1, 28, 28)
    assert (d.num_classes, d.in_channels, d.image_size) == (10, 1, 28)
    assert d.train.y.tolist() == arrays["train_y"].tolist()
    raw = torch.from_numpy(arrays["train_x"]).float().div(255)
    std, mean = raw.std(unbiased=False), raw.mean()
    assert torch.allclose(d.train.x[:, 0] * std + mean, raw, atol=1e-5)
    test_raw = torch.from_numpy(arrays["test_x"]).float().div(255)
    assert torch.allclose(d.test.x[:, 0], (test_raw - mean) / std, atol=1e-5)  # training statistics


def _train_size(spec) -> int:
    return len(mnist.read(spec).train)


def test_search_order(tmp_path):
    cache, debian = tmp_path / "cache", tmp_path / "debian"
    fake_set(tmp_path / "given", n_train=11)
    fake_set(cache / "FashionMNIST" / "raw", n_train=12)  # where torchvision downloads
    fake_set(cache / "fashion-mnist", n_train=13)
    fake_set(debian / "fashion-mnist", n_train=14)
    fake_set(cache / "mnist", n_train=15)  # another dataset's files: never taken for this one
    fake_set(cache, n_train=16)  # loose files in a shared place: whose are they?
    spec = DataSpec(dataset="fashion_mnist", download=False)
    assert _train_size(spec.model_copy(update={"dir": str(tmp_path / "given")})) == 11
    assert _train_size(spec) == 13
    for f in (cache / "fashion-mnist").iterdir():
        f.unlink()
    (cache / "fashion-mnist").rmdir()
    assert _train_size(spec) == 12
    for f in (cache / "FashionMNIST" / "raw").iterdir():
        f.unlink()
    assert _train_size(spec) == 14
    assert _train_size(DataSpec(dataset="mnist", download=False)) == 15


def test_missing_files_is_one_line_naming_the_places(in_tmp):
    r = invoke("train", "--dataset", "fashion_mnist", "--set", "data.download=false", "--iters", 1, "--out", "run")
    line = one_error_line(r)
    assert "Fashion-MNIST not found in" in line and "apt-get install dataset-fashion-mnist" in line
    assert str(in_tmp / "cache" / "fashion-mnist") in line and str(in_tmp / "debian" / "fashion-mnist") in line


def test_download_lands_where_the_next_run_looks(tmp_path, monkeypatch):
    import torchvision.datasets

    calls = []

    def fake_fashion(root, train, download):  # what torchvision's class leaves behind, offline
        calls.append(root)
        fake_set(Path(root) / "FashionMNIST" / "raw", n_train=17)

    monkeypatch.setattr(torchvision.datasets, "FashionMNIST", fake_fashion)
    spec = DataSpec(dataset="fashion_mnist", download=True)
    assert _train_size(spec) == 17 and calls == [str(tmp_path / "cache")]
    assert _train_size(spec) == 17 and len(calls) == 1  # found in the cache: no second download


def test_failed_download_is_one_line(tmp_path, monkeypatch):
    import torchvision.datasets

    def offline(*args, **kwargs):
        raise urllib.error.URLError("[Errno -3] Temporary failure in name resolution")

    monkeypatch.setattr(torchvision.datasets, "KMNIST", offline)
    with pytest.raises(UserError) as err:
        mnist.read(DataSpec(dataset="kmnist", download=True))
    msg = str(err.value)
    assert "\n" not in msg and "KMNIST not found" in msg and "could not be downloaded" in msg
    assert "URLError" in msg and "https://github.com/rois-codh/kmnist" in msg
    assert str(tmp_path / "cache" / "kmnist") in msg and str(tmp_path / "debian" / "kmnist") in msg  # places looked


def test_incomplete_folder_is_one_line(tmp_path):
    fake_set(tmp_path / "fm")
    (tmp_path / "fm" / "t10k-labels-idx1-ubyte.gz").unlink()
    with pytest.raises(UserError, match="incomplete .*missing t10k-labels-idx1-ubyte"):
        D.load(DataSpec(dataset="kmnist", dir=str(tmp_path / "fm"), download=False))


# ---------------------------------------------------------------------------------------------
# Shapes and augmentation known without the files


def test_dry_run_needs_no_files_and_counts_a_one_channel_resnet20():
    r = invoke("train", "--dataset", "fashion_mnist", "--dry-run", "--json")
    assert r.exit_code == 0, r.stderr
    import json

    out = json.loads(r.stdout.strip().splitlines()[-1])
    # ResNet-20, option A, counted by hand (He 2016a Table 6: 0.27M on CIFAR): a 3x3 stem from one
    # channel, 3 stages of 6 convs (the first of stages 2 and 3 widens), a BN (2 per channel)
    # after each conv, no parameters on the shortcuts, then fc 64 -> 10 with bias.
    convs = 9 * (1 * 16 + 6 * 16 * 16 + (16 * 32 + 5 * 32 * 32) + (32 * 64 + 5 * 64 * 64))
    bns = 2 * (16 + 6 * 16 + 6 * 32 + 6 * 64)
    assert out["params"] == convs + bns + 64 * 10 + 10 == 269_434
    assert (out["spec"]["data"]["augment"], out["spec"]["data"]["pad"]) == ("crop_flip", 2)


@pytest.mark.parametrize("dataset,augment,pad", [
    ("fashion_mnist", "crop_flip", 2), ("mnist", "crop", 2), ("kmnist", "crop", 2),
    ("cifar10", "crop_flip", 4), ("digits", "none", 4),
])
def test_auto_augmentation(dataset, augment, pad):
    s = S.load(overrides=[("data.dataset", dataset)])
    assert (s.data.augment, s.data.pad) == (augment, pad)
    s = S.load(overrides=[("data.dataset", dataset)], sets=["data.pad=3", "data.augment=flip"])
    assert (s.data.augment, s.data.pad) == ("flip", 3)  # set by hand: kept


# ---------------------------------------------------------------------------------------------
# The papers' CIFAR nets on 28x28 one-channel images, every unit and shortcut kind


def _kinds():
    """Every unit ordering with and without its shortcut (the plain twin), and every other shortcut."""
    rows = [(unit, kind) for unit in S.UNITS for kind in ("identity", "none")]
    return rows + [("original", kind) for kind in S.SHORTCUTS if kind not in ("identity", "none")]


@pytest.fixture(scope="module")
def fake_dir(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("fm")
    fake_set(folder, n_train=16, n_test=8)
    return folder


@pytest.mark.parametrize("unit,kind", _kinds())
def test_depth56_trains_on_28x28_for_every_unit_and_shortcut(tmp_path, fake_dir, unit, kind):
    from resnet_cli.model import build_model
    from resnet_cli.runs.writer import RunDir
    from resnet_cli.training.trainer import Trainer

    spec = S.load(overrides=[("data.dataset", "fashion_mnist"), ("data.dir", str(fake_dir)),
                              ("data.download", False), ("model.depth", 56), ("model.unit", unit),
                              ("model.shortcut.kind", kind), ("model.widths", [2, 2, 4]),
                              ("optim.batch_size", 8), ("optim.iters", 2), ("optim.warmup_iters", 0),
                              ("run.out", str(tmp_path / "run")), ("run.device", "cpu")])
    # 28 -> 14 -> 7: the three stages' feature maps (He 2016a sec. 4.2: 32 -> 16 -> 8 on CIFAR).
    model = build_model(spec.model, 1, 10)
    sizes = []
    hooks = [u.register_forward_hook(lambda m, i, o: sizes.append(o.shape[-1])) for u in model.units]
    model(torch.zeros(2, 1, 28, 28))
    assert sorted(set(sizes), reverse=True) == [28, 14, 7] and len(sizes) == 27
    for h in hooks:
        h.remove()
    run_dir = RunDir(tmp_path / "run")
    run_dir.create(spec, runtime={})
    summary = Trainer(spec, run_dir).run()
    assert summary["status"] == "completed" and summary["iterations"] == 2
    assert summary["test_error"] is not None and np.isfinite(summary["train_loss"])


# ---------------------------------------------------------------------------------------------
# The real files and the bundled experiment


@pytest.mark.skipif(not DEBIAN_FASHION.is_dir(), reason="Debian's dataset-fashion-mnist is not installed")
def test_real_debian_fashion_mnist(monkeypatch):
    monkeypatch.setattr(mnist, "DEBIAN_ROOT", DEBIAN_FASHION.parent)
    raw = mnist.read(DataSpec(dataset="fashion_mnist", download=False))
    assert raw.train.x.shape == (60000, 1, 28, 28) and raw.test.x.shape == (10000, 1, 28, 28)
    assert raw.train.x.dtype == torch.uint8
    # Fashion-MNIST is balanced: 6,000 training and 1,000 test images of each of 10 classes.
    assert torch.bincount(raw.train.y).tolist() == [6000] * 10
    assert torch.bincount(raw.test.y).tolist() == [1000] * 10


def test_fashion_fig1_config_plans_without_data():
    from resnet_cli.sweep import degrade_plan as degrade

    plan = degrade.make_plan("degrade/fashion-fig1")
    assert (plan.depths, plan.seeds, sorted(plan.nets)) == ([20, 56], [0, 1], ["plain", "residual"])
    plain, res = degrade.twin(plan, "plain", 56, 1), degrade.twin(plan, "residual", 56, 1)
    assert (plain.model.shortcut.kind, res.model.shortcut.kind) == ("none", "identity")
    assert res.data.dataset == "fashion_mnist" and res.model.downsample == "A" and res.model.widths == [16, 32, 64]
    assert S.diff(plain, res) == ["model.shortcut.kind"]


def test_a_given_data_dir_is_the_only_place_read(in_tmp):
    """`--data-dir` names where the data is: a folder that is not there, or one without the files,
    is one line naming it, never another copy (here a valid set in the cache) read in its place."""
    import json

    fake_set(in_tmp / "cache" / "fashion-mnist", n_train=13)
    for args, needle in ((["--data-dir", in_tmp / "nowhere"], "does not exist"),
                         (["--data-dir", in_tmp / "run.txt"], "is a file")):
        (in_tmp / "run.txt").write_text("x")
        r = invoke("train", "--dataset", "fashion_mnist", "--set", "data.download=false", *args, "--iters", 1,
                   "--out", "run")
        line = one_error_line(r)
        assert needle in line and str(args[1]) in line and "--data-dir" in line
        assert not (in_tmp / "run").exists()
    (in_tmp / "empty").mkdir()
    r = invoke("train", "--dataset", "fashion_mnist", "--set", "data.download=false", "--data-dir", in_tmp / "empty",
               "--iters", 1, "--out", "run")
    line = one_error_line(r)
    assert "Fashion-MNIST not found in" in line and str(in_tmp / "empty") in line
    assert str(in_tmp / "cache") not in line.split(" and data.download")[0]  # the cache was not looked in
    # meta.json says which copy was read
    fake_set(in_tmp / "given" / "FashionMNIST" / "raw", n_train=11)
    r = invoke("train", "--dataset", "fashion_mnist", "--set", "data.download=false", "--data-dir", in_tmp / "given",
               "--set", "model.widths=[2,2,2]", "--depth", 8, "--iters", 1, "--out", "run")
    assert r.exit_code == 0, r.stderr
    meta = json.loads((in_tmp / "run" / "meta.json").read_text())
    assert meta["data_source"] == str((in_tmp / "given" / "FashionMNIST" / "raw").resolve())
    r = invoke("train", "--dataset", "fashion_mnist", "--set", "data.download=false", "--set", "model.widths=[2,2,2]", "--depth", 8,
               "--iters", 1, "--out", "run2")
    assert r.exit_code == 0, r.stderr
    meta = json.loads((in_tmp / "run2" / "meta.json").read_text())
    assert meta["data_source"] == str((in_tmp / "cache" / "fashion-mnist").resolve())
