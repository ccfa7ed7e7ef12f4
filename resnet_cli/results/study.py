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

from . import evidence
from .records import RowStats, StudyTable, finite


@dataclass(frozen=True)
class RowResult:
    index: int
    row: str
    group: str | None
    paper: float | str | None
    evidence: dict[str, Any]  # evidence.describe of the counted errors: median, mean, std, n, interval
    values: dict[Any, float | None]  # seed -> error as counted (what pairs pair on)
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
    comparison: dict[str, Any] | None  # evidence.compare: tau, pairs with raw and Holm p (None: live)
    reading: str | None  # the line under the table (None: live, or nothing to say)


def _fingerprint(row: RowStats, fail_above: float | None) -> tuple:
    return (row.index, row.row, row.group, row.paper, fail_above,
            tuple((r.seed, r.status, r.counted(), r.train_loss) for r in row.runs))


def row_result(row: RowStats, fail_above: float | None) -> RowResult:
    ev = evidence.describe(row.errors)
    losses = [r.train_loss for r in row.runs if r.status == "completed" and finite(r.train_loss)]
    median = ev["median"]
    return RowResult(
        index=row.index, row=row.row, group=row.group, paper=row.paper, evidence=ev, values=row.values(),
        seeds=[r.seed for r in row.runs], test_errors=[r.counted() for r in row.runs],
        run_diverged=[r.diverged for r in row.runs], runs=len(row.runs),
        train_loss=statistics.median(losses) if losses else None, status=row.status(),
        fail=None if fail_above is None or median is None else median > fail_above,
        fingerprint=_fingerprint(row, fail_above))


def compare(rows: list[RowResult]) -> dict[str, Any]:
    """The study against the paper's order (evidence.compare), pairs within each row's group."""
    groups = {row.row: row.group or "" for row in rows}
    return evidence.compare([{"index": r.index, "row": r.row, "paper": r.paper, "median": r.median,
                              "fail": r.fail, "values": r.values} for r in rows],
                            groups.get if any(groups.values()) else None)


def reading(c: dict[str, Any]) -> str | None:
    """Under the table: Kendall's tau against the paper's figures, the pair counts, and what the
    seeds could resolve. Nothing is called resolved where no pair could be."""
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


def compute(table: StudyTable, live: bool = False, previous: StudyResult | None = None) -> StudyResult:
    """Every statistic of one table, once. `live`: a sweep's progress table (rows only); `previous`:
    its last result, whose rows are reused where their runs are unchanged."""
    fail_above = table.fail_above
    kept = {r.fingerprint: r for r in previous.rows} if previous is not None else {}
    rows = [kept.get(_fingerprint(row, fail_above)) or row_result(row, fail_above) for row in table.rows]
    comparison = None if live else compare(rows)
    return StudyResult(study=table.study, title=table.title, preset=table.preset, paper_metric=table.paper_metric,
                       budget=table.budget, fail_above=fail_above, dataset=table.dataset, rows=rows,
                       comparison=comparison, reading=reading(comparison) if comparison is not None else None)
