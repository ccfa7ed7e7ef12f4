"""Slow or fails: a study's rows at several multiples of the preset's length (`--budgets 1,2,4`).

He 2016b reads a variant that is above 20% test error in 64k iterations as "fail"; whether more
iterations would train it is a separate, measurable question. Each (row, budget, seed) is its own
run directory: budget 1 is the plain study's (RESULTS/NN-row-sS, so a finished plain study is
reused), budget b lives in RESULTS/budget-bx/. A budget scales the length (optim.iters or
optim.epochs, whichever the preset sets) and the lr milestones with it, since the schedule is a
pure function of the iteration (schedule.py); the warm-up stays as it is (He 2016b sec. 4: a fixed
400 iterations at lr 0.01, whatever the run's length).

Verdict per row, from the median over seeds of the last evaluation's test error at each budget:
`trains` (the smallest budget is at or under the threshold), `slow` (a larger one is, the smallest
is not), `falling` (none is, but the error at the largest budget is at least FALLING points below
the smallest budget's: it may yet be slow past the largest budget, which this does not measure),
`fails` (none is, and the error did not fall). Iterations to the threshold: the first logged
evaluation, in the smallest budget that gets there, at which the median over seeds is at or under it.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from ..errors import UserError
from ..runs.reader import RunRecord
from .plan import Plan, PlannedRun


def parse(text: str) -> list[int]:
    """`1,2,4` -> [1, 2, 4]: distinct positive integers, in increasing order."""
    try:
        values = [int(s) for s in text.replace(" ", "").split(",") if s]
    except ValueError:
        raise UserError(f"--budgets {text}: expected comma-separated positive integers, e.g. --budgets 1,2,4") from None
    if not values or any(b < 1 for b in values) or len(set(values)) != len(values):
        raise UserError(f"--budgets {text}: expected distinct positive integers, e.g. --budgets 1,2,4")
    return sorted(values)


def scale_optim(optim, budget: int):
    """The same schedule, `budget` times as long: length and milestones scaled, warm-up kept."""
    update: dict[str, Any] = {}
    if optim.iters is not None:
        update["iters"] = optim.iters * budget
    else:
        update["epochs"] = optim.epochs * budget
    if optim.milestones is not None:
        update["milestones"] = [m * budget for m in optim.milestones]
    return optim.model_copy(update=update)


def budget_dir(results: Path, budget: int) -> Path:
    return results if budget == 1 else results / f"budget-{budget}x"


def budget_run(run: PlannedRun, results: Path, budget: int) -> PlannedRun:
    """A plain study run at `budget` times its length, in its budget's directory (budget 1: the run
    itself, in the plain study's directory)."""
    path = budget_dir(results, budget) / run.path.name
    spec = run.spec.model_copy(update={"optim": scale_optim(run.spec.optim, budget),
                                       "run": run.spec.run.model_copy(update={"out": str(path)})})
    return replace(run, path=path, spec=spec, budget=budget)


def expand(plan: Plan, budgets: list[int], rows: set[str] | None = None) -> Plan:
    """The plan with every run at every budget (budget 1's runs unchanged); `rows`: only these rows'
    runs beyond 1x (`--budget-rows`: the rows of the claims a user asks about)."""
    runs = [budget_run(run, plan.results, b) for b in budgets for run in plan.runs
            if b == 1 or rows is None or run.row.label in rows]
    return replace(plan, runs=runs, budgets=list(budgets))


# ---------------------------------------------------------------------------------------------
# The table


@dataclass
class BudgetRow:
    index: int
    row: str
    errors: dict[int, float | None] = field(default_factory=dict)  # budget -> median test error %
    n: dict[int, int] = field(default_factory=dict)
    iters_to: int | None = None
    budget_to: int | None = None  # the budget whose curve reached the threshold
    verdict: str = "-"


@dataclass
class BudgetTable:
    study: str
    title: str
    preset: str
    threshold: float | None
    budgets: list[int]
    rows: list[BudgetRow]


# Points of test error the largest budget must gain on the smallest for a row above the threshold
# at every budget to be called `falling` rather than `fails`: well past a few test images of the
# quick presets' 360 (0.28 points each) and the spread one seed's rerun shows.
FALLING = 2.0


def verdict(errors: dict[int, float | None], threshold: float) -> str:
    """trains / slow / falling / fails from the median test error at each budget (None: not yet measured)."""
    budgets = sorted(errors)
    under = [b for b in budgets if errors[b] is not None and errors[b] <= threshold]
    if under and under[0] == budgets[0]:
        return "trains"
    if under:
        return "slow"
    if errors and all(errors[b] is not None for b in budgets):
        return "falling" if len(budgets) > 1 and errors[budgets[-1]] <= errors[budgets[0]] - FALLING else "fails"
    return "incomplete"


