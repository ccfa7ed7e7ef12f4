"""`resnet export`: a trained run as TorchScript, ONNX or a state dict, checked against the live net."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from .. import output
from ..cli import command
from . import common

# The analysis modules import torch: they are imported where the command runs, so `--help` answers
# without loading it.

RunDirArg = Annotated[str, typer.Argument(metavar="RUN_DIR", help="A trained run's directory (resnet train --out DIR).")]
Format = Annotated[str, typer.Option("--format", help="torchscript, onnx (needs resnet-cli[onnx]) or state_dict.")]
OutPath = Annotated[str | None, typer.Option("--out",
    help="The file to write (default: ./<run name>.pt, .onnx or .state_dict.pt); PATH.spec.yaml and PATH.json go beside it.")]
Images = Annotated[int, typer.Option("--check-images", min=1, help="Test images the read-back file is checked on.")]
Force = Annotated[bool, typer.Option("--force", help="Replace files that exist.")]


@command()
def export(run_dir: RunDirArg, format_: Format = "torchscript", out: OutPath = None, check_images: Images = 16,
           data_dir: common.DataDir = None, set_: common.DataSet = None, force: Force = False,
           json_: common.Json = False) -> None:
    """Write a trained net for other tools (with its spec, class names and preprocessing) and check its logits."""
    from ..analysis import export as export_mod
    from ..analysis.trained import open_runs

    fmt = output.choose(json_)
    sets = ([f"data.dir={data_dir}"] if data_dir is not None else []) + list(set_ or [])
    path = Path(out) if out else Path(Path(run_dir).resolve().name + export_mod.SUFFIX.get(format_, ""))
    # Exported from the CPU (fp32, loadable anywhere), with torch's own thread count (threads=0).
    (trained,) = open_runs([run_dir], "cpu", threads=0, data_sets=sets,
                           before=lambda specs: export_mod.check_request(format_, path, force))
    report = export_mod.export_run(trained, format_, path, check_images)
    record = {"event": "export", **{k: v for k, v in report.items() if k not in ("classes", "versions")}}
    output.render([record], fmt, view(report))


def view(report: dict) -> output.View:
    check = report["check"]
    batches = ", ".join(f"batch {c['batch']}: {c['max_abs_diff']:.3g}" for c in check["against"])
    files = [(report["path"], f"{report['format']}: images (N, {', '.join(map(str, report['input']['input_shape']))}) "
                              f"-> logits (N, {report['num_classes']})"),
             (report["spec_path"], "the run's resolved spec"),
             (report["info_path"], "classes, preprocessing, versions, this check")]
    return output.View(
        f"resnet export: {report['label']} ({report['run']}, iteration {report['iter']})", ["file", "what"],
        rows=lambda records: files, justify_right=[False, False],
        notes=[f"read back and compared with the trained net on {check['images']} test images: max |logit "
               f"difference| {check['max_abs_diff']:.3g} (allowed {check['tolerance']:g}; {batches})",
               f"input: {report['input']['pixels']}; {report['input']['formula']}"])
