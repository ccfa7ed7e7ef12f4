"""`resnet degrade`: plain vs residual twins across depths and seeds (He 2016a Fig. 6)."""

from __future__ import annotations

import datetime as dt
from pathlib import Path
from typing import Annotated, Any

import typer

from ..cli import command
from ..spec.seeds import HELP as SEEDS_HELP
from ..spec.seeds import parse as parse_seeds
from . import common

_RUN_KEYS = ("event", "net", "depth", "seed", "status", "train_loss", "train_acc", "test_acc",
             "grad_norm_first_layer", "params", "iterations", "wall_s")


@command()
def degrade(
    spec_file: Annotated[str | None, typer.Argument(
        metavar="SPEC", help="A degrade config (spec + `degrade:` section) or any spec file / bundled config as the base. "
             "Default: degrade/digits-8-26, the Residual Connection article's experiment (8 and 26 layers, 10 seeds, 6 epochs).")] = None,
    depths: Annotated[list[str] | None, typer.Option(
        "--depths", help="Depths to compare: 8,26 (or repeat the flag). Default: the config's.")] = None,
    seeds: Annotated[str | None, typer.Option(
        "--seeds", help=f"Default: the config's. {SEEDS_HELP} (A count is a range now: 0..9 for ten.)")] = None,
    nets: Annotated[str | None, typer.Option("--nets", help="plain,residual (default both).")] = None,
    epochs: Annotated[int | None, typer.Option(
        "--epochs", min=1, help="optim.epochs for every run (lr steps: none if the base has none, else 50%/75%).")] = None,
    iters: Annotated[int | None, typer.Option(
        "--iters", min=1, help="optim.iters for every run (lr steps as for --epochs).")] = None,
    batch_size: common.BatchSize = None,
    lr: common.Lr = None,
    dataset: common.Dataset = None,
    data_dir: common.DataDir = None,
    device: common.Device = None,
    threads: common.Threads = None,
    out: Annotated[str | None, typer.Option(
        "--out", help="Output directory (runs.jsonl, degrade.json, degrade.png). Default: runs/degrade-<time>. "
                      "Finished runs found there are reused.")] = None,
    set_: common.Set = None,
    json_: common.Json = False,
) -> None:
    """Train plain and residual twins at several depths over several seeds; report the last epoch's
    training loss/accuracy, test accuracy and the first layer's gradient norm at step 1 (median and
    min-max over seeds, n shown), and draw training error against iteration."""
    import time

    from .. import output
    from ..errors import UserError
    from ..experiments import degrade as deg
    from ..training.rundir import make_dir

    fmt = output.choose(json_)
    net_list = None
    if nets is not None:
        net_list = [n.strip() for n in nets.split(",") if n.strip()]
        bad = [n for n in net_list if n not in deg.NETS]
        if bad or not net_list:
            raise UserError(f"--nets {nets}: valid names are {', '.join(deg.NETS)}")
    plan = deg.make_plan(
        spec_file, depths=deg.parse_depths(depths) if depths else None,
        seeds=parse_seeds(seeds) if seeds is not None else None, nets=net_list,
        overrides=_length_overrides(spec_file, epochs, iters) + common.flag_overrides(
            batch_size=batch_size, lr=lr, dataset=dataset, data_dir=data_dir, device=device, threads=threads),
        sets=set_ or [])
    out_dir = Path(out) if out else Path("runs") / f"degrade-{dt.datetime.now().strftime('%Y%m%d-%H%M%S')}"
    make_dir(out_dir)  # a file in the way or an unwritable place: one line before any run starts
    log = output.stderr()
    n_runs = len(plan.depths) * len(plan.nets) * len(plan.seeds)
    log.print(f"degrade: {n_runs} run{'s' if n_runs != 1 else ''} "
              f"(depths {', '.join(map(str, plan.depths))}; {', '.join(plan.nets)}; seeds "
              f"{_seed_text(plan.seeds)}) from {plan.source} -> {out_dir}")
    start = time.perf_counter()

    def on_run(record: dict[str, Any], i: int, total: int, reused: bool) -> None:
        if fmt is output.Format.JSON:
            output.emit({k: record.get(k) for k in _RUN_KEYS})
        how = "reused" if reused else f"{record['wall_s']:.1f} s"
        if not reused and record.get("resumed_at"):
            how += f", resumed at iteration {record['resumed_at']}"
        status = "" if record["status"] == "completed" else f"  [red]{record['status']}[/]"
        log.print(f"[{i:>3}/{total}] {record['net']:<8} {record['depth']:>3} {'blocks' if record.get('family') == 'vit' else 'layers'}  seed {record['seed']:<3} "
                  f"train loss {output.fmt(record['train_loss'], 3)}  train acc {output.fmt(record['train_acc'], 3)}  "
                  f"test acc {output.fmt(record['test_acc'], 3)}  grad@1 {output.fmt(record['grad_norm_first_layer'], 2)}"
                  f"  ({how}){status}")

    try:
        records = deg.run(plan, out_dir, on_run, callbacks=lambda: [_EpochLine(log)])
    except KeyboardInterrupt:
        log.print(f"interrupted; finished runs are kept in {out_dir / deg.RUNS_FILE}: rerun with --out {out_dir} "
                  "to continue (a run cut off midway resumes from its last checkpoint)")
        raise
    summaries = deg.summarise(records)
    found = deg.findings(summaries)
    paper = deg.he2016a(summaries)
    figure = deg.figure(records, out_dir / deg.FIGURE_FILE)
    wall = time.perf_counter() - start
    _write_result(out_dir / deg.RESULT_FILE, plan, summaries, found, paper, wall, records)
    if fmt is output.Format.JSON:
        for s in summaries:
            output.emit(s)
    else:
        output.stdout().print(_table(summaries, plan))
    if found is not None:
        log.print(f"{deg.ARTICLE}'s findings on 8x8 digits, ours beside its figures:")
        for f in found:
            mark = "[green]reproduced[/]" if f["reproduced"] else "[red]not reproduced[/]"
            article = "" if f["article"] is None else f"{f['article']:.2f}, "
            lo, hi = f["article_range"]
            log.print(f"  {f['finding']}: {f['measure']} {output.fmt(f['ours'], 2)} "
                      f"(article: {article}10 seeds {lo:g}-{hi:g}; needs {f['criterion']})  {mark}")
    if paper is not None:
        log.print("He 2016a's degradation comparisons, median training error (%):")
        for f in paper:
            a, b = (output.fmt(v, 2) for v in f["ours"])
            mark = "[green]reproduced[/]" if f["reproduced"] else "[red]not reproduced[/]" if f["expected"] \
                else "[yellow]not reached at this budget[/]"
            log.print(f"  {f['finding']} ({f['source']}): {a} against {b}  {mark}")
    log.print(f"figure: {figure}   records: {out_dir / deg.RUNS_FILE}   wall time {wall:.0f} s "
              f"(training, every run's own time summed: {sum(r['wall_s'] for r in records):.0f} s)")
    log.print(f"run directories (for resnet lesion, landscape, paths): {out_dir / deg.RUN_DIRS}/<net>-<depth>-seed<seed>")


