"""A study table as a bar chart: the median test error per row beside the paper's figure."""

from __future__ import annotations

import textwrap
from pathlib import Path

from ..results.study import StudyResult


def figure(table: StudyResult, path: str | Path) -> Path:
    """Bar chart of the median test error per row (seeds as dots, std as error bars), the paper's
    figure marked beside each bar; rows past the study's fail threshold labelled `fail` (a dashed line
    marks it); a row with diverged seeds hatched, those seeds drawn as crosses at the chance error
    they count as (hatched to the top where their dataset's chance error is unknown)."""
    from ..figures import pyplot, save

    plt = pyplot()
    rows = table.rows
    xs = list(range(len(rows)))
    medians = [row.median for row in rows]
    # Room for every seed's dot and the top of every error bar, not only the medians: a row whose
    # seeds are far apart would otherwise lose its worst seed off the top of the axis.
    finite = [e for row in rows for e in row.errors] + [p for row in rows if isinstance(p := row.paper, (int, float))]
    finite += [med + std for row, med in zip(rows, medians) if med is not None and (std := row.std) is not None]
    top = max(finite + [1.0]) * 1.15
    first_gone = next((x for x, row in zip(xs, rows) if row.diverged), None)
    fig, ax = plt.subplots(figsize=(max(6.0, 0.75 * len(rows) + 2), 4.2))
    for x, row, med in zip(xs, rows, medians):
        if med is not None:
            ax.bar(x, med, width=0.6, color="#4C72B0", alpha=0.85, label="ours (median)" if x == xs[0] else None)
            std = row.std
            if std is not None:
                ax.errorbar(x, med, yerr=std, color="black", capsize=3, lw=1)
            ok = row.completed_errors
            ax.scatter([x] * len(ok), ok, s=10, color="black", zorder=3)
            if row.diverged:  # counted at chance error: drawn as crosses, hatched, and named
                gone = row.diverged_errors
                ax.scatter([x] * len(gone), gone, s=22, marker="x", color="#C44E52", zorder=3,
                           label="diverged (counted at chance error)" if x == first_gone else None)
                ax.bar(x, med, width=0.6, color="none", edgecolor="#C44E52", hatch="//")
                ax.text(x, med * 0.5, f"diverged {row.diverged}/{row.runs}", rotation=90, ha="center",
                        va="center", color="#C44E52", fontsize=8)
        elif row.diverged:
            ax.bar(x, top * 0.95, width=0.6, color="none", edgecolor="#C44E52", hatch="//")
            ax.text(x, top * 0.5, "diverged", rotation=90, ha="center", va="center", color="#C44E52", fontsize=8)
        if row.fail:
            ax.text(x, med, "fail", ha="center", va="bottom", color="#C44E52", fontsize=7, fontweight="bold")
    paper_x = [x for x, row in zip(xs, rows) if isinstance(row.paper, (int, float))]
    paper_y = [row.paper for row in rows if isinstance(row.paper, (int, float))]
    if paper_x:
        ax.scatter(paper_x, paper_y, marker="D", s=28, color="#C44E52", zorder=4,
                   # Wrapped: a study's metric names its tables and datasets, and one long line
                   # beside the axes would make the figure twice as wide as its bars.
                   label=textwrap.fill(f"paper ({table.paper_metric or 'its metric'})", 40))
    fail_x = [x for x, row in zip(xs, rows) if row.paper == "fail"]
    if fail_x:
        ax.scatter(fail_x, [top * 0.97] * len(fail_x), marker="v", s=34, color="#C44E52", zorder=4,
                   label="paper: fail")
    if table.fail_above is not None and table.fail_above < top:
        ax.axhline(table.fail_above, color="#C44E52", lw=0.8, ls="--",
                   label=f"fail: test error above {table.fail_above:g}% (the paper's rule)")
    ax.set_ylim(0, top)
    ax.set_xticks(xs)
    ax.set_xticklabels([row.row for row in rows], rotation=35, ha="right")
    ax.set_ylabel(f"test error % ({table.dataset or '?'}, last epoch)")
    ax.set_title(f"{table.title} [preset {table.preset}]", fontsize=9)
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0))  # outside: never hides a bar
    return save(fig, path)
