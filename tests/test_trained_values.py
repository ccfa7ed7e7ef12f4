"""analysis/trained.py by hand: the papers' names for a run (He 2016a's plain-34 / ResNet-34, He
2016b's shortcut names, the ViT family's blocks), and the one line each bad run directory, device or
`--set` gets. test_cli_open_runs.py opens real runs."""

import shutil
from types import SimpleNamespace

import pytest
import torch

from resnet_cli.analysis import trained as T
from resnet_cli.errors import UserError


def spec(kind, depth, family="cifar", unit="original"):
    return SimpleNamespace(model=SimpleNamespace(family=family, depth=depth, unit=unit,
                                                 shortcut=SimpleNamespace(kind=kind)))


@pytest.mark.parametrize("args,label", [
    (("none", 34), "plain-34"), (("identity", 34), "ResNet-34"), (("exclusive_gate", 110), "exclusive_gate-110"),
    (("identity", 1001, "cifar", "full_preact"), "ResNet-1001 (full_preact)"),
    (("identity", 12, "vit", "original"), "ViT-12"), (("none", 12, "vit", "original"), "plain-ViT-12"),
    (("rezero", 12, "vit", "pre_ln"), "rezero-ViT-12 (pre_ln)"),
])
def test_a_run_is_named_as_the_papers_name_it(args, label):
    assert T.run_label(spec(*args)) == label


def test_each_bad_directory_gets_its_own_line(tmp_path):
    with pytest.raises(UserError) as err:
        T.check_dir(tmp_path / "gone")
    assert str(err.value) == f"{tmp_path / 'gone'}: no such run directory"
    (tmp_path / "file").write_text("x")
    with pytest.raises(UserError) as err:
        T.check_dir(tmp_path / "file")
    assert str(err.value) == f"{tmp_path / 'file'}: not a run directory (a file; give the directory that holds spec.yaml)"
    (tmp_path / "empty").mkdir()
    with pytest.raises(UserError) as err:
        T.check_dir(tmp_path / "empty")
    assert str(err.value) == (f"{tmp_path / 'empty'}: not a run directory (no spec.yaml; train one with "
                              f"`resnet train ... --out {tmp_path / 'empty'}`)")
    (tmp_path / "empty" / "spec.yaml").write_text("{}\n")
    assert T.check_dir(str(tmp_path / "empty")) == tmp_path / "empty"


def test_a_trained_run_keeps_its_data_but_where_it_is_read_from(tmp_path):
    (tmp_path / "spec.yaml").write_text("{}\n")
    with pytest.raises(UserError) as err:
        T.load_spec(tmp_path, ["data.dataset=cifar10"])
    assert str(err.value) == ("--set data.dataset: a trained run keeps its data splits and normalisation; only "
                              "data.dir, data.download, data.test_subset, data.workers, data.image_size may change")


def test_a_device_is_cpu_cuda_or_auto(monkeypatch):
    assert T.pick_device("cpu") == torch.device("cpu")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert T.pick_device("auto") == torch.device("cpu")
    with pytest.raises(UserError, match=r"^--device cuda:1: no CUDA device is available; use cpu or auto$"):
        T.pick_device("cuda:1")
    with pytest.raises(UserError, match=r"^--device gpu0: not a device; use auto, cpu, cuda or cuda:N$"):
        T.pick_device("gpu0")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    assert T.pick_device("auto") == torch.device("cuda")


def copy_of(run, tmp_path):
    return shutil.copytree(run, tmp_path / "copy")


def test_a_bad_spec_names_the_runs_spec_file(residual8_run, tmp_path):
    p = copy_of(residual8_run, tmp_path)
    (p / "spec.yaml").write_text((p / "spec.yaml").read_text().replace("model:\n", "model:\n  wdth: 3\n", 1))
    with pytest.raises(UserError) as err:
        T.load_spec(p)
    assert str(err.value).startswith(f"{p / 'spec.yaml'}: ") and "wdth" in str(err.value)


def test_a_checkpoint_without_weights_or_of_another_net_is_one_line(residual8_run, tmp_path):
    p = copy_of(residual8_run, tmp_path)
    state = torch.load(p / "checkpoint.pt", weights_only=True)
    torch.save({k: v for k, v in state.items() if k != "model"}, p / "checkpoint.pt")
    with pytest.raises(UserError) as err:
        T.load_run(p)
    assert str(err.value) == f"{p / 'checkpoint.pt'}: holds no model weights"
    torch.save(state, p / "checkpoint.pt")
    text = (p / "spec.yaml").read_text()
    assert "widths: [4]" in text
    (p / "spec.yaml").write_text(text.replace("widths: [4]", "widths: [8]", 1))  # edited after training
    with pytest.raises(UserError) as err:
        T.load_run(p)
    assert str(err.value).startswith(f"{p / 'checkpoint.pt'}") and str(err.value).endswith(
        f"{p / 'spec.yaml'} describes another net (edited?); restore the spec it was trained with")


def test_a_checkpoint_without_its_progress_has_no_iteration(residual8_run, tmp_path):
    p = copy_of(residual8_run, tmp_path)
    state = torch.load(p / "checkpoint.pt", weights_only=True)
    opened = T.load_run(p)
    assert opened.iteration == state["progress"]["iteration"] > 0
    assert opened.device == torch.device("cpu") and T.load_run(p, torch.device("cpu")).device == torch.device("cpu")
    torch.save({**state, "progress": 7}, p / "checkpoint.pt")  # not the mapping this version writes
    assert T.load_run(p).iteration is None


def test_open_runs_checks_every_spec_with_its_data_items_before_loading_and_picks_the_device(residual8_run):
    seen = []
    (run,) = T.open_runs([residual8_run], data_sets=["data.test_subset=50"], before=seen.extend, threads=0)
    assert seen[0].data.test_subset == 50 and run.spec.data.test_subset == 50
    assert run.device.type == ("cuda" if torch.cuda.is_available() else "cpu")  # auto
    assert T.open_runs([residual8_run], torch.device("cpu"), threads=0)[0].device == torch.device("cpu")
