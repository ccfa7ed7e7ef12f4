"""A study's table for people and for pipes: the rich table (median with its interval and that
interval's coverage, mean ± std and n, training loss, status, the paper's figure, and under it
Kendall's tau, the pair counts after Holm and what the seeds could resolve) and the `--json` objects
(one per row, then one for the study). They render a StudyResult (study.py), whose statistics were
computed once: nothing here computes one.
"""

from __future__ import annotations

from typing import Any

from .. import output
from . import evidence, verdicts
from .study import RowResult, StudyResult


def _rounded(x: float | None, digits: int = 4) -> float | None:
    return None if x is None else round(x, digits)


def _exact(x: float | None, digits: int = 4) -> float | None:
    return x


def row_json(result: StudyResult, row: RowResult, exact: bool = False) -> dict[str, Any]:
    """One object per row (`--json`): median, mean, std, n, `interval` (the median's order-statistic
    interval) with its exact `coverage` (or null and `interval_reason`), the older test_error_*
    names, the row's `group`, and the per-seed values as counted (a diverged seed at chance error,
    and named in `diverged_seeds`). `exact`: numbers unrounded (the csv, documented so: a groupby
    over `report --runs` reproduces them to the last bit)."""
    _round = _exact if exact else _rounded
    ev = row.evidence
    stats = {k: _round(v) if k not in ("n", "interval", "coverage", "interval_reason") else v for k, v in ev.items()}
    if stats["interval"] is not None:
        stats["interval"] = [_round(x) for x in stats["interval"]]
    return {
        "event": "row", "study": result.study, "preset": result.preset, "index": row.index, "row": row.row,
        "group": row.group, **stats,
        "test_error_median": _round(ev["median"]), "test_error_mean": _round(ev["mean"]),
        "test_error_std": _round(ev["std"]), "n": row.n, "train_loss": _round(row.train_loss, 6),
        "status": row.status, "fail": row.fail, "fail_above": result.fail_above,
        "paper": row.paper, "paper_metric": result.paper_metric,
        "runs": row.runs, "diverged": row.diverged,
        "seeds": row.seeds,
        # As counted: a diverged seed at its dataset's chance error (its `diverged_at` in the run's summary).
        "test_errors": [_round(v) for v in row.test_errors],
        "diverged_seeds": row.diverged_seeds,
        "dataset": result.dataset, "metric": result.metric,
    }


def study_json(result: StudyResult) -> dict[str, Any]:
    """The study's summary object (`--json`, after its rows): the family (declared claims or, where
    none are declared, every pair with a paper figure; its size and where it was recorded), each
    claim with its paired difference (Hodges-Lehmann estimate, interval and coverage), raw and
    Holm-adjusted p and verdict, the claims' three counts, the exploratory pairs (raw p only),
    Kendall's tau per group with the failing rows left out, and the power line."""
    return {"event": "study", "study": result.study, "preset": result.preset, **(result.comparison or {})}


def records(result: StudyResult, exact: bool = False) -> list[dict[str, Any]]:
    """The JSON lines of one study table: its rows, then the study (`exact`: unrounded, for csv)."""
    return [*(row_json(result, row, exact) for row in result.rows), study_json(result)]


def paper_str(value: float | str | None) -> str:
    if value is None:
        return "-"
    return value if isinstance(value, str) else f"{value:.2f}"


NARROW = 110  # below this many columns the tables keep one decimal, so row labels keep their width

_STATUS_STYLE = {"completed": "green", "diverged": "red", "error": "red", "running": "yellow"}


def _spread(ev: dict[str, Any], digits: int) -> str:
    if ev["mean"] is None:
        return "-"
    if ev["std"] is None:
        return f"{ev['mean']:.{digits}f}"
    sep = " ± " if digits > 1 else "±"
    return f"{ev['mean']:.{digits}f}{sep}{ev['std']:.{digits}f}"