class _EpochLine:
    """A line per epoch for long runs (the CIFAR grid takes hours per run); short ones stay quiet."""

    LONG = 2000  # iterations

    def __init__(self, console):
        self.console = console

    def on_start(self, t) -> None:
        self.on = t.total >= self.LONG
        self.name = f"{'plain' if t.spec.model.shortcut.kind == 'none' else 'residual'}-{t.spec.model.depth} " \
                    f"seed {t.spec.run.seed}"

    def after_backward(self, t) -> None: ...
    def on_sync(self, t, loss: float) -> None: ...

    def on_epoch(self, t, record: dict[str, Any]) -> None:
        if self.on:
            test = f"  test err {record['test_error']:.2f}%" if record.get("test_error") is not None else ""
            self.console.print(f"      {self.name}: epoch {record['epoch']}  iter {record['iter']}/{t.total}  "
                               f"train err {record['train_error']:.2f}%{test}")

    def on_end(self, t, summary) -> None: ...


def _length_overrides(spec_file: str | None, epochs: int | None, iters: int | None) -> list[tuple[str, Any]]:
    """--epochs/--iters change the length only: a base without lr steps (milestones: [], the article's
    digits recipe) keeps none; otherwise the steps move to 50%/75% of the new length."""
    from ..errors import UserError
    from ..experiments.degrade import DEFAULT_CONFIG
    from ..spec import load_tree

    if epochs is not None and iters is not None:
        raise UserError("--epochs and --iters are exclusive: give one length")
    if epochs is None and iters is None:
        return []
    base = load_tree(spec_file or DEFAULT_CONFIG).get("optim") or {}
    milestones = [] if base.get("milestones") == [] else None
    if epochs is not None:
        return [("optim.epochs", epochs), ("optim.iters", None), ("optim.milestones", milestones)]
    return [("optim.iters", iters), ("optim.epochs", None), ("optim.milestones", milestones)]


