"""A study table's results, computed once: per row the median with its interval and coverage, mean ±
std, n, training loss, status and the paper's fail rule; per study the pairs after Holm, Kendall's
tau against the paper's order and the reading under the table. The terminal table, the JSON lines
and the bar chart (table.py, plots/study_bars.py) render a StudyResult and compute nothing.

The live table of a sweep in progress recomputes only the rows whose runs changed since the last
event (`previous`), and leaves the study's pairs for the end: they need every seed.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass
from typing import Any

from ..sweep.family import Family
from . import evidence, verdicts
from .records import RowStats, StudyTable, finite


@dataclass(frozen=True)
class RowResult:
    index: int
    row: str
    group: str | None
    paper: float | str | None
    evidence: dict[str, Any]  # evidence.describe of the counted errors: median, mean, std, n, interval
    values: dict[str, dict[Any, float | None]]  # "error", "train_loss", "train_error": seed -> value as counted
    seeds: list[Any]
    test_errors: list[float | None]  # per run, as counted (a diverged seed at chance error)
    run_diverged: list[bool]  # per run: diverged (counted at chance error)
    runs: int
    train_loss: float | None  # median over completed seeds
    status: str
    fail: bool | None  # the paper's rule: median past the study's threshold (None: no rule, or no median)
    fingerprint: tuple  # what the row was computed from: a live table reuses the row while it holds

    @property
    def n(self) -> int:
        return self.evidence["n"]

    @property
    def median(self) -> float | None:
        return self.evidence["median"]

    @property
    def std(self) -> float | None:
        return self.evidence["std"]

    @property
    def errors(self) -> list[float]:
        return [v for v in self.test_errors if v is not None]

    @property
    def diverged_seeds(self) -> list[Any]:
        return [seed for seed, gone in zip(self.seeds, self.run_diverged) if gone]

    @property
    def diverged(self) -> int:
        return sum(self.run_diverged)

    @property
    def completed_errors(self) -> list[float]:
        """The errors of the seeds that completed (the diverged ones left out: drawn apart)."""
        return [v for v, gone in zip(self.test_errors, self.run_diverged) if v is not None and not gone]

    @property
    def diverged_errors(self) -> list[float]:
        """The chance errors the diverged seeds count as (where their dataset says)."""
        return [v for v, gone in zip(self.test_errors, self.run_diverged) if v is not None and gone]


@dataclass(frozen=True)
class StudyResult:
    study: str
    title: str
    preset: str
    paper_metric: str | None
    budget: int
    fail_above: float | None
    dataset: str | None
    rows: list[RowResult]
    comparison: dict[str, Any] | None  # verdicts.compare: claims, exploratory pairs, tau per group (None: live)
    reading: str | None  # the line under the table (None: live, or nothing to say)
    metric: str = "test_error"  # the summary.json field the rows report


def _fingerprint(row: RowStats, fail_above: float | None) -> tuple:
    return (row.index, row.row, row.group, row.paper, fail_above,
            tuple((r.seed, r.status, r.counted(), r.train_loss, r.train_error) for r in row.runs))


def row_result(row: RowStats, fail_above: float | None) -> RowResult:
    ev = evidence.describe(row.errors)
    losses = [r.train_loss for r in row.runs if r.status == "completed" and finite(r.train_loss)]
    median = ev["median"]
    return RowResult(
        index=row.index, row=row.row, group=row.group, paper=row.paper, evidence=ev,
        values={metric: row.values(metric) for metric in ("error", "train_loss", "train_error")},
        seeds=[r.seed for r in row.runs], test_errors=[r.counted() for r in row.runs],
        run_diverged=[r.diverged for r in row.runs], runs=len(row.runs),
        train_loss=statistics.median(losses) if losses else None, status=row.status(),
        fail=None if fail_above is None or median is None else median > fail_above,
        fingerprint=_fingerprint(row, fail_above))


def compare(rows: list[RowResult], family: Family | None = None) -> dict[str, Any]:
    """The study against its paper (verdicts.compare): the declared claims, the exploratory pairs,
    Kendall's tau per group."""
    return verdicts.compare([{"index": r.index, "row": r.row, "group": r.group, "paper": r.paper, "median": r.median,
                              "fail": r.fail, "values": r.values} for r in rows], family or Family(declared=False))


def reading(c: dict[str, Any]) -> str | None:
    """Under the table: the claims' three counts after Holm over the family, the exploratory pairs
    apart, Kendall's tau per group, and what the seeds could resolve. Nothing is called resolved
    where its family could not resolve it."""
    claims, family = c["claims"], c["family"]
    parts = []
    m = family["size"]
    what = (f"{m} declared claim{'s' if m != 1 else ''}" if family["declared"] else
            f"{m} pair{'s' if m != 1 else ''} with a paper figure (no claims declared: the family)")
    if claims and not any(p["can_resolve"] for p in claims):
        parts.append(f"{what}, none resolvable at this n")
    elif claims:
        parts.append(f"{what}: {c['claims_in_order']} in the paper's order and resolved, {c['claims_unresolved']} "
                     f"unresolved, {c['claims_reversed']} reversed and resolved (sign-flip test of the differences "
                     f"paired by seed, Holm-adjusted p <= 0.05 over the family)")
    elif family["declared"]:
        parts.append("no declared claim has both its rows in this table")
    if c["exploratory"]:
        k = len(c["exploratory"])
        parts.append(f"{k} exploratory pair{'s' if k != 1 else ''} (raw p only, never called resolved)")
    for o in c["orders"]:
        name = f"{o['group']}: " if o["group"] else ""
        left = f", {o['left_out']} failing row{'s' if o['left_out'] != 1 else ''} left out" if o["left_out"] else ""
        if o["kendall_tau"] is None:
            parts.append(f"{name}{o['reason']}{left}")
        else:
            how = "exact" if o.get("p_exact", True) else "Monte Carlo"
            parts.append(f"{name}Kendall's tau {o['kendall_tau']:.2f} against the paper's figures (one-sided "
                         f"permutation p {o['p_value']:.3f}, {how}, {o['rows']} rows{left})")
    if c["power"]:
        parts.append(c["power"])
    return "; ".join(parts) or None


def compute(table: StudyTable, live: bool = False, previous: StudyResult | None = None) -> StudyResult:
    """Every statistic of one table, once. `live`: a sweep's progress table (rows only); `previous`:
    its last result, whose rows are reused where their runs are unchanged."""
    fail_above = table.fail_above
    kept = {r.fingerprint: r for r in previous.rows} if previous is not None else {}
    rows = [kept.get(_fingerprint(row, fail_above)) or row_result(row, fail_above) for row in table.rows]
    comparison = None if live else compare(rows, table.family)
    return StudyResult(study=table.study, title=table.title, preset=table.preset, paper_metric=table.paper_metric,
                       budget=table.budget, fail_above=fail_above, dataset=table.dataset, rows=rows,
                       comparison=comparison, reading=reading(comparison) if comparison is not None else None,
                       metric=table.metric)
