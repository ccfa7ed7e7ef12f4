"""`resnet export`: each format read back here the way its users read it (torch.jit.load,
onnxruntime, build_model + a state dict) gives the trained net's logits; the files beside it let a
user preprocess images; missing packages and bad input are one line."""

import importlib.util
import json
import warnings

import numpy as np
import pytest
import torch

from resnet_cli import spec as S
from resnet_cli.data import synthetic
from resnet_cli.analysis import export as EX
from resnet_cli.errors import UserError
from resnet_cli.analysis.trained import load_run
from resnet_cli.model import build_model

from invoking import invoke
from processes import in_child

HAS_ONNX = all(importlib.util.find_spec(m) for m in ("onnx", "onnxscript", "onnxruntime"))


# `resnet export --format onnx` runs in a child: torch's ONNX exporter (dynamo) leaves compiled
# graphs, threads and global settings in its process that changed the tests after it.
_EXPORT_IN_CHILD = """
import importlib.util, sys
missing = sys.argv[1]
if missing:  # as if that package were not installed
    real = importlib.util.find_spec
    importlib.util.find_spec = lambda name, *a: None if name == missing else real(name, *a)
sys.argv = ["resnet", *sys.argv[2:]]
from resnet_cli.cli import main
main()
"""


def export_in_child(*args, without: str = ""):
    """`resnet export ARGS` in a child process (`without`: a package it must believe missing)."""
    return in_child(_EXPORT_IN_CHILD, without, "export", *args)


def reader(fmt, path):
    """Load an export with the format's own tools, not the package's loaders."""
    if fmt == "torchscript":
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", FutureWarning)  # torch 2.14 deprecates torch.jit; it still loads
            return torch.jit.load(str(path))
    if fmt == "onnx":
        import onnxruntime

        session = onnxruntime.InferenceSession(str(path), providers=["CPUExecutionProvider"])
        return lambda x: torch.from_numpy(session.run(None, {session.get_inputs()[0].name: x.numpy()})[0])
    info = json.loads(path.with_name(path.name + ".json").read_text())
    spec = S.load(str(path.with_name(path.name + ".spec.yaml")))
    model = build_model(spec.model, info["input"]["input_shape"][0], info["num_classes"])
    model.load_state_dict(torch.load(path, weights_only=True))
    return model.eval()


FORMATS = ["torchscript", "state_dict",
           pytest.param("onnx", marks=[pytest.mark.slow,  # the ONNX exporter traces for seconds
                                       pytest.mark.skipif(not HAS_ONNX, reason="onnx, onnxscript, onnxruntime "
                                                                               "not installed (resnet-cli[onnx])")])]


@pytest.mark.parametrize("fmt", FORMATS)
def test_export_round_trip_gives_the_trained_nets_logits(residual8_run, tmp_path, fmt):
    before = sorted(p.name for p in residual8_run.iterdir())
    path = tmp_path / f"model.{fmt}"
    if fmt == "onnx":
        r = export_in_child(residual8_run, "--format", fmt, "--out", path, "--json")
        assert r.returncode == 0, r.stderr
    else:
        r = invoke("export", residual8_run, "--format", fmt, "--out", path, "--json")
        assert r.exit_code == 0, r.stderr
    report = json.loads(r.stdout)
    assert report["event"] == "export" and report["check"]["max_abs_diff"] <= 1e-5
    run = load_run(residual8_run)  # the trained net, eval mode
    x = run.data.test.x[:7]  # a batch size the export never saw
    with torch.no_grad():
        got = torch.as_tensor(reader(fmt, path)(x))
        want = run.model(x)
    assert got.shape == (7, 10) and (got - want).abs().max().item() <= 1e-5
    info = json.loads(path.with_name(path.name + ".json").read_text())
    assert info["classes"] == [str(i) for i in range(10)] and info["input"]["input_shape"] == [1, 8, 8]
    assert path.with_name(path.name + ".spec.yaml").read_text() == (residual8_run / "spec.yaml").read_text()
    assert sorted(p.name for p in residual8_run.iterdir()) == before


