"""How a degrade grid reads: one run's line, the table of summaries (median, min-max, the median's
interval, the published figure), the findings beside the published figures, and He 2016a's claims.
`resnet degrade` and `resnet report` on a degrade directory render a grid through these, so the two
cannot drift apart. Pure functions of computed results (results/degrade_grid.py): nothing here
computes a statistic.
"""

from __future__ import annotations

from typing import Any

from rich.markup import escape

from .. import output
from . import evidence, verdicts
from .degrade_reference import ARTICLE

# A run's record as the JSON lines give it.
RUN_KEYS = ("event", "net", "depth", "seed", "status", "train_loss", "train_acc", "test_acc",
            "grad_norm_first_layer", "params", "iterations", "wall_s")


def json_records(grid) -> list[dict[str, Any]]:
    """The runs, then the summaries, then the claims: what --json prints."""
    return [*({k: r.get(k) for k in RUN_KEYS} for r in grid.records), *grid.summaries,
            *([grid.claims] if grid.claims else [])]


def run_text(record: dict[str, Any], reused: bool, i: int | None = None, total: int | None = None) -> str:
    """One run's line for stderr: its net, depth, seed, final figures and how it was obtained."""
    how = "reused" if reused else f"{record['wall_s'] or 0.0:.1f} s"
    status = "" if record["status"] == "completed" else f"  [red]{record['status']}[/]"
    where = f"[{i:>3}/{total}] " if i is not None else ""
    return (f"{where}{record['net']:<8} {record['depth']:>3} {'blocks' if record.get('family') == 'vit' else 'layers'}  seed {record['seed']:<3} "
            f"train loss {output.fmt(record['train_loss'], 3)}  train acc {output.fmt(record['train_acc'], 3)}  "
            f"test acc {output.fmt(record['test_acc'], 3)}  grad@1 {output.fmt(record['grad_norm_first_layer'], 2)}"
            f"  ({how}){status}")


def findings(grid, log) -> None:
    if grid.findings is not None:
        log.print(f"{ARTICLE}'s findings on 8x8 digits, ours beside its figures:")
        for f in grid.findings:
            mark = "[green]reproduced[/]" if f["reproduced"] else "[red]not reproduced[/]"
            article = "" if f["article"] is None else f"{f['article']:.2f}, "
            lo, hi = f["article_range"]
            log.print(f"  {f['finding']}: {f['measure']} {output.fmt(f['ours'], 2)} "
                      f"(article: {article}10 seeds {lo:g}-{hi:g}; needs {f['criterion']})  {mark}")
    if grid.he2016a is not None:
        log.print("He 2016a's degradation comparisons, median training error (%):")
        for f in grid.he2016a:
            a, b = (output.fmt(v, 2) for v in f["ours"])
            mark = "[green]reproduced[/]" if f["reproduced"] else "[red]not reproduced[/]" if f["expected"] \
                else "[yellow]not reached at this budget[/]"
            log.print(f"  {f['finding']} ({f['source']}): {a} against {b}  {mark}")


def claims(grid, log) -> None:
    """He 2016a's claims about the grid, each decided by the sign-flip test after Holm over them."""
    c = grid.claims
    if not c or not c["claims"]:
        return
    log.print(f"He 2016a's claims, training error % paired by seed (sign-flip test, Holm over the "
              f"{c['family']['size']}): {c['claims_in_order']} in the paper's order and resolved, "
              f"{c['claims_unresolved']} unresolved, {c['claims_reversed']} reversed")
    style = {"in order": "green", "reversed": "red", "unresolved": "yellow"}
    for p in c["claims"]:
        holm = "-" if p["p_holm"] is None else f"{p['p_holm']:.3g}"
        log.print(escape(f"  {p['better']} < {p['worse']}: difference {verdicts.shift_str(p)} (n {p['n']}, "
                         f"Holm p {holm})") + f"  [{style[p['verdict']]}]{p['verdict']}[/]")
    if c["power"]:
        log.print(escape(f"  {c['power']}"))


def _cell(s: dict[str, Any], metric: str, digits: int) -> str:
    """Median; min-max over seeds below it; the published figure (dim) below that, where one exists."""
    med, lo, hi = s[f"{metric}_median"], s[f"{metric}_min"], s[f"{metric}_max"]
    lines = [output.fmt(med, digits)]
    if med is not None and s["n"] > 1:
        lines.append(f"{output.fmt(lo, digits)}-{output.fmt(hi, digits)}")
    ci = s.get(f"{metric}_interval")
    if ci is not None:  # the median's order-statistic interval and its coverage (none below 3 seeds)
        lines.append(f"{output.fmt(ci[0], digits)}~{output.fmt(ci[1], digits)} "
                     f"{evidence.coverage_label(s[f'{metric}_coverage'])}")
    ref = s.get("reference") or {}
    if metric in ref:
        lines.append(f"[dim]pub {ref[metric]:.{digits}f}[/]")
    if f"{metric}_range" in ref:
        lo_r, hi_r = ref[f"{metric}_range"]
        lines.append(f"[dim]{'' if metric in ref else 'pub '}{lo_r:.{digits}f}-{hi_r:.{digits}f}[/]")
    return "\n".join(lines)


def table(summaries: list[dict[str, Any]], source: str):
    rows = []
    for s in summaries:
        # The seed count sits under the net's name: one column fewer keeps the ranges whole at 80 columns.
        net = f"{s['net']}\nn={s['n']}" + (f"\n[red]{s['diverged']} div.[/]" if s["diverged"] else "")
        rows.append((net, str(s["depth"]), output.params_str(s["params"]), _cell(s, "train_loss", 3),
                     _cell(s, "train_acc", 2), _cell(s, "test_acc", 2), _cell(s, "grad_norm_first_layer", 2)))
    sources = sorted({(s.get("reference") or {}).get("source") for s in summaries} - {None})
    caption = ("each cell: median over seeds, min-max below, then the median's order-statistic interval with "
               "the coverage it has (lo~hi NN%; none below 3 seeds); train = the last epoch's average; accuracies as "
               "fractions; grad@1 = ||dE/dW|| of the first conv at step 1"
               + (f"; pub = published ({'; '.join(sources)})" if sources else ""))
    return output.table(f"degradation: plain vs residual ({source})",
                        ["net", "depth", "params", "train\nloss", "train\nacc", "test\nacc", "grad@1"],
                        rows, caption=caption, compact=True)
