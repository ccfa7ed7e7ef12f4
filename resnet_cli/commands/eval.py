"""`resnet eval`: a trained run's error on a split, per class, with its confusion matrix."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer

from .. import figures, output, writable
from ..errors import UserError, write_atomically
from ..cli import command
from . import common

# evaluate and trained import torch: they are imported where a run is evaluated, so that
# `resnet eval --help` answers without loading it (2-3 s).

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
    fmt = output.choose(json_)
    if bn_batches and not recalibrate_bn:
        raise UserError(f"--bn-batches {bn_batches}: only with --recalibrate-bn (the batches it re-estimates BN over)")
    sets = [f"data.dir={data_dir}"] if data_dir is not None else []
    sets += list(set_ or [])
    out_dir = writable.check_dir(out) if out else None  # before any weights load
    fig_path = figures.target(figure, Path("confusion.png"), "--figure") if figure else None

    from ..analysis import evaluate as evaluate_mod
    from ..analysis.trained import open_runs

    def check(specs) -> None:  # every bad --split or --tta before any weights load
        for p, s in zip(run_dirs, specs):
            evaluate_mod.check_request(p, s, split, tta)

    results = [evaluate_mod.evaluate_run(trained, split, tta, batch_size, bn_batches if recalibrate_bn else None)
               for trained in open_runs(run_dirs, device, threads, data_sets=sets, before=check)]
    written = _write(results, split, out_dir, fig_path)
    output.render(records(results, written), fmt, views(results, written))


def records(results: list[dict], written: list[tuple[str, Path]]) -> list[dict]:
    """The JSON lines: per run its errors, each class, its confusion matrix; then the files written."""
    out = []
    for r in results:
        head = {"run": r["run"], "label": r["label"], "split": r["split"]}
        row = {k: v for k, v in r.items() if k not in ("classes", "per_class", "confusion", "tta")}
        if "tta" in r:
            row.update(tta=r["tta"]["mode"], tta_error=r["tta"]["error"], tta_loss=r["tta"]["loss"])
        out.append({"event": "eval", **row})
        out += [{"event": "eval_class", **head, **c} for c in r["per_class"]]
        out.append({"event": "confusion", **head, "classes": r["classes"], "matrix": r["confusion"]})
    return out + [{"event": kind, "path": str(path)} for kind, path in written]


def _write(results: list[dict], split: str, out: Path | None, figure: Path | None) -> list[tuple[str, Path]]:
    """Files only where asked: --out DIR (results and figure), --figure PATH (the figure)."""
    from ..analysis import evaluate as evaluate_mod

    written = []
    if out is not None:
        out.mkdir(parents=True, exist_ok=True)
        path = out / f"eval-{split}.json"
        write_atomically(path, json.dumps(results, indent=1) + "\n")
        written.append(("results", path))
        written.append(("figure", evaluate_mod.figure(results, out / f"confusion-{split}.png")))
    if figure is not None:
        written.append(("figure", evaluate_mod.figure(results, figure)))
    return written


def views(results: list[dict], written: list[tuple[str, Path]]) -> list[output.View]:
    """One table of the runs, then one per run of its classes; where files went, on stderr."""
    tta = any("tta" in r for r in results)
    precise = any("error_precise_bn" in r for r in results)
    cols = ["run", "net", "status", "iter", "error %", "loss", "logged %"]
    base, names = output.short_paths([r["run"] for r in results])
    short = dict(zip([r["run"] for r in results], names))
    by_run = {r["run"]: r for r in results}

    def row(rec: dict) -> list:
        r = by_run[rec["run"]]
        cells = [short[r["run"]], r["label"], r["status"], str(r["iter"]), r["error"], f"{r['loss']:.4f}",
                 r["logged_error"]]
        if precise:
            cells += [r.get("error_precise_bn"), str(r.get("bn_batches", ""))]
        if tta:
            cells.append(r["tta"]["error"] if "tta" in r else None)
        return cells

    extra = (["precise BN %", "BN batches"] if precise else []) + (["flip %"] if tta else [])
    caption = "logged %: the run's own figure at this iteration (metrics.jsonl)"
    if precise:
        caption += ("; precise BN %: with BN statistics re-estimated for these weights over that many "
                    "training batches (error % uses the running statistics)")
    runs = output.View(f"resnet eval, {results[0]['split']} split: BN in eval mode, the single view"
                       + (f" (runs in {base})" if base else ""), cols + extra, row,
                       keep=lambda rec: rec["event"] == "eval",
                       justify_right=[False, False, False] + [True] * (len(cols) - 3 + len(extra)), compact=True,
                       caption=caption)
    return [runs, *[_class_view(r) for r in results],
            output.View(show=False, log=[f"wrote {path}" for _, path in written])]


def _class_view(r: dict) -> output.View:
    n = len(r["classes"])
    matrix = n <= TABLE_CLASSES
    # With the matrix, a row's images and wrong ones are its sum and its off-diagonal: not repeated.
    cols = ["class", "error %"] + ([str(i) for i in range(n)] if matrix else ["images", "wrong"])
    caption = ("rows: true class; columns: predicted class (images)" if matrix
               else f"{n} classes: the confusion matrix is in --json and the figure")
    return output.View(
        f"{r['label']} ({r['run']}), {r['split']}, {r['images']} images: per class", cols,
        lambda row: [f"{row['class']} {row['name']}" if row["name"] != str(row["class"]) else row["name"], row["error"]]
        + ([str(v) for v in r["confusion"][row["class"]]] if matrix else [str(row["images"]), str(row["wrong"])]),
        keep=lambda rec: rec["event"] == "eval_class" and rec["run"] == r["run"], caption=caption, compact=True)
