"""Study tables from run directories: the same table whether the runs just finished here or were
gathered from many machines.

A run directory says which study row it belongs to in `study.json` (written by the sweep before
the run starts: study, title, preset, row number and label, seed, the paper's figure). Results
come from `summary.json` (status, last-epoch test error, training loss) and, for a run still going
or cut off, the last record of `metrics.jsonl`. Runs without `study.json` (plain `resnet train`
runs) are grouped by their spec, seeds pooled, under the study name `runs`.

Honest reporting (He 2016b reports medians of 5 runs): each row shows the median and mean ± std of
the *last* epoch's test error over its finished seeds, with n and the median's order-statistic
interval at the coverage it has (evidence.py; none below 3 seeds); no epoch is ever chosen on the
test set. The same spec and seed found twice (gathered from two machines) is one seed. A diverged
run (or one that ended with a NaN error) is a failed run, never left out: it counts at its
dataset's chance error, 100 (1 - 1/classes), in the medians, intervals and pairs, and the row says
how many diverged. Where the study states the paper's fail rule (He 2016b Table 1: test error above
20%), a row whose median is past it is marked `fail` beside its number.
"""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Any

from .. import spec as spec_mod
from ..errors import UserError
from ..runs import reader as runs_reader
from ..runs.files import FINAL, META
from ..runs.reader import RunRecord
from ..spec.datasets import chance_error
from ..spec.yamlio import flat_dotted
from ..sweep import asked as asked_mod
from ..sweep import family as family_mod
from ..sweep import plan as plan_mod
from ..sweep import study_file
from ..sweep.family import Family
from ..sweep.plan import Plan, PlannedRun
from . import study
from .records import RowStats, SeedResult, StudyTable
from .study import StudyResult


# ---------------------------------------------------------------------------------------------
# Reading run directories


def _chance(tree: dict[str, Any]) -> float | None:
    """The chance error of the run's dataset (spec/datasets.py), None where its spec says no more."""
    try:
        return chance_error(spec_mod.load(tree).data)
    except (UserError, KeyError, AttributeError, ZeroDivisionError):
        return None


def describe(tree: dict[str, Any]) -> str:
    """A readable label for a run that belongs to no study: net, unit, shortcut, data."""
    m, d = tree.get("model", {}), tree.get("data", {})
    kind = m.get("shortcut", {}).get("kind", "identity")
    parts = [f"{m.get('family', '?')}{m.get('depth', '?')}", m.get("unit", "original"),
             "plain" if kind == "none" else kind, f"option {m.get('downsample', '?')}", d.get("dataset", "?")]
    if m.get("zero_init_last_bn"):
        parts.append("zero-init")
    return " ".join(str(p) for p in parts)


def seed_result(path: Path, metric: str | None = None) -> SeedResult | None:
    """A run directory as one seed of its study row, or None when `path` is not a run (nor a planned
    one). `metric`: the error its row reports (a study's `metric`; None: study.json's, else test_error)."""
    run = RunRecord.read(path)
    if not run.is_run:
        return None
    study, tree = run.study, run.spec_tree
    if study is not None:
        name = str(study.get("study", "?"))
        rec = SeedResult(path=run.path, study=name, title=str(study.get("title") or name),
                         preset=str(study.get("preset", "-")), paper_metric=study.get("paper_metric"),
                         index=int(study.get("index", 0)), row=str(study.get("row", run.path.name)),
                         seed=study.get("seed"), paper=study.get("paper"), status=run.status,
                         fail_above=study.get("fail_above"), budget=int(study.get("budget", 1)), group=study.get("group"))
    elif tree is not None:
        rec = SeedResult(path=run.path, study="runs", title="runs", preset="-", paper_metric=None, index=0,
                         row=describe(tree), seed=tree.get("run", {}).get("seed"), paper=None, status=run.status)
    else:  # a spec.yaml that cannot be read at all
        return None
    rec.message = run.task_message
    metric = metric or (study or {}).get("metric") or "test_error"
    rec.metric = str(metric)
    if tree is not None:
        rec.dataset = tree.get("data", {}).get("dataset")
        rec.chance = _chance(tree)
    if run.summary is not None:
        rec.test_error, rec.train_loss = run.summary.get(metric), run.summary.get("train_loss")
        rec.train_error, rec.wall_s = run.summary.get("train_error"), run.summary.get("wall_time_s")
        rec.params = run.summary.get("params")
    elif tree is not None and (last := run.last_metrics()) is not None:
        # a run in progress, or cut off: shown, never counted in the statistics
        rec.test_error, rec.train_loss = last.get(metric), last.get("train_loss")
    return rec


