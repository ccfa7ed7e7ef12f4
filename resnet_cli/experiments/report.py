"""Study tables from run directories: the same table whether the runs just finished here or were
gathered from many machines.

A run directory says which study row it belongs to in `study.json` (written by the sweep before
the run starts: study, title, preset, row number and label, seed, the paper's figure). Results
come from `summary.json` (status, last-epoch test error, training loss) and, for a run still going
or cut off, the last record of `metrics.jsonl`. Runs without `study.json` (plain `resnet train`
runs) are grouped by their spec, seeds pooled, under the study name `runs`.

Honest reporting (He 2016b reports medians of 5 runs): each row shows the median and mean ± std of
the *last* epoch's test error over its completed seeds, with n; no epoch is ever chosen on the
test set. A diverged run is counted, never averaged in. Where the study states the paper's fail
rule (He 2016b Table 1: test error above 20%), a row whose median is past it is marked `fail` beside
its number; `diverged` stays a status of its own.
"""

from __future__ import annotations

import json
import math
import statistics
import textwrap
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .. import output
from .study import Plan

FINAL = ("completed", "diverged")


@dataclass
class RunRecord:
    path: Path
    study: str
    title: str
    preset: str
    paper_metric: str | None
    index: int
    row: str
    seed: int | None
    paper: float | str | None
    status: str  # completed | diverged | interrupted | unfinished | running | pending | error
    fail_above: float | None = None
    test_error: float | None = None
    train_loss: float | None = None
    train_error: float | None = None
    wall_s: float | None = None
    params: int | None = None
    dataset: str | None = None
    message: str = ""


@dataclass
class RowStats:
    index: int
    row: str
    paper: float | str | None
    runs: list[RunRecord] = field(default_factory=list)

    @property
    def errors(self) -> list[float]:
        return [r.test_error for r in self.runs if r.status == "completed" and _finite(r.test_error)]

    @property
    def n(self) -> int:
        return len(self.errors)

    def median(self) -> float | None:
        return statistics.median(self.errors) if self.errors else None

    def mean(self) -> float | None:
        return statistics.fmean(self.errors) if self.errors else None

    def std(self) -> float | None:
        return statistics.stdev(self.errors) if len(self.errors) >= 2 else None  # sample std (n - 1)

    def fails(self, threshold: float | None) -> bool | None:
        """The paper's "fail": the median test error past the study's threshold (None: no rule or no
        completed run to judge)."""
        med = self.median()
        if threshold is None or med is None:
            return None
        return med > threshold

    def train_loss(self) -> float | None:
        losses = [r.train_loss for r in self.runs if r.status == "completed" and _finite(r.train_loss)]
        return statistics.median(losses) if losses else None

    def status(self) -> str:
        states = [r.status for r in self.runs]
        total = len(states)
        diverged = states.count("diverged")
        if all(s == "completed" for s in states):
            return "completed"
        if "error" in states:
            return "error"
        if all(s in FINAL for s in states):
            return "diverged" if diverged == total else f"diverged {diverged}/{total}"
        if "running" in states:
            return "running"
        done = sum(s in FINAL for s in states)
        return f"incomplete {done}/{total}"


@dataclass
class StudyTable:
    study: str
    title: str
    preset: str
    paper_metric: str | None
    rows: list[RowStats]

    @property
    def fail_above(self) -> float | None:
        rules = [r.fail_above for row in self.rows for r in row.runs if r.fail_above is not None]
        return rules[0] if rules else None

    @property
    def dataset(self) -> str | None:
        names = sorted({r.dataset for row in self.rows for r in row.runs if r.dataset})
        return ", ".join(names) or None


def _finite(x: Any) -> bool:
    return isinstance(x, (int, float)) and math.isfinite(x)


# ---------------------------------------------------------------------------------------------
# Reading run directories


def _read_json(path: Path) -> dict[str, Any] | None:
    try:
        obj = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError):
        return None
    return obj if isinstance(obj, dict) else None


def _last_metrics(path: Path) -> dict[str, Any] | None:
    from ..rundir import read_metrics

    records = read_metrics(path)  # a damaged file is one line naming it; a line cut mid-write is left out
    return records[-1] if records else None


def _spec_tree(path: Path) -> dict[str, Any] | None:
    from .. import yamlio
    from ..errors import UserError

    try:
        tree = yamlio.load_file(path / "spec.yaml")
    except UserError:
        return None
    return tree if isinstance(tree, dict) else None


def describe(tree: dict[str, Any]) -> str:
    """A readable label for a run that belongs to no study: net, unit, shortcut, data."""
    m, d = tree.get("model", {}), tree.get("data", {})
    kind = m.get("shortcut", {}).get("kind", "identity")
    parts = [f"{m.get('family', '?')}{m.get('depth', '?')}", m.get("unit", "original"),
             "plain" if kind == "none" else kind, f"option {m.get('downsample', '?')}", d.get("dataset", "?")]
    if m.get("zero_init_last_bn"):
        parts.append("zero-init")
    return " ".join(str(p) for p in parts)