def test_the_preprocessing_beside_the_export_turns_raw_images_into_the_nets_inputs(in_tmp):
    """Synthetic images are normalised with the training images' mean/std: the JSON's figures, applied
    to the raw images by hand, must give exactly what the trained net was fed."""
    t = invoke("train", "cifar/resnet20", "--dataset", "synthetic", "--iters", "2", "--batch-size", "16",
               "--set", "model.widths=[4,4,4]", "--set", "data.synthetic.train_size=64",
               "--set", "data.synthetic.test_size=16", "--set", "data.synthetic.image_size=16", "--out", "syn")
    assert t.exit_code == 0, t.stderr
    r = invoke("export", "syn", "--format", "state_dict", "--out", "syn.sd")
    assert r.exit_code == 0, r.stderr
    pre = json.loads((in_tmp / "syn.sd.json").read_text())["input"]
    run = load_run("syn")
    raw = synthetic.read(run.spec.data).test.x  # (16, 3, 16, 16), before normalisation
    mean, std = torch.tensor(pre["mean"]).view(1, 3, 1, 1), torch.tensor(pre["std"]).view(1, 3, 1, 1)
    assert pre["input_shape"] == [3, 16, 16] and pre["formula"] == "x = (pixels - mean[c]) / std[c] for each channel c"
    torch.testing.assert_close((raw - mean) / std, run.data.test.x, rtol=1e-5, atol=1e-5)
    train_raw = synthetic.read(run.spec.data).train.x
    np.testing.assert_allclose(pre["std"], train_raw.std(dim=(0, 2, 3), unbiased=False).numpy(), rtol=1e-5)


def test_a_failed_check_keeps_nothing(residual8_run, tmp_path, monkeypatch):
    honest = EX.LOADERS["torchscript"]
    monkeypatch.setitem(EX.LOADERS, "torchscript", lambda *a: (lambda x: honest(*a)(x) + 1e-3))
    r = invoke("export", residual8_run, "--out", tmp_path / "m.pt")
    assert r.exit_code == 1 and r.stderr.count("\n") == 1 and "differ from the trained net's by 0.001" in r.stderr
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("missing", ["onnx", "onnxscript"])
def test_missing_onnx_packages_are_one_line_naming_the_extra(residual8_run, tmp_path, monkeypatch, missing):
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == missing else real(name, *a))
    r = invoke("export", residual8_run, "--format", "onnx", "--out", tmp_path / "m.onnx")
    assert r.exit_code == 2 and r.stderr.count("\n") == 1, r.stderr
    assert f"needs {missing}" in r.stderr and "pip install 'resnet-cli[onnx]'" in r.stderr
    assert list(tmp_path.iterdir()) == []


@pytest.mark.slow  # the ONNX exporter traces for seconds
@pytest.mark.skipif(not HAS_ONNX, reason="onnx and onnxscript not installed (resnet-cli[onnx])")
def test_onnx_is_checked_with_onnxs_reference_evaluator_without_onnxruntime(residual8_run, tmp_path):
    r = export_in_child(residual8_run, "--format", "onnx", "--out", tmp_path / "m.onnx", "--json", without="onnxruntime")
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["check"]["max_abs_diff"] <= 1e-5


@pytest.fixture
def taken(tmp_path):
    (tmp_path / "m.pt").write_text("someone's file")
    (tmp_path / "dir.pt").mkdir()
    return tmp_path


@pytest.mark.parametrize("args, says", [
    (["{tmp}/nowhere"], "no such run directory"),
    (["{run}", "--format", "tflite"], "--format tflite: not an export format; use torchscript, onnx, state_dict"),
    (["{run}", "--out", "{tmp}/m.pt"], "m.pt exists; pass --force"),
    (["{run}", "--out", "{tmp}/dir.pt", "--force"], "dir.pt is a directory; give a file path, e.g. {tmp}/dir.pt/model.pt\n"),
    (["{run}", "--out", "{tmp}/m.pt/inside.pt"], "m.pt"),  # a file where its folder would go
])
def test_bad_input_is_one_line_and_exit_2(residual8_run, taken, args, says):
    r = invoke("export", *[a.format(run=residual8_run, tmp=taken) for a in args])
    assert r.exit_code == 2 and r.stderr.startswith("resnet: error: ") and r.stderr.count("\n") == 1, r.stderr
    assert says.format(tmp=taken) in r.stderr and r.stdout == ""
    assert (taken / "m.pt").read_text() == "someone's file"