# Not what a run is: a row pools its seeds, and the run directory says only where it was written.
_NOT_THE_RUN = ("run.seed", "run.out")


def _spec_key(tree: dict[str, Any]) -> str:
    return json.dumps({k: v for k, v in flat_dotted(tree).items() if k not in _NOT_THE_RUN},
                      sort_keys=True, default=str)


def _label_loose(loose: list[SeedResult], trees: dict[Path, dict[str, Any]]) -> None:
    """One row per distinct spec (seeds pooled); rows whose readable label is the same are told
    apart by the dotted keys in which their specs differ (`optim.lr=0.05`), not by a number."""
    keys: dict[str, int] = {}
    for r in loose:
        keys.setdefault(_spec_key(trees[r.path]), len(keys) + 1)
    by_label: dict[str, dict[str, dict[str, Any]]] = {}
    for r in loose:
        flat = {k: v for k, v in flat_dotted(trees[r.path]).items() if k not in _NOT_THE_RUN}
        by_label.setdefault(r.row, {})[_spec_key(trees[r.path])] = flat
    names: dict[str, str] = {}
    for label, specs in by_label.items():
        if len(specs) == 1:
            names.update({key: label for key in specs})
            continue
        dotted = sorted({k for flat in specs.values() for k in flat})
        differ = [k for k in dotted if len({json.dumps(f.get(k), default=str) for f in specs.values()}) > 1]
        for key, flat in specs.items():
            what = ", ".join(f"{k}={flat.get(k, '-')}" for k in differ)
            names[key] = f"{label} ({what})"
    for r in loose:
        key = _spec_key(trees[r.path])
        r.index, r.row = keys[key], names[key]


def damaged(root: str | Path) -> list[str]:
    """One line per run directory at or below `root` whose summary.json or meta.json is there but
    cannot be read (RunRecord.damaged): such a run is counted as unfinished, and this says why."""
    return [why for d in runs_reader.find(root) if (why := RunRecord.read(d).damaged)]


def collect(root: str | Path, duplicates: list[Path] | None = None) -> list[SeedResult]:
    """Every run directory at or below `root`, each (spec minus seed and out, seed) once: the same
    run found again (gathered twice, copied) is one seed, not two. The copies left out are appended
    to `duplicates` (the first in path order is kept, a finished one before an unfinished one)."""
    records = [rec for d in runs_reader.find(root) if (rec := seed_result(d)) is not None]
    trees = {r.path: (RunRecord.read(r.path).spec_tree or {}) for r in records}
    seen: set[tuple] = set()
    kept: list[SeedResult] = []
    for r in sorted(records, key=lambda r: (r.status not in FINAL, str(r.path))):
        ident = ((r.study, r.preset, r.budget, r.index, r.row) if r.study != "runs" else (_spec_key(trees[r.path]),),
                 r.seed)
        if ident in seen:
            if duplicates is not None:
                duplicates.append(r.path)
            continue
        seen.add(ident)
        kept.append(r)
    kept.sort(key=lambda r: str(r.path))
    loose = [r for r in kept if r.study == "runs"]
    if loose:
        _label_loose(loose, trees)
    return kept


def planned(plan: Plan, running: set[str] = frozenset(), errors: dict[str, str] | None = None) -> list[SeedResult]:
    """The plan's runs as records: what is on disk, `running` or `pending` for the rest."""
    return [planned_run(plan, run, run.key in running, (errors or {}).get(run.key)) for run in plan.runs]


def planned_run(plan: Plan, run: PlannedRun, running: bool = False, error: str | None = None) -> SeedResult:
    """One planned run as its row's seed: read from its directory, labelled as the plan has it."""
    rec = seed_result(run.path, plan.metric)
    if rec is None or rec.study == "runs":  # nothing of this plan's there yet
        rec = _pending(plan, run)
    else:  # labelled as the plan has it now: a row renamed or renumbered since keeps its runs
        rec.study, rec.title, rec.preset, rec.paper_metric = plan.name, plan.title, plan.preset, plan.paper_metric
        rec.index, rec.row, rec.paper, rec.group = run.row.index, run.row.label, run.row.paper, run.row.group
        rec.dataset = rec.dataset or run.spec.data.dataset
        rec.fail_above, rec.budget = plan.fail_above, run.budget
    if running and rec.status not in FINAL:
        rec.status = "running"
    if error is not None:
        rec.status, rec.message = "error", error
    return rec


