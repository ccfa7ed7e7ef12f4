"""A degrade grid's report, computed once from its run directories: the finished runs' records,
the summaries per (net, depth), He 2016a's claims decided after Holm, the article's figures
beside ours; and degrade.json, the file that keeps them. `resnet degrade` and `resnet report`
render this; the figure is plots/degrade.py's.
"""

from __future__ import annotations

import datetime as dt
import json
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..runs.degrade_records import RUN_DIRS, load_record, records
from ..runs.reader import legacy_probes
from ..errors import write_atomically
from ..runs.writer import git_commit, versions
from ..sweep import engine as sweep
from ..sweep.degrade_plan import NETS, Plan
from . import degrade as results
from .degrade_reference import REFERENCE, findings

RESULT_FILE, FIGURE_FILE = "degrade.json", "degrade.png"


@dataclass
class Grid:
    """What one `resnet degrade` leaves: the finished runs' records in plan order, their summaries,
    the findings, and what became of each run in this invocation (sweep.Outcome by ROW:SEED)."""

    plan: Plan | None  # None: read back from a directory by `resnet report` (from_directory)
    records: list[dict[str, Any]]
    outcomes: dict[str, sweep.Outcome] = field(default_factory=dict)
    signum: int | None = None
    wall_s: float = 0.0
    summaries: list[dict[str, Any]] = field(default_factory=list)
    findings: list[dict[str, Any]] | None = None
    claims: dict[str, Any] | None = None  # He 2016a's claims about the grid, decided after Holm (results/degrade.py)
    figure: Path | None = None  # drawn by the command (plots/degrade.py)
    source: str = ""  # the study file or spec the grid was made from, for the title
    planned: int | None = None  # the runs the grid asked for (None: not known, an output older than the field)


def collect(plan: Plan, outcomes: dict[str, sweep.Outcome] | None = None, signum: int | None = None,
            tick: float | None = None) -> Grid:
    """The grid's report from its run directories alone: records of the finished runs, summaries,
    claims and findings (after a local sweep, or after a SLURM array); writes nothing."""
    outcomes = outcomes or {}
    refused = {key for key, outcome in outcomes.items() if outcome.status == "error"}
    grid = _report(Grid(plan, records(plan.study, refused), outcomes, signum, source=plan.source,
                        planned=len(plan.study.runs)))
    grid.wall_s = time.perf_counter() - tick if tick is not None else 0.0
    return grid


def from_directory(root: Path) -> Grid | None:
    """A degrade output directory (degrade.json beside runs/) read back from its run directories
    alone, as `resnet degrade` reported it; None where `root` is not one."""
    saved_file = root / RESULT_FILE
    if not saved_file.is_file():
        return None
    try:
        saved = json.loads(saved_file.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        saved = {}  # the runs are what counts; the file only names the grid
    legacy = legacy_probes(root)
    found = [rec for d in sorted((root / RUN_DIRS).glob("*")) if d.is_dir()
             and (rec := load_record(d, root, legacy)) is not None]
    found.sort(key=lambda r: (r["depth"], NETS.index(r["net"]), r["seed"]))  # the plan's order
    try:  # degrade.json names the grid it asked for: a report of fewer runs says it is partial
        planned = len(saved["depths"]) * len(saved["nets"]) * len(saved["seeds"])
    except (KeyError, TypeError):
        planned = None
    return _report(Grid(None, found, source=str(saved.get("source") or root), planned=planned))


def _report(grid: Grid) -> Grid:
    """Summaries, claims and findings of the grid's records, each computed once."""
    if grid.records:
        grid.claims = results.claims(grid.records)  # once: the summaries' pairs take their verdicts from it
        grid.summaries = summarise(grid.records, grid.claims)
        grid.findings = findings(grid.summaries)
    return grid


def write_result(grid: Grid) -> None:
    plan = grid.plan
    result = {"source": plan.source, "depths": plan.depths, "seeds": plan.seeds, "nets": plan.nets,
              "base_spec": plan.base, "summaries": grid.summaries, "findings": grid.findings,
              "claims": grid.claims,
              "wall_s": round(grid.wall_s, 1),  # this invocation, reused runs costing nothing
              "train_wall_s": round(sum(r["wall_s"] or 0.0 for r in grid.records), 1),  # every run's own training time
              "versions": versions(), "git_commit": git_commit(),
              "finished": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")}
    write_atomically(plan.out / RESULT_FILE, json.dumps(result, indent=2) + "\n")


def summarise(records: list[dict[str, Any]], decided: dict[str, Any] | None = None) -> list[dict[str, Any]]:
    """The grid's summaries (results/degrade.py) with the published figures beside ours."""
    return results.summarise(records, REFERENCE, decided)
