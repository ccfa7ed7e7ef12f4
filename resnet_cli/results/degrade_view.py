"""How a degrade grid reads: one run's line, the table of summaries (median, min-max, the median's
interval, the published figure), the findings beside the published figures, and He 2016a's claims.
`resnet degrade` and `resnet report` on a degrade directory render a grid through these, so the two
cannot drift apart; Progress prints each run's line as the sweep finishes it. Nothing here computes
a statistic (results/degrade_grid.py does).
"""

from __future__ import annotations

from typing import Any

from rich.markup import escape

from .. import output
from ..runs.degrade_records import load_record
from . import degrade_formats, evidence, verdicts
from .degrade_reference import ARTICLE

# A run's record as the JSON lines give it.
RUN_KEYS = ("event", "net", "depth", "seed", "status", "train_loss", "train_acc", "test_acc",
            "grad_norm_first_layer", "params", "iterations", "wall_s")


def json_records(grid, summary: str = "summary") -> list[dict[str, Any]]:
    """The runs, then the summaries, then the claims: what --json prints. `resnet report` names a
    summary's event "row", as its lines for any study's rows are."""
    return [*({k: r.get(k) for k in RUN_KEYS} for r in grid.records),
            *({**s, "event": summary} for s in grid.summaries), *([grid.claims] if grid.claims else [])]


def run_text(record: dict[str, Any], reused: bool, i: int | None = None, total: int | None = None) -> str:
    """One run's line for stderr: its net, depth, seed, final figures and how it was obtained."""
    how = "reused" if reused else f"{record['wall_s'] or 0.0:.1f} s"
    status = "" if record["status"] == "completed" else f"  [red]{record['status']}[/]"
    where = f"[{i:>3}/{total}] " if i is not None else ""
    return (f"{where}{record['net']:<8} {record['depth']:>3} {'blocks' if record.get('family') == 'vit' else 'layers'}  seed {record['seed']:<3} "
            f"train loss {output.fmt(record['train_loss'], 3)}  train acc {output.fmt(record['train_acc'], 3)}  "
            f"test acc {output.fmt(record['test_acc'], 3)}  grad@1 {output.fmt(record['grad_norm_first_layer'], 2)}"
            f"  ({how}){status}")


class Progress:
    """One line per run on stderr as it finishes (the sweep's notify)."""

    def __init__(self, console, total: int):
        self.console, self.total, self.done = console, total, 0

    def __call__(self, run, outcome) -> None:
        if outcome is None or outcome.status == "error":  # errors: one line at the end, or the one that stops the grid
            return
        self.done += 1
        record = load_record(run.path, run.path.parent.parent)
        if record is None:
            self.console.print(escape(f"[{self.done:>3}/{self.total}] {run.path.name}: {outcome.status}"
                                      + (f": {outcome.message}" if outcome.message else "")))
        else:
            self.console.print(run_text(record, False, self.done, self.total))


def findings(grid, log) -> None:
    """The article's figures beside ours: each median within its 10-seed range or not."""
    if grid.findings is None:
        return
    log.print(f"{ARTICLE}'s findings on 8x8 digits, our medians beside its figures:")
    for f in grid.findings:
        lo, hi = f["article_range"]
        article = "" if f["article"] is None else f"{f['article']:.2f}, "
        mark = "within the article's 10-seed range" if f["in_range"] else "[yellow]outside the article's 10-seed range[/]"
        log.print(f"  {f['finding']}: {f['measure']} {output.fmt(f['ours'], 2)} (article: {article}10 seeds "
                  f"{lo:g}-{hi:g})  {mark}")


STYLE = {"in order": "green", "reversed": "red", "unresolved": "yellow"}


def claims_table(claims: dict[str, Any] | None):
    """He 2016a's claims about the grid and their verdicts, each by the sign-flip test of its error %
    (training or test) paired by seed, Holm over the claims (None: no claim had both rows)."""
    if not claims or not claims["claims"]:
        return None
    rows = [(escape(f"{c['better']} < {c['worse']}"), c["metric"].replace("_error", ""), verdicts.shift_str(c), str(c["n"]),
             "-" if c["p_holm"] is None else f"{c['p_holm']:.3g}", f"[{STYLE[c['verdict']]}]{c['verdict']}[/]")
            for c in claims["claims"]]
    return output.table(f"He 2016a's claims, error % (Holm over {claims['family']['size']})",
                        ["claim", "error", "difference", "n", "Holm p", "verdict"], rows,
                        caption="difference: worse minus better, Hodges-Lehmann with its exact interval and "
                                "coverage; " + claims["power"])


def render(grid, fmt, log, summary: str = "summary", pairs: bool = False, save: str | None = None) -> None:
    """The grid as `resnet degrade` and `resnet report` print it: JSON lines, csv, Markdown or LaTeX
    (degrade_formats.py), or its table and its claims' table; then the article's figures beside ours
    (and the claims' tally, off a terminal's table) on stderr."""
    if fmt in output.TEXT_FORMATS:
        done = len(grid.records)
        partial = (done, grid.planned) if grid.planned is not None and done < grid.planned else None
        output.write(degrade_formats.text(json_records(grid, summary), fmt.value, pairs, grid.findings, partial), save)
    else:
        output.render(json_records(grid, summary), fmt, views(grid))
    findings(grid, log)
    c = grid.claims
    if fmt is not output.Format.TABLE and c and c["claims"]:
        log.print(f"He 2016a's claims, error paired by seed (Holm over {c['family']['size']}): "
                  f"{c['claims_in_order']} in the paper's order, {c['claims_unresolved']} unresolved, "
                  f"{c['claims_reversed']} reversed")


def views(grid) -> list[output.View]:
    """The grid's table, then its claims' table: what a terminal shows."""
    grid_table = (lambda width: table(grid.summaries, grid.source)) if grid.summaries else None
    verdict = claims_table(grid.claims)
    return [output.View(draw=grid_table, show=False),
            output.View(draw=(lambda width: verdict) if verdict else None, show=False)]


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
