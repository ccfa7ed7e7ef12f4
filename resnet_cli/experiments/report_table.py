"""A study's table for people and for pipes: the rich table (median with its interval and that
interval's coverage, mean ± std and n, training loss, status, the paper's figure, and under it
Kendall's tau, the pair counts after Holm and what the seeds could resolve) and the `--json` objects
(one per row, then one for the study). The statistics come from evidence.py; the tables themselves
(StudyTable, RowStats) from report_records.py.
"""

from __future__ import annotations

from typing import Any

from .. import output
from . import evidence
from .report_records import RowStats, StudyTable


def _round(x: float | None, digits: int = 4) -> float | None:
    return None if x is None else round(x, digits)


def row_json(table: StudyTable, row: RowStats) -> dict[str, Any]:
    """One object per row (`--json`): median, mean, std, n, `interval` (the median's order-statistic
    interval) with its exact `coverage` (or null and `interval_reason`), the older test_error_*
    names, the row's `group`, and the per-seed values as counted (a diverged seed at chance error,
    and named in `diverged_seeds`)."""
    ev = row.evidence()
    stats = {k: _round(v) if k not in ("n", "interval", "coverage", "interval_reason") else v for k, v in ev.items()}
    if stats["interval"] is not None:
        stats["interval"] = [_round(x) for x in stats["interval"]]
    return {
        "event": "row", "study": table.study, "preset": table.preset, "index": row.index, "row": row.row,
        "group": row.group, **stats,
        "test_error_median": _round(row.median()), "test_error_mean": _round(row.mean()),
        "test_error_std": _round(row.std()), "n": row.n, "train_loss": _round(row.train_loss(), 6),
        "status": row.status(), "fail": row.fails(table.fail_above), "fail_above": table.fail_above,
        "paper": row.paper, "paper_metric": table.paper_metric,
        "runs": len(row.runs), "diverged": row.diverged,
        "seeds": [r.seed for r in row.runs],
        # As counted: a diverged seed at its dataset's chance error (its `diverged_at` in the run's summary).
        "test_errors": [_round(r.counted()) for r in row.runs],
        "diverged_seeds": [r.seed for r in row.runs if r.diverged],
        "dataset": table.dataset,
    }


def compare(table: StudyTable) -> dict[str, Any]:
    """The study against the paper's order (evidence.compare) from its rows, pairs within each row's group."""
    groups = {row.row: row.group or "" for row in table.rows}
    return evidence.compare([{"index": row.index, "row": row.row, "paper": row.paper, "median": row.median(),
                              "fail": row.fails(table.fail_above), "values": row.values()} for row in table.rows],
                            groups.get if any(groups.values()) else None)


def study_json(table: StudyTable) -> dict[str, Any]:
    """The study's summary object (`--json`, after its rows): Kendall's tau against the paper's
    figures with its permutation p-value, the three pair counts after Holm, every compared pair with
    its raw and Holm-adjusted p, and the power line."""
    return {"event": "study", "study": table.study, "preset": table.preset, **compare(table)}


def paper_str(value: float | str | None) -> str:
    if value is None:
        return "-"
    return value if isinstance(value, str) else f"{value:.2f}"


_STATUS_STYLE = {"completed": "green", "diverged": "red", "error": "red", "running": "yellow"}


def reading(table: StudyTable) -> str | None:
    """Under the table: Kendall's tau against the paper's figures, the pair counts, and what the
    seeds could resolve. Nothing is called resolved where no pair could be."""
    c = compare(table)
    pairs = c["pairs"]
    if c["kendall_tau"] is None and not pairs:
        return None
    how = "exact" if c.get("p_exact", True) else "Monte Carlo"
    tau = (f"Kendall's tau {c['kendall_tau']:.2f} against the paper's figures (one-sided permutation p "
           f"{c['p_value']:.3f}, {how}, {c['rows']} rows)" if c["kendall_tau"] is not None else c["reason"])
    if not pairs:
        return tau
    if not any(p["can_resolve"] for p in pairs):
        return f"{tau}; {len(pairs)} pairs with a paper figure, none resolvable: {c['power']}"
    return (f"{tau}; pairs with a paper figure: {c['pairs_in_order_resolved']} in the paper's order and resolved, "
            f"{c['pairs_unresolved']} unresolved, {c['pairs_reversed_resolved']} reversed and resolved "
            f"(resolved: sign-flip test of the paired-by-seed differences, Holm-adjusted p <= 0.05 over the "
            f"{len(pairs)} pairs); {c['power']}")


def _spread(ev: dict[str, Any], digits: int) -> str:
    if ev["mean"] is None:
        return "-"
    if ev["std"] is None:
        return f"{ev['mean']:.{digits}f}"
    sep = " ± " if digits > 1 else "±"
    return f"{ev['mean']:.{digits}f}{sep}{ev['std']:.{digits}f}"


def render(table: StudyTable, live: bool = False, width: int | None = None):
    """The rich table of a study: ours (median with its interval and coverage below it; mean ± std with n
    below it), training loss, status, the paper. Below 110 columns the interval and the spread keep
    one decimal, so the row labels keep their width (numbers are abbreviated, never labels)."""
    from rich import box
    from rich.markup import escape
    from rich.table import Table

    narrow = width is not None and width < 110
    digits = 1 if narrow else 2
    rule = (f"; fail = median above {table.fail_above:g}%, the paper's rule" if table.fail_above is not None else "")
    caption = (f"ours: {table.dataset or '?'} test error % at the last epoch over finished seeds "
               f"(a diverged seed counts as a failed run at its dataset's chance error, "
               f"100 (1 - 1/classes)){rule}; below the median its order-statistic interval "
               f"over seeds with the coverage it has (no interval: n < {evidence.MIN_N}); "
               f"paper: {table.paper_metric or '-'}")
    if not live and (line := reading(table)):
        caption += ". " + line
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
        ev = row.evidence()
        status = row.status()
        style = _STATUS_STYLE.get(status.split()[0], "")
        median = output.fmt(row.median()) + (" [red]fail[/]" if row.fails(table.fail_above) else "")
        interval = (evidence.interval_str(ev["interval"], ev["coverage"], digits) if ev["interval"] else
                    "no interval") if ev["n"] else ""
        loss = row.train_loss()
        t.add_row(str(row.index), escape(row.row), median + ("\n" + escape(interval) if interval else ""),
                  f"{_spread(ev, digits)}\n{row.n}/{len(row.runs)}" + (f" ({row.diverged} div.)" if row.diverged else ""),
                  "-" if loss is None else f"{loss:.2g}" if narrow else f"{loss:.4f}",
                  f"[{style}]{status}[/]" if style else status, paper_str(row.paper))
    return t
