"""`resnet eval`: a trained run's error on a split, per class, with its confusion matrix."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer

from ..cli import command
from . import common

RunDirs = Annotated[list[str], typer.Argument(metavar="RUN_DIR",
    help="Run directories of trained nets (resnet train --out DIR); any status with a checkpoint.")]
Split = Annotated[str, typer.Option("--split", help="test, val (needs data.val_split) or train.")]
Tta = Annotated[str | None, typer.Option("--tta",
    help="flip: also the softmax averaged over each image and its mirror (runs trained with flips only).")]
Recalibrate = Annotated[bool, typer.Option("--recalibrate-bn",
    help="Also the error with BN statistics re-estimated for the weights over training batches (precise BN).")]
BnBatches = Annotated[int, typer.Option("--bn-batches", min=0,
    help="Training batches for --recalibrate-bn; 0: 50, or one epoch where that is fewer.")]
BatchSize = Annotated[int, typer.Option("--batch-size", min=1, help="Images per evaluation batch.")]
Device = Annotated[str, typer.Option("--device", help="auto, cpu, cuda or cuda:N.")]
OutDir = Annotated[str | None, typer.Option("--out",
    help="Write eval-SPLIT.json and confusion-SPLIT.png into this directory (nothing is written otherwise).")]
Figure = Annotated[str | None, typer.Option("--figure", help="Write the confusion-matrix PNG here.")]

# The confusion matrix goes into the table up to this many classes; beyond, --json and the figure carry it.
TABLE_CLASSES = 12


@command(name="eval")
def eval_(run_dirs: RunDirs, split: Split = "test", tta: Tta = None, recalibrate_bn: Recalibrate = False,
          bn_batches: BnBatches = 0, data_dir: common.DataDir = None,
          set_: common.DataSet = None, batch_size: BatchSize = 1000, device: Device = "auto",
          threads: common.RunThreads = None, out: OutDir = None, figure: Figure = None,
          json_: common.Json = False) -> None:
    """Error, loss, per-class error and confusion matrix of trained runs on a split (BN in eval mode, single view)."""
    from .. import output
    from ..errors import UserError
    from ..experiments import evaluate as evaluate_mod
    from ..experiments.trained import check_dir, load_run, load_spec, pick_device

    fmt = output.choose(json_)
    if bn_batches and not recalibrate_bn:
        raise UserError(f"--bn-batches {bn_batches}: only with --recalibrate-bn (the batches it re-estimates BN over)")
    sets = [f"data.dir={data_dir}"] if data_dir is not None else []
    sets += list(set_ or [])
    for p in run_dirs:
        check_dir(p)  # every bad directory is reported before any work starts
        evaluate_mod.check_request(p, load_spec(p, sets), split, tta)  # and every bad --set, --split, --tta
    common.set_threads(threads, default=load_spec(run_dirs[0]).run.threads)
    dev = pick_device(device)
    results = []
    for p in run_dirs:
        trained = load_run(p, dev, sets)
        results.append(evaluate_mod.evaluate_run(trained, split, tta, batch_size,
                                                 bn_batches if recalibrate_bn else None))
    written = _write(results, split, Path(out) if out else None, Path(figure) if figure else None)
    if fmt is output.Format.JSON:
        for r in results:
            head = {"run": r["run"], "label": r["label"], "split": r["split"]}
            row = {k: v for k, v in r.items() if k not in ("classes", "per_class", "confusion", "tta")}
            if "tta" in r:
                row.update(tta=r["tta"]["mode"], tta_error=r["tta"]["error"], tta_loss=r["tta"]["loss"])
            output.emit({"event": "eval", **row})
            for c in r["per_class"]:
                output.emit({"event": "eval_class", **head, **c})
            output.emit({"event": "confusion", **head, "classes": r["classes"], "matrix": r["confusion"]})
        for kind, path in written:
            output.emit({"event": kind, "path": str(path)})
        return
    _render(results, written)


def _write(results: list[dict], split: str, out: Path | None, figure: Path | None) -> list[tuple[str, Path]]:
    """Files only where asked: --out DIR (results and figure), --figure PATH (the figure)."""
    from ..experiments import evaluate as evaluate_mod

    written = []
    if out is not None:
        out.mkdir(parents=True, exist_ok=True)
        path = out / f"eval-{split}.json"
        tmp = path.with_name(f".{path.name}.tmp")
        tmp.write_text(json.dumps(results, indent=1) + "\n", encoding="utf-8")
        tmp.replace(path)
        written.append(("results", path))
        written.append(("figure", evaluate_mod.figure(results, out / f"confusion-{split}.png")))
    if figure is not None:
        written.append(("figure", evaluate_mod.figure(results, figure)))
    return written


def _render(results: list[dict], written: list[tuple[str, Path]]) -> None:
    from .. import output

    con = output.stdout()
    tta = any("tta" in r for r in results)
    precise = any("error_precise_bn" in r for r in results)
    cols = ["run", "net", "status", "iter", "error %", "loss", "logged %"]
    rows = []
    base, names = output.short_paths([r["run"] for r in results])
    for r, name in zip(results, names):
        row = [name, r["label"], r["status"], str(r["iter"]), r["error"],
               f"{r['loss']:.4f}", r["logged_error"]]
        if precise:
            row += [r.get("error_precise_bn"), str(r.get("bn_batches", ""))]
        if tta:
            row.append(r["tta"]["error"] if "tta" in r else None)
        rows.append(row)
    split = results[0]["split"]
    extra = (["precise BN %", "BN batches"] if precise else []) + (["flip %"] if tta else [])
    caption = "logged %: the run's own figure at this iteration (metrics.jsonl)"
    if precise:
        caption += ("; precise BN %: with BN statistics re-estimated for these weights over that many "
                    "training batches (error % uses the running statistics)")
    con.print(output.table(f"resnet eval, {split} split: BN in eval mode, the single view"
                           + (f" (runs in {base})" if base else ""), cols + extra, rows,
                           justify_right=[False, False, False] + [True] * (len(cols) - 3 + len(extra)), compact=True,
                           caption=caption))
    for r in results:
        con.print(_class_table(r))
    for _, path in written:
        output.info(f"wrote {path}")


def _class_table(r: dict):
    from .. import output

    n = len(r["classes"])
    matrix = n <= TABLE_CLASSES
    # With the matrix, a row's images and wrong ones are its sum and its off-diagonal: not repeated.
    cols = ["class", "error %"] + ([str(i) for i in range(n)] if matrix else ["images", "wrong"])
    rows = [[f"{row['class']} {row['name']}" if row["name"] != str(row["class"]) else row["name"], row["error"]]
            + ([str(v) for v in r["confusion"][row["class"]]] if matrix else [str(row["images"]), str(row["wrong"])])
            for row in r["per_class"]]
    caption = ("rows: true class; columns: predicted class (images)" if matrix
               else f"{n} classes: the confusion matrix is in --json and the figure")
    return output.table(f"{r['label']} ({r['run']}), {r['split']}, {r['images']} images: per class", cols, rows, caption=caption,
                        compact=True)
