"""`resnet export`: a trained run as a file other tools load, checked against the live net.

Three formats, each a registered writer and a loader that reads the file back the way its users
would: `torchscript` (torch.jit.trace, loaded with torch.jit.load, also from C++ LibTorch),
`onnx` (torch's official exporter, `torch.onnx.export(dynamo=True)`, which needs onnx and
onnxscript; checked with `onnx.checker`, run with onnxruntime, or with onnx's reference evaluator
where onnxruntime is absent) and `state_dict` (plain tensors for `torch.load(weights_only=True)`,
loaded into `build_model` from the spec written beside it). Every format takes any batch size.

Beside PATH go PATH.spec.yaml (the run's resolved spec) and PATH.json: class names, input shape
and the preprocessing (pixel scaling, per-channel mean and std), and the check's figures. The
check runs the read-back file on test images, at the check batch size and at a smaller one, and
compares its logits with the live model's in fp32: a difference above 1e-5 (or 1e-6 of the largest
logit, where that is more) deletes what was written and fails.
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import os
import sys
import warnings
from collections.abc import Callable
from pathlib import Path

import torch

from .. import data as data_mod
from .. import errors, writable
from ..spec.datasets import PIXELS
from ..errors import UserError, writing
from ..spec.registry import Registry
from ..runs.writer import versions
from ..spec import to_yaml
from .trained import Trained

# Max |logit difference| in fp32: 1e-5, or 1e-6 of the largest logit where that is larger (logits
# beyond 10). Two correct fp32 programs differ by a few units in the last place of the logits (the
# ONNX exporter folds BN into the convs; another summation order), and an ulp of a logit of 1e5,
# which a barely trained net can give, is 0.008.
TOLERANCE, RELATIVE = 1e-5, 1e-6
ONNX_HINT = "pip install 'resnet-cli[onnx]'"

# (file, spec file beside it, (input channels, classes)) -> a function from images to logits
Loader = Callable[[Path, Path, tuple[int, int]], Callable[[torch.Tensor], torch.Tensor]]
WRITERS: Registry = Registry("export format")
LOADERS: dict[str, Loader] = {}
SUFFIX = {"torchscript": ".pt", "onnx": ".onnx", "state_dict": ".state_dict.pt"}


def side_files(path: Path) -> tuple[Path, Path]:
    """PATH.spec.yaml and PATH.json: appended, so they never collide with another export's."""
    return path.with_name(path.name + ".spec.yaml"), path.with_name(path.name + ".json")


def default_path(trained: Trained, fmt: str) -> Path:
    """In the current directory, named after the run: an export never writes into the run directory."""
    return Path(trained.path.resolve().name + SUFFIX[fmt])


def check_request(fmt: str, path: Path, force: bool) -> None:
    """Before any work: a known format, its packages, and no file overwritten unasked."""
    if fmt not in WRITERS:
        raise UserError(f"--format {fmt}: not an export format; use {', '.join(WRITERS.names())}")
    if fmt == "onnx":
        missing = [m for m in ("onnx", "onnxscript") if importlib.util.find_spec(m) is None]
        if missing:
            raise UserError(f"--format onnx needs {' and '.join(missing)} (torch's ONNX exporter): {ONNX_HINT}")
    taken = [p for p in (path, *side_files(path)) if p.exists()]
    if taken and not force:
        raise UserError(f"{taken[0]} exists; pass --force to replace it, or another --out")
    if path.is_dir():
        raise UserError(f"--out {path} is a directory; give a file path, e.g. {path / ('model' + SUFFIX[fmt])}")
    writable.check_file(path)  # its folder: a file in the way or a read-only place, before the export


def preprocessing(trained: Trained) -> dict:
    """What a user does to an image before the net: the input shape and the normalisation."""
    d = trained.data
    shape = [d.in_channels, d.image_size, d.image_size]
    out = {"input_shape": shape, "layout": "NCHW", "dtype": "float32", "pixels": PIXELS[d.name],
           "mean": d.mean, "std": d.std}
    out["formula"] = ("x = (pixels - mean[c]) / std[c] for each channel c" if d.mean is not None else "x = pixels")
    return out


def check_batch(trained: Trained, images: int) -> torch.Tensor:
    """The first test images, preprocessed as in training (the single view, on the CPU)."""
    n = min(images, data_mod.num_examples(trained.data, "test"))
    x, _ = next(iter(data_mod.eval_for(trained.data, "test", n, torch.device("cpu"))))
    return x.float().contiguous()