def _seed_text(seeds: list[int]) -> str:
    if seeds == list(range(seeds[0], seeds[0] + len(seeds))) and len(seeds) > 2:
        return f"{seeds[0]}..{seeds[-1]}"
    return ",".join(map(str, seeds))


def _write_result(path: Path, plan, summaries, found, paper, wall: float, records) -> None:
    import json

    from ..training.rundir import git_commit, versions

    result = {"source": plan.source, "depths": plan.depths, "seeds": plan.seeds, "nets": plan.nets,
              "base_spec": plan.base, "summaries": summaries, "findings": found, "he2016a": paper,
              "wall_s": round(wall, 1),  # this invocation, reused runs costing nothing
              "train_wall_s": round(sum(r["wall_s"] for r in records), 1),  # every run's own training time
              "versions": versions(), "git_commit": git_commit(),
              "finished": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")}
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
    tmp.replace(path)


def _cell(s: dict[str, Any], metric: str, digits: int) -> str:
    """Median; min-max over seeds below it; the published figure (dim) below that, where one exists."""
    from .. import output

    med, lo, hi = s[f"{metric}_median"], s[f"{metric}_min"], s[f"{metric}_max"]
    lines = [output.fmt(med, digits)]
    if med is not None and s["n"] > 1:
        lines.append(f"{output.fmt(lo, digits)}-{output.fmt(hi, digits)}")
    ci = s.get(f"{metric}_ci95")
    if ci is not None:  # the median's 95% bootstrap interval (none below 3 seeds)
        lines.append(f"{output.fmt(ci[0], digits)}~{output.fmt(ci[1], digits)}")
    ref = s.get("reference") or {}
    if metric in ref:
        lines.append(f"[dim]pub {ref[metric]:.{digits}f}[/]")
    if f"{metric}_range" in ref:
        lo_r, hi_r = ref[f"{metric}_range"]
        lines.append(f"[dim]{'' if metric in ref else 'pub '}{lo_r:.{digits}f}-{hi_r:.{digits}f}[/]")
    return "\n".join(lines)


def _table(summaries: list[dict[str, Any]], plan):
    from .. import output

    rows = []
    for s in summaries:
        # The seed count sits under the net's name: one column fewer keeps the ranges whole at 80 columns.
        net = f"{s['net']}\nn={s['n']}" + (f"\n[red]{s['diverged']} div.[/]" if s["diverged"] else "")
        rows.append((net, str(s["depth"]), output.params_str(s["params"]), _cell(s, "train_loss", 3),
                     _cell(s, "train_acc", 2), _cell(s, "test_acc", 2), _cell(s, "grad_norm_first_layer", 2)))
    sources = sorted({(s.get("reference") or {}).get("source") for s in summaries} - {None})
    caption = ("each cell: median over seeds, min-max below, then the median's 95% bootstrap interval (lo~hi; "
               "none below 3 seeds); train = the last epoch's average; accuracies as "
               "fractions; grad@1 = ||dE/dW|| of the first conv at step 1"
               + (f"; pub = published ({'; '.join(sources)})" if sources else ""))
    return output.table(f"degradation: plain vs residual ({plan.source})",
                        ["net", "depth", "params", "train\nloss", "train\nacc", "test\nacc", "grad@1"],
                        rows, caption=caption, compact=True)