def load_run(path: Path) -> RunRecord | None:
    """A run directory's record, or None when `path` is not a run (nor a planned one)."""
    path = Path(path)
    study = _read_json(path / "study.json")
    tree = _spec_tree(path) if (path / "spec.yaml").is_file() else None
    if study is None and tree is None:
        return None
    if study is not None:
        name = str(study.get("study", "?"))
        rec = RunRecord(path=path, study=name, title=str(study.get("title") or name),
                        preset=str(study.get("preset", "-")), paper_metric=study.get("paper_metric"),
                        index=int(study.get("index", 0)), row=str(study.get("row", path.name)),
                        seed=study.get("seed"), paper=study.get("paper"), status="pending",
                        fail_above=study.get("fail_above"))
    else:
        rec = RunRecord(path=path, study="runs", title="runs", preset="-", paper_metric=None, index=0,
                        row=describe(tree), seed=tree.get("run", {}).get("seed"), paper=None, status="pending")
    if tree is not None:
        rec.dataset = tree.get("data", {}).get("dataset")
    summary = _read_json(path / "summary.json")
    if summary is not None:
        rec.status = str(summary.get("status", "unfinished"))
        rec.test_error, rec.train_loss = summary.get("test_error"), summary.get("train_loss")
        rec.train_error, rec.wall_s = summary.get("train_error"), summary.get("wall_time_s")
        rec.params = summary.get("params")
        if rec.status == "interrupted":
            rec.status = "unfinished"
    elif tree is not None:
        rec.status = "unfinished"
        last = _last_metrics(path / "metrics.jsonl")
        if last is not None:  # a run in progress, or cut off: shown, never counted in the statistics
            rec.test_error, rec.train_loss = last.get("test_error"), last.get("train_loss")
    return rec


def collect(root: str | Path) -> list[RunRecord]:
    """Every run directory at or below `root`."""
    root = Path(root)
    dirs = {p.parent for name in ("study.json", "spec.yaml") for p in root.rglob(name)}
    records = [rec for d in sorted(dirs) if (rec := load_run(d)) is not None]
    # Runs outside any study: one row per distinct spec (seeds pooled).
    loose = [r for r in records if r.study == "runs"]
    if loose:
        keys: dict[str, int] = {}
        labels: dict[str, str] = {}
        for r in loose:
            tree = _spec_tree(r.path) or {}
            key = json.dumps({k: v for k, v in tree.items() if k != "run"}, sort_keys=True)
            if key not in keys:
                keys[key] = len(keys) + 1
                same = sum(1 for lab in labels.values() if lab.split(" #")[0] == r.row)
                labels[key] = r.row if not same else f"{r.row} #{same + 1}"
            r.index, r.row = keys[key], labels[key]
    return records


def planned(plan: Plan, running: set[str] = frozenset(), errors: dict[str, str] | None = None) -> list[RunRecord]:
    """The plan's runs as records: what is on disk, `running` or `pending` for the rest."""
    out = []
    for run in plan.runs:
        rec = load_run(run.path)
        base = run.record(plan)
        if rec is None or rec.study == "runs":
            rec = RunRecord(path=run.path, study=plan.name, title=plan.title, preset=plan.preset,
                            paper_metric=plan.paper_metric, index=run.row.index, row=run.row.label, seed=run.seed,
                            paper=run.row.paper, status="pending", dataset=run.spec.data.dataset)
        rec.study, rec.title, rec.preset, rec.index, rec.row, rec.paper = (
            base["study"], base["title"], base["preset"], base["index"], base["row"], base["paper"])
        rec.dataset = rec.dataset or run.spec.data.dataset
        rec.fail_above = plan.fail_above
        if run.key in running and rec.status not in FINAL:
            rec.status = "running"
        if errors and run.key in errors:
            rec.status, rec.message = "error", errors[run.key]
        out.append(rec)
    return out


def aggregate(records: list[RunRecord]) -> list[StudyTable]:
    """Group records into one table per (study, preset), rows in the study's order."""
    studies: dict[tuple[str, str], StudyTable] = {}
    for rec in records:
        key = (rec.study, rec.preset)
        table = studies.get(key)
        if table is None:
            table = studies[key] = StudyTable(rec.study, rec.title, rec.preset, rec.paper_metric, [])
        row = next((r for r in table.rows if r.index == rec.index and r.row == rec.row), None)
        if row is None:
            row = RowStats(rec.index, rec.row, rec.paper)
            table.rows.append(row)
        row.runs.append(rec)
    for table in studies.values():
        table.rows.sort(key=lambda r: (r.index, r.row))
        for row in table.rows:
            row.runs.sort(key=lambda r: (r.seed is None, r.seed))
    return sorted(studies.values(), key=lambda t: (t.study, t.preset))