def _curve(path: Path) -> dict[int, float]:
    """iteration -> test error % of each logged evaluation in a run's metrics.jsonl."""
    return {int(rec["iter"]): float(rec["test_error"]) for rec in RunRecord.read(path).metrics()
            if rec.get("event") == "epoch" and isinstance(rec.get("test_error"), (int, float))}


def iters_to(runs, threshold: float) -> int | None:
    """The first evaluation at which the median over the completed seeds is at or under threshold."""
    curves = [_curve(r.path) for r in runs if r.status == "completed"]
    curves = [c for c in curves if c]
    if not curves:
        return None
    common = sorted(set.intersection(*(set(c) for c in curves)))
    for it in common:
        if statistics.median(c[it] for c in curves) <= threshold:
            return it
    return None


def _median(values: list[float]) -> float | None:
    return statistics.median(values) if values else None


def build(tables, threshold: float | None = None) -> list[BudgetTable]:
    """One budget table per (study, preset) among report.aggregate's tables (one per budget)."""
    groups: dict[tuple[str, str], list] = {}
    for t in tables:
        groups.setdefault((t.study, t.preset), []).append(t)
    out = []
    for (study, preset), group in groups.items():
        group.sort(key=lambda t: t.budget)
        rule = threshold if threshold is not None else next(
            (t.fail_above for t in group if t.fail_above is not None), None)
        budgets = [t.budget for t in group]
        rows: dict[tuple[int, str], BudgetRow] = {}
        for t in group:
            for r in t.rows:
                row = rows.setdefault((r.index, r.row), BudgetRow(r.index, r.row))
                row.errors[t.budget], row.n[t.budget] = _median(r.errors), r.n
        for (index, label), row in rows.items():
            for b in budgets:
                row.errors.setdefault(b, None)
                row.n.setdefault(b, 0)
            if rule is None:
                continue
            row.verdict = verdict(row.errors, rule)
            for t in group:
                stats = next((r for r in t.rows if (r.index, r.row) == (index, label)), None)
                med = _median(stats.errors) if stats else None
                if med is not None and med <= rule:
                    row.iters_to, row.budget_to = iters_to(stats.runs, rule), t.budget
                    break
        out.append(BudgetTable(study, group[0].title, preset, rule, budgets,
                               sorted(rows.values(), key=lambda r: (r.index, r.row))))
    return out


def row_json(table: BudgetTable, row: BudgetRow) -> dict[str, Any]:
    return {
        "event": "budget_row", "study": table.study, "preset": table.preset, "index": row.index, "row": row.row,
        "budgets": table.budgets,
        "test_error_median": {f"{b}x": None if row.errors[b] is None else round(row.errors[b], 4) for b in table.budgets},
        "n": {f"{b}x": row.n[b] for b in table.budgets},
        "threshold": table.threshold, "iters_to_threshold": row.iters_to,
        "budget_to_threshold": row.budget_to, "verdict": row.verdict,
    }


_STYLE = {"trains": "green", "slow": "yellow", "falling": "yellow", "fails": "red"}


def render(table: BudgetTable):
    from rich.markup import escape
    from rich.table import Table

    from .. import output

    rule = "-" if table.threshold is None else f"{table.threshold:g}%"
    t = Table(title=escape(f"{table.title} [preset {table.preset}] at {', '.join(f'{b}x' for b in table.budgets)} "
                           "the preset's length"),
              caption=escape(f"median test error % over completed seeds at the last evaluation; trains: at or under "
                             f"{rule} at {table.budgets[0]}x; slow: only at a larger budget; falling: at none, but the error "
                             f"fell by {FALLING:g}+ points with the budget; fails: at none, and it did not fall"),
              header_style="bold")
    cells = [(str(row.index), escape(row.row), *(output.fmt(row.errors[b]) for b in table.budgets),
              "-" if row.iters_to is None else f"{row.iters_to} ({row.budget_to}x)", row.verdict) for row in table.rows]
    # On a narrow terminal the headers wrap and the labels fold, but no other column shrinks below its
    # widest value: a number or a verdict is never cut, and the row number and label never vanish
    # (which they did, squeezed out by no-wrap columns, under about 70 columns). The whole table needs
    # about 60; on a narrower terminal its right edge is cut.
    fits = lambda j: max([1, *(len(c[j]) for c in cells)])  # noqa: E731
    t.add_column("#", justify="right", no_wrap=True, min_width=fits(0))
    t.add_column("row", overflow="fold", min_width=6)
    for i, b in enumerate(table.budgets):
        t.add_column(f"{b}x: test err %" if i == 0 else f"{b}x", justify="right", min_width=fits(2 + i))
    t.add_column(f"iters to ≤ {rule}", justify="right", min_width=fits(2 + len(table.budgets)))
    t.add_column("slow or fails", min_width=fits(3 + len(table.budgets)))
    for row, cell in zip(table.rows, cells):
        style = _STYLE.get(row.verdict, "")
        t.add_row(*cell[:-1], f"[{style}]{row.verdict}[/]" if style else row.verdict)
    return t