def asked_for(records: list[SeedResult], name: str, preset: str) -> asked_mod.Asked | None:
    """What the results directory of these records was asked for (sweep/asked.py): asked.json's
    seeds and recipe, or, in a directory from before it, the seeds claims.json recorded (recipe
    unknown: none); None where neither was recorded."""
    paths = [r.path for r in records if (r.study, r.preset) == (name, preset)]
    found = asked_mod.find(paths, name, preset)
    if found is not None:
        return found[0]
    for path in paths:
        for folder in list(path.parents)[:3]:
            family = family_mod.read(folder, name, preset)
            if family is not None and family.seeds is not None:
                return asked_mod.Asked(name, preset, family.source, tuple(family.seeds), ())
    return None


def recipe_words(records: list[SeedResult], name: str, preset: str) -> str:
    """How the runs of this study were asked to differ from its preset as shipped, as flags
    ('--set optim.epochs=2, seeds 0,1'); '' where they were not, or nobody recorded it."""
    asked = asked_for(records, name, preset)
    if asked is None:
        return ""
    try:
        shipped = plan_mod.plan(asked.source or name, preset).seeds
    except UserError:
        shipped = None
    return asked_mod.words(asked.sets, asked.seeds if list(asked.seeds) != shipped else None)


def missing(records: list[SeedResult]) -> list[SeedResult]:
    """The runs a shipped study plans that are not among `records`, as `pending` records, so a table
    gathered while a study is under way shows its missing rows and seeds instead of looking whole.
    The plan is what the directory was asked for (asked_for: the seeds and recipe recorded when its
    runs started, and the study file it was read from), else the shipped study's preset with its own
    seeds; a directory whose rows that plan does not have (a study of another version), or a study
    file not shipped and not recorded, gets nothing added: no guessing."""
    out: list[SeedResult] = []
    for name, preset in sorted({(r.study, r.preset) for r in records if r.budget == 1}):
        asked = asked_for(records, name, preset)
        # A study file of the user's own is planned from where asked.json says it was read.
        source = name if name in study_file.shipped() else asked.source if asked and asked.source else None
        if source is None or (source != name and not Path(source).is_file()):
            continue
        try:
            plan = plan_mod.plan(source, preset, sets=list(asked.sets) if asked else [],
                                 seeds=list(asked.seeds) if asked else None)
        except UserError:  # a preset this version no longer has (or a recipe it no longer takes)
            continue
        mine = [r for r in records if (r.study, r.preset, r.budget) == (name, preset, 1)]
        if not {(r.index, r.row) for r in mine} <= {(row.index, row.label) for row in plan.rows}:
            continue
        found = {(r.index, r.seed) for r in mine}
        for run in plan.runs:
            if (run.row.index, run.seed) not in found:
                out.append(_pending(plan, run))
    return out


def _pending(plan: Plan, run: PlannedRun) -> SeedResult:
    """A planned run not begun, as its row's seed."""
    return SeedResult(path=run.path, study=plan.name, title=plan.title, preset=plan.preset,
                      paper_metric=plan.paper_metric, index=run.row.index, row=run.row.label, seed=run.seed,
                      paper=run.row.paper, status="pending", fail_above=plan.fail_above, budget=run.budget,
                      dataset=run.spec.data.dataset, group=run.row.group, chance=chance_error(run.spec.data),
                      metric=plan.metric)


def aggregate(records: list[SeedResult]) -> list[StudyTable]:
    """Group records into one table per (study, preset), rows in the study's order."""
    studies: dict[tuple[str, str], StudyTable] = {}
    for rec in records:
        key = (rec.study, rec.preset, rec.budget)  # each budget of `--budgets` is a table of its own
        table = studies.get(key)
        if table is None:
            table = studies[key] = StudyTable(rec.study, rec.title, rec.preset, rec.paper_metric, [], rec.budget)
        row = next((r for r in table.rows if r.index == rec.index and r.row == rec.row), None)
        if row is None:
            row = RowStats(rec.index, rec.row, rec.paper, group=rec.group)
            table.rows.append(row)
        row.runs.append(rec)
    for table in studies.values():
        table.rows.sort(key=lambda r: (r.index, r.row))
        for row in table.rows:
            row.runs.sort(key=lambda r: (r.seed is None, r.seed))
    return sorted(studies.values(), key=lambda t: (t.study, t.preset, t.budget))