def export_run(trained: Trained, fmt: str, path: Path, images: int = 16) -> dict:
    """Write the file and its two side files, read it back, compare logits; returns the report."""
    model = trained.model.cpu().eval()
    x = check_batch(trained, images)
    spec_path, info_path = side_files(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    written: list[Path] = []
    try:
        _atomic(path, lambda tmp: WRITERS[fmt](model, x, tmp), written)
        _atomic(spec_path, lambda tmp: tmp.write_text(to_yaml(trained.spec), encoding="utf-8"), written)
        shape = (trained.data.in_channels, trained.spec.model.num_classes or trained.data.num_classes)
        checks = compare(model, LOADERS[fmt](path, spec_path, shape), x)
        worst = max(c["max_abs_diff"] for c in checks)
        allowed = max(TOLERANCE, RELATIVE * max(c["max_abs_logit"] for c in checks))
        if not worst <= allowed:
            raise UserError(f"{path}: the exported net's logits differ from the trained net's by {worst:.3g} "
                            f"(allowed {allowed:.3g}); nothing was kept", code=errors.FAILED)
        info = {
            "format": fmt, "file": path.name, "spec": spec_path.name, "run": str(trained.path),
            "label": trained.label, "iter": trained.iteration, "num_classes": trained.data.num_classes,
            "classes": trained.data.classes, "input": preprocessing(trained), "outputs": "logits (N, classes)",
            "check": {"images": len(x), "max_abs_diff": worst, "tolerance": allowed, "against": checks},
            "versions": {**versions(), **_onnx_versions(fmt)},
        }
        _atomic(info_path, lambda tmp: tmp.write_text(json.dumps(info, indent=1) + "\n", encoding="utf-8"),
                written)
    except BaseException:
        for p in written:
            with contextlib.suppress(OSError):
                p.unlink()
        raise
    return {**info, "path": str(path), "spec_path": str(spec_path), "info_path": str(info_path)}


def compare(model: torch.nn.Module, run: Callable[[torch.Tensor], torch.Tensor], x: torch.Tensor) -> list[dict]:
    """Max |logit difference| at the check batch and at a smaller batch (the batch size is free)."""
    out = []
    for batch in sorted({len(x), max(1, len(x) // 4)}, reverse=True):
        with torch.no_grad():
            want = model(x[:batch]).float()
            got = torch.as_tensor(run(x[:batch])).float()
        if got.shape != want.shape:
            raise UserError(f"the exported net returned shape {tuple(got.shape)} for a batch of {batch}, "
                            f"expected {tuple(want.shape)}", code=errors.FAILED)
        out.append({"batch": batch, "max_abs_diff": (got - want).abs().max().item(),
                    "max_abs_logit": want.abs().max().item()})
    return out


def _atomic(path: Path, write: Callable[[Path], object], written: list[Path]) -> None:
    """Write through a temporary file beside `path`: an interrupted export leaves no half file."""
    tmp = path.with_name(f".{path.name}.tmp")
    try:
        with writing(path, tmp):  # a full disk: one line naming the file
            write(tmp)
            os.replace(tmp, path)
    finally:
        with contextlib.suppress(OSError):
            tmp.unlink()
    written.append(path)


def _onnx_versions(fmt: str) -> dict:
    if fmt != "onnx":
        return {}
    found = {}
    for name in ("onnx", "onnxscript", "onnxruntime"):
        with contextlib.suppress(ImportError):
            found[name] = __import__(name).__version__
    return found


# -- the formats ---------------------------------------------------------------------------------


@WRITERS.register("torchscript")
def _write_torchscript(model: torch.nn.Module, x: torch.Tensor, path: Path) -> None:
    # Traced, not scripted: the registries and optional modules of the units are Python-level
    # choices, fixed once the net is built. torch 2.14 marks torch.jit deprecated (FutureWarning);
    # the format is still what LibTorch and older PyTorch load.
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)
        with torch.no_grad():
            traced = torch.jit.trace(model, x, check_trace=False)
        traced.save(str(path))


def _load_torchscript(path: Path, spec_path: Path, shape: tuple[int, int]) -> Callable:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)
        return torch.jit.load(str(path), map_location="cpu").eval()


@WRITERS.register("onnx")
def _write_onnx(model: torch.nn.Module, x: torch.Tensor, path: Path) -> None:
    batch = torch.export.Dim("batch", min=1)
    with contextlib.redirect_stdout(sys.stderr), warnings.catch_warnings():  # stdout carries results only
        warnings.simplefilter("ignore")
        torch.onnx.export(model, (x,), str(path), dynamo=True, input_names=["images"], output_names=["logits"],
                          dynamic_shapes=({0: batch},), external_data=False, verbose=False)
    import onnx

    onnx.checker.check_model(str(path), full_check=True)


def _load_onnx(path: Path, spec_path: Path, shape: tuple[int, int]) -> Callable:
    """onnxruntime where installed (what users deploy with); else onnx's reference evaluator."""
    if importlib.util.find_spec("onnxruntime") is not None:
        import onnxruntime

        session = onnxruntime.InferenceSession(str(path), providers=["CPUExecutionProvider"])
        return lambda x: torch.from_numpy(session.run(["logits"], {"images": x.numpy()})[0])
    from onnx.reference import ReferenceEvaluator

    evaluator = ReferenceEvaluator(str(path))
    return lambda x: torch.from_numpy(evaluator.run(["logits"], {"images": x.numpy()})[0])


@WRITERS.register("state_dict")
def _write_state_dict(model: torch.nn.Module, x: torch.Tensor, path: Path) -> None:
    torch.save({k: v.detach().clone() for k, v in model.state_dict().items()}, str(path))


def _load_state_dict(path: Path, spec_path: Path, shape: tuple[int, int]) -> Callable:
    """As a user of the package would: the net built from the spec beside the file (input channels
    and classes as PATH.json gives them), then the weights."""
    from .. import spec as spec_mod
    from ..model import build_model

    spec = spec_mod.load(str(spec_path))
    model = build_model(spec.model, *shape)
    model.load_state_dict(torch.load(str(path), map_location="cpu", weights_only=True), strict=True)
    return model.eval()


LOADERS.update(torchscript=_load_torchscript, onnx=_load_onnx, state_dict=_load_state_dict)