def render(table: StudyResult, live: bool = False, width: int | None = None):
    """The rich table of a study: ours (median with its interval and coverage below it; mean ± std with n
    below it), training loss, status, the paper. Below 110 columns the interval and the spread keep
    one decimal, so the row labels keep their width (numbers are abbreviated, never labels)."""
    from rich import box
    from rich.markup import escape
    from rich.table import Table

    narrow = width is not None and width < NARROW
    digits = 1 if narrow else 2
    rule = (f"; fail = median above {table.fail_above:g}%, the paper's rule" if table.fail_above is not None else "")
    caption = (f"ours: {table.dataset or '?'} test error % at the last epoch over finished seeds "
               f"(a diverged seed counts as a failed run at its dataset's chance error, "
               f"100 (1 - 1/classes)){rule}; below the median its order-statistic interval "
               f"over seeds with the coverage it has (no interval: n < {evidence.MIN_N}); "
               f"paper: {table.paper_metric or '-'}")
    if table.reading:  # a live table has no caption at all
        caption += ". " + table.reading
    at = f", {table.budget}x its length" if table.budget != 1 else ""
    t = Table(title=escape(f"{table.title} [preset {table.preset}{at}]"), caption=None if live else escape(caption),
              header_style="bold", box=box.SIMPLE_HEAD if narrow else box.HEAVY_HEAD, collapse_padding=narrow,
              pad_edge=not narrow)
    for name, right in (("#", True), ("row", False), ("median %\ninterval", True), ("mean ± std\nn", True),
                        ("train\nloss", True), ("status", False), ("paper", True)):
        # Numbers stay on one line; the label wraps, but keeps room for a few words per line.
        t.add_column(name, justify="right" if right else "left", no_wrap=right,
                     min_width=16 if name == "row" else None)
    for row in table.rows:
        ev = row.evidence
        status = row.status
        style = _STATUS_STYLE.get(status.split()[0], "")
        median = output.fmt(row.median) + (" [red]fail[/]" if row.fail else "")
        interval = (evidence.interval_str(ev["interval"], ev["coverage"], digits) if ev["interval"] else
                    "no interval") if ev["n"] else ""
        loss = row.train_loss
        t.add_row(str(row.index), escape(row.row), median + ("\n" + escape(interval) if interval else ""),
                  f"{_spread(ev, digits)}\n{row.n}/{row.runs}" + (f" ({row.diverged} div.)" if row.diverged else ""),
                  "-" if loss is None else f"{loss:.2g}" if narrow else f"{loss:.4f}",
                  f"[{style}]{status}[/]" if style else status, paper_str(row.paper))
    return t


def render_pairs(result: StudyResult, width: int | None = None):
    """The comparisons under a study table: each declared claim (or, with none declared, each pair
    of the family), then the exploratory pairs: better < worse, what is compared, n, the difference
    worse minus better with its interval and coverage, the raw and Holm-adjusted p, the verdict."""
    from rich import box
    from rich.markup import escape
    from rich.table import Table

    c = result.comparison
    if not c or not (c["claims"] or c["exploratory"]):
        return None
    narrow = width is not None and width < NARROW
    digits = 1 if narrow else 2
    family = c["family"]
    title = (f"{result.title}: the paper's claims ({family['size']}, Holm over them) and exploratory pairs"
             if family["declared"] else f"{result.title}: pairs with a paper figure ({family['size']}, Holm over them)")
    t = Table(title=escape(title), header_style="bold", box=box.SIMPLE_HEAD if narrow else box.HEAVY_HEAD,
              caption=escape(f"difference: worse minus better, paired by seed ({c['difference']}, with the "
                             f"coverage it has); positive is the paper's order. Exploratory pairs are not "
                             f"adjusted and never called resolved."), collapse_padding=narrow, pad_edge=not narrow)
    for name, right in (("claim", False), ("better < worse", False), ("of", False), ("n", True),
                        ("difference\ninterval", True), ("p", True), ("Holm p", True), ("verdict", False)):
        t.add_column(name, justify="right" if right else "left", no_wrap=right)
    style = {"in order": "green", "reversed": "red", "unresolved": "yellow", "exploratory": "dim"}
    for i, p in enumerate([*c["claims"], *c["exploratory"]], start=1):
        claim = "" if p["verdict"] == "exploratory" else str(i)
        shift = verdicts.shift_str(p, digits).replace(" [", "\n[", 1)
        hypothesis = " (hypothesis)" if p.get("hypothesis") else ""  # the study's, not the paper's
        t.add_row(claim, escape(f"{p['better']} < {p['worse']}{hypothesis}"), p["metric"].replace("_", " "), str(p["n"]),
                  escape(shift), "-" if p["p"] is None else f"{p['p']:.3g}",
                  "-" if p.get("p_holm") is None else f"{p['p_holm']:.3g}",
                  f"[{style[p['verdict']]}]{p['verdict']}[/]")
    return t


def render_all(result: StudyResult, width: int | None = None):
    """The study table and, under it, its comparisons (render_pairs)."""
    from rich.console import Group

    pairs = render_pairs(result, width)
    table = render(result, width=width)
    return table if pairs is None else Group(table, pairs)