def _claims_now(source: str, preset: str) -> Family | None:
    """The claims a study file holds now (None: no such file or preset any more)."""
    try:
        return plan_mod.plan(source, preset).family
    except UserError:
        return None


def _recorded(table: StudyTable, root: Path | None) -> tuple[Family, Path] | None:
    """The family in claims.json beside or above the table's run directories (up to `root`)."""
    tried: set[Path] = set()
    for row in table.rows:
        for run in row.runs:
            for folder in list(run.path.parents)[:3]:
                if folder not in tried:
                    tried.add(folder)
                    if (found := family_mod.read(folder, table.study, table.preset)) is not None:
                        return found, folder
                if root is not None and folder == Path(root):
                    break
    return None


def family_of(table: StudyTable, root: Path | None = None, all_seeds: bool = False) -> Family | None:
    """The claims a gathered study is decided by: the family recorded in its results directory when
    its runs started (claims.json); where the study file's claims now differ, the recorded ones
    still decide, with a note saying so (and so where the file alone changed, or seeds were added
    after the recording: the claims are decided at the recorded seeds, or at every seed found with
    `all_seeds`). With none recorded: for a study this version ships, its
    file's claims as they are now, with a note saying so; else none (every pair with a paper figure)."""
    if table.study == "runs":
        return None
    found = _recorded(table, root)
    if found is not None:
        recorded, folder = found
        now = _claims_now(recorded.source, table.preset) if recorded.source else None
        ran = {run.seed for row in table.rows for run in row.runs if run.seed is not None and run.status != "pending"}
        note = family_mod.differences(folder, recorded, now, ran, all_seeds)
        if all_seeds:  # `report --all-seeds`: every seed found decides, as the note says
            recorded = replace(recorded, seeds=None)
        return replace(recorded, note=note) if note else recorded
    now = _claims_now(table.study, table.preset) if table.study in study_file.shipped() else None
    if now is not None and now.declared:
        return replace(now, note=f"no claims were recorded with these runs ({family_mod.FILE}): the study "
                                 f"file's claims as they are now decide")
    return now


def results(records: list[SeedResult], root: Path | None = None) -> list[StudyResult]:
    """aggregate's tables, each with its family (family_of), with every statistic computed, once
    each (results/study.py)."""
    tables = aggregate(records)
    for table in tables:
        table.family = family_of(table, root)
    return [study.compute(table) for table in tables]


# What a run's status is called in a one-row-per-run table: the sweep's "error" is a failed run.
_RUN_STATUS = {"error": "failed"}


def _run_status(status: str, summary: dict[str, Any]) -> str:
    """completed, diverged, interrupted (stopped by a signal: its summary says so), failed, running,
    unfinished."""
    if status == "unfinished" and summary.get("status") == "interrupted":
        return "interrupted"
    return _RUN_STATUS.get(status, status)


def run_rows(records: list[SeedResult]) -> list[dict[str, Any]]:
    """One record per run directory (`resnet report --runs`): its study row and seed, status, the
    last epoch's figures (and `counted_error`, the error its row's statistics count: a groupby
    median over it is the table's median), its length, wall time, size, where and with what it ran (meta.json), and
    its directory. Planned runs with no directory yet are left out."""
    out = []
    for r in records:
        if r.status == "pending":
            continue
        meta = runs_reader.read_json(r.path / META) or {}
        summary = RunRecord.read(r.path).summary or {}
        out.append({"event": "run", "study": r.study, "preset": r.preset, "index": r.index, "row": r.row,
                    "group": r.group,
                    "seed": r.seed, "status": _run_status(r.status, summary), "test_error": r.test_error,
                    # as the study table counts it: a diverged run at its dataset's chance error
                    "counted_error": r.counted(),
                    "train_loss": r.train_loss, "train_error": r.train_error, "epochs": summary.get("epochs"),
                    "iterations": summary.get("iterations"), "wall_s": r.wall_s, "params": r.params or meta.get("params"),
                    "device": summary.get("device") or meta.get("device"), "threads": meta.get("threads"),
                    "torch": (meta.get("versions") or {}).get("torch"), "git_commit": meta.get("git_commit"),
                    "run_dir": str(r.path)})
    return out