# ---------------------------------------------------------------------------------------------
# Rendering


def _round(x: float | None, digits: int = 4) -> float | None:
    return None if x is None else round(x, digits)


def row_json(table: StudyTable, row: RowStats) -> dict[str, Any]:
    """One object per row (`--json`): the issue's fields plus the per-seed values."""
    return {
        "event": "row", "study": table.study, "preset": table.preset, "index": row.index, "row": row.row,
        "test_error_median": _round(row.median()), "test_error_mean": _round(row.mean()),
        "test_error_std": _round(row.std()), "n": row.n, "train_loss": _round(row.train_loss(), 6),
        "status": row.status(), "fail": row.fails(table.fail_above), "fail_above": table.fail_above,
        "paper": row.paper, "paper_metric": table.paper_metric,
        "runs": len(row.runs), "diverged": sum(r.status == "diverged" for r in row.runs),
        "seeds": [r.seed for r in row.runs],
        "test_errors": [_round(r.test_error) if r.status == "completed" else None for r in row.runs],
        "dataset": table.dataset,
    }


def paper_str(value: float | str | None) -> str:
    if value is None:
        return "-"
    return value if isinstance(value, str) else f"{value:.2f}"


_STATUS_STYLE = {"completed": "green", "diverged": "red", "error": "red", "running": "yellow"}


def render(table: StudyTable, live: bool = False):
    """The rich table of a study: ours (median, mean ± std, n), training loss, status, the paper."""
    from rich.markup import escape
    from rich.table import Table

    rule = (f"; fail = median above {table.fail_above:g}%, the paper's rule" if table.fail_above is not None else "")
    caption = (f"ours: {table.dataset or '?'} test error % at the last epoch over completed seeds "
               f"(diverged runs counted, never averaged){rule}; paper: {table.paper_metric or '-'}")
    t = Table(title=escape(f"{table.title} [preset {table.preset}]"), caption=None if live else escape(caption),
              header_style="bold")
    for name, right in (("#", True), ("row", False), ("median %", True), ("mean ± std", True),
                        ("n", True), ("train loss", True), ("status", False), ("paper", True)):
        # Only the label may wrap: numbers stay on one line in a narrow terminal.
        t.add_column(name, justify="right" if right else "left", no_wrap=name != "row")
    for row in table.rows:
        mean, std = row.mean(), row.std()
        spread = "-" if mean is None else f"{mean:.2f} ± {std:.2f}" if std is not None else f"{mean:.2f}"
        status = row.status()
        style = _STATUS_STYLE.get(status.split()[0], "")
        median = output.fmt(row.median()) + (" [red]fail[/]" if row.fails(table.fail_above) else "")
        t.add_row(str(row.index), escape(row.row), median, spread, f"{row.n}/{len(row.runs)}",
                  output.fmt(row.train_loss(), 4), f"[{style}]{status}[/]" if style else status, paper_str(row.paper))
    return t


def figure(table: StudyTable, path: str | Path) -> Path:
    """Bar chart of the median test error per row (seeds as dots, std as error bars), the paper's
    figure marked beside each bar; rows past the study's fail threshold labelled `fail` (a dashed line
    marks it); diverged rows drawn hatched to the top."""
    from ..figures import pyplot, save

    plt = pyplot()
    rows = table.rows
    xs = list(range(len(rows)))
    medians = [row.median() for row in rows]
    # Room for every seed's dot and the top of every error bar, not only the medians: a row whose
    # seeds are far apart would otherwise lose its worst seed off the top of the axis.
    finite = [e for row in rows for e in row.errors] + [p for row in rows if isinstance(p := row.paper, (int, float))]
    finite += [med + std for row, med in zip(rows, medians) if med is not None and (std := row.std()) is not None]
    top = max(finite + [1.0]) * 1.15
    fig, ax = plt.subplots(figsize=(max(6.0, 0.75 * len(rows) + 2), 4.2))
    for x, row, med in zip(xs, rows, medians):
        if med is not None:
            ax.bar(x, med, width=0.6, color="#4C72B0", alpha=0.85, label="ours (median)" if x == xs[0] else None)
            std = row.std()
            if std is not None:
                ax.errorbar(x, med, yerr=std, color="black", capsize=3, lw=1)
            ax.scatter([x] * row.n, row.errors, s=10, color="black", zorder=3)
        if row.fails(table.fail_above):
            ax.text(x, med, "fail", ha="center", va="bottom", color="#C44E52", fontsize=7, fontweight="bold")
        if row.status().startswith("diverged") and med is None:
            ax.bar(x, top * 0.95, width=0.6, color="none", edgecolor="#C44E52", hatch="//")
            ax.text(x, top * 0.5, "diverged", rotation=90, ha="center", va="center", color="#C44E52", fontsize=8)
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