def test_the_check_compares_logits_at_the_full_batch_and_at_a_quarter_of_it():
    """compare() by hand on a linear net: a read-back that adds 0.25 to every logit differs by 0.25 at
    both batch sizes (16 and 4); the largest |logit| is the live net's; a wrong shape is one line."""
    net = torch.nn.Linear(3, 2)
    with torch.no_grad():
        net.weight.copy_(torch.tensor([[1.0, 0.0, 0.0], [0.0, -2.0, 0.0]]))
        net.bias.zero_()
    x = torch.arange(48, dtype=torch.float32).reshape(16, 3)  # row i: 3i, 3i + 1, 3i + 2
    seen = []

    def shifted(batch):
        seen.append(len(batch))
        return net(batch) + 0.25

    got = EX.compare(net, shifted, x)
    assert seen == [16, 4]
    assert got == [{"batch": 16, "max_abs_diff": pytest.approx(0.25), "max_abs_logit": 2.0 * 46},
                   {"batch": 4, "max_abs_diff": pytest.approx(0.25), "max_abs_logit": 2.0 * 10}]
    assert [c["batch"] for c in EX.compare(net, net, x[:2])] == [2, 1]
    assert [c["batch"] for c in EX.compare(net, net, x[:1])] == [1]  # one image: one check
    with pytest.raises(UserError, match=r"returned shape \(16, 3\) for a batch of 16, expected \(16, 2\)") as err:
        EX.compare(net, lambda b: torch.zeros(len(b), 3), x)
    assert err.value.code == 1  # the export failed its check (exit 1), not bad input (2)


def test_both_onnx_packages_missing_are_named_together(residual8_run, tmp_path, monkeypatch):
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: None if name in ("onnx", "onnxscript") else real(name, *a))
    with pytest.raises(UserError, match="^--format onnx needs onnx and onnxscript \\(torch's ONNX exporter\\): "):
        EX.check_request("onnx", tmp_path / "m.onnx", False)


def test_the_side_file_says_what_a_user_needs_and_the_report_where_each_file_is(residual8_run, tmp_path):
    """A state dict written into folders that do not exist yet: its JSON names the files, the run, the
    input a digit needs (8x8, one channel, pixel/16 with no normalisation), the outputs, the check at
    16 and 4 images and the versions (no ONNX packages for this format); indented one space."""
    path = tmp_path / "a" / "b" / "m.sd"
    report = EX.export_run(load_run(residual8_run), "state_dict", path)
    text = path.with_name("m.sd.json").read_text(encoding="utf-8")
    info = json.loads(text)
    assert text.startswith('{\n "format": "state_dict",\n "file": "m.sd",') and text.endswith("}\n")
    assert (info["spec"], info["run"], info["outputs"]) == ("m.sd.spec.yaml", str(residual8_run), "logits (N, classes)")
    assert {k: v for k, v in info["input"].items() if k != "pixels"} == {
        "input_shape": [1, 8, 8], "layout": "NCHW", "dtype": "float32", "mean": None, "std": None,
        "formula": "x = pixels"}
    assert [c["batch"] for c in info["check"]["against"]] == [16, 4] and info["check"]["images"] == 16
    assert info["versions"]["torch"] == torch.__version__ and not {"onnx", "onnxscript", "onnxruntime"} & set(info["versions"])
    assert (report["path"], report["spec_path"], report["info_path"]) == (
        str(path), str(path.with_name("m.sd.spec.yaml")), str(path.with_name("m.sd.json")))
    # read back strictly: a state dict missing one tensor is refused, not filled with fresh weights
    state = torch.load(path, weights_only=True)
    state.pop(next(iter(state)))
    torch.save(state, tmp_path / "short.sd")
    with pytest.raises(RuntimeError, match="Missing key"):
        EX.LOADERS["state_dict"](tmp_path / "short.sd", path.with_name("m.sd.spec.yaml"), (1, 10))


def test_a_state_dict_is_read_back_without_running_a_pickles_code(residual8_run, tmp_path):
    """The state-dict loader reads tensors only (torch.load's weights_only): a file that holds any
    other object is refused before a line of its pickle runs."""
    import argparse
    import pickle

    path = tmp_path / "odd.sd"
    torch.save({"fc.weight": torch.zeros(2, 2), "note": argparse.Namespace(a=1)}, path)
    with pytest.raises(pickle.UnpicklingError, match="Weights only load failed"):
        EX.LOADERS["state_dict"](path, residual8_run / "spec.yaml", (1, 10))
