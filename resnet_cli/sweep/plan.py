"""A study resolved: every (row, seed) of a study file (study_file.py) as a validated spec and a
run directory, the form the sweep engine (engine.py) runs and `resnet report` reads back.

A row's spec is built as base <- spec <- preset overrides <- row overrides <- the row's own
overrides for that preset <- --set items <- (run.seed, run.out), and validated once, so a bad row
fails with one line naming the row before anything trains.
"""

from __future__ import annotations

import re
import unicodedata
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .. import spec as spec_mod
from ..errors import UserError
from ..spec import Spec
from ..spec import seeds as seeds_mod
from . import asked as asked_mod
from . import family as family_mod
from . import safe_path
from .study_file import BUILTIN_PRESETS, PaperFigure, StudyFile, expand, find, load, rows_of

# ---------------------------------------------------------------------------------------------
# The resolved plan


@dataclass(frozen=True)
class PlannedRow:
    index: int  # 1-based, the table's '#'
    label: str
    paper: PaperFigure
    spec: Spec  # the row's spec; each of its runs sets run.seed and run.out
    group: str | None = None  # Row.group
    cells: tuple[tuple[str, Any], ...] = ()  # a grid row's (axis name, value) pairs
    run_dir: str | None = None  # the study's run_dir with this row's cells filled in, {seed} left


@dataclass(frozen=True)
class PlannedRun:
    row: PlannedRow
    seed: int
    path: Path
    spec: Spec
    budget: int = 1  # a multiple of the preset's length (`--budgets`, sweep/budgets.py)

    @property
    def key(self) -> str:
        return f"{self.row.index}:{self.seed}" + (f"@{self.budget}x" if self.budget != 1 else "")

    def record(self, plan: Plan) -> dict[str, Any]:
        """What a run directory's study.json holds: enough for `resnet report` to rebuild the row."""
        return {
            "study": plan.name, "title": plan.title, "preset": plan.preset, "paper_metric": plan.paper_metric,
            "index": self.row.index, "row": self.row.label, "seed": self.seed, "paper": self.row.paper,
            "fail_above": plan.fail_above, "metric": plan.metric,
            **({"budget": self.budget} if self.budget != 1 else {}),
            **({"group": self.row.group} if self.row.group else {}),
        }


@dataclass(frozen=True)
class Plan:
    name: str
    title: str
    preset: str
    preset_about: str
    paper_metric: str | None
    fail_above: float | None  # test error % past which a row's median is the paper's "fail"
    source: str  # what to pass back to `resnet ablate` (a shipped name or an absolute path)
    results: Path
    seeds: list[int]
    rows: list[PlannedRow] = field(default_factory=list)
    runs: list[PlannedRun] = field(default_factory=list)
    budgets: list[int] = field(default_factory=lambda: [1])  # `--budgets`: multiples of the preset's length
    metric: str = "test_error"  # the study's `metric`: the summary.json field its rows report
    # The declared claims this preset's rows can test: Holm's family (family.py).
    family: family_mod.Family = field(default_factory=lambda: family_mod.Family(declared=False))
    # The --set items that change what a run computes (asked.recipe), and how this plan differs from
    # the preset as shipped, in flags ('' where it does not): the header says the recipe actually run.
    sets: tuple[str, ...] = ()
    changed: str = ""

    def family_size(self) -> tuple[int, str]:
        """How many comparisons Holm's adjustment will run over, and what they are: the declared
        claims this plan's rows can test, or (no claims declared) its pairs with a paper figure."""
        if self.family.declared:
            return self.family.size, "claims"
        return (sum(1 for i, a in enumerate(self.rows) for b in self.rows[i + 1:] if _compared(a, b)),
                "pairs with a paper figure")

    def find(self, key: str) -> PlannedRun:
        """`ROW:SEED`, the form `--only` takes and `--list` prints."""
        m = re.fullmatch(r"\s*(\d+)\s*:\s*(\d+)\s*(?:@\s*(\d+)x)?\s*", key)
        if not m:
            raise UserError(f"--only {key}: expected ROW:SEED or ROW:SEED@Bx, e.g. --only 3:0 "
                            f"(rows 1..{len(self.rows)})")
        index, seed, budget = int(m.group(1)), int(m.group(2)), int(m.group(3) or 1)
        if budget not in self.budgets:
            raise UserError(f"--only {key}: no budget {budget}x in this plan; --budgets gives "
                            f"{', '.join(f'{b}x' for b in self.budgets)}")
        if not 1 <= index <= len(self.rows):
            raise UserError(f"--only {key}: no row {index}; this study has rows 1..{len(self.rows)}")
        for run in self.runs:
            if run.row.index == index and run.seed == seed and run.budget == budget:
                return run
        if budget != 1:
            raise UserError(f"--only {key}: no seed {seed} in this plan; seeds: {', '.join(map(str, self.seeds))}")
        return make_run(self.rows[index - 1], seed, self.results)


def _compared(a: PlannedRow, b: PlannedRow) -> bool:
    """Two rows an undeclared study compares: both with numbers from the paper, different, in one group."""
    def number(x) -> bool:
        return isinstance(x, (int, float)) and not isinstance(x, bool)
    return number(a.paper) and number(b.paper) and a.paper != b.paper and a.group == b.group


def slug(label: str) -> str:
    """A label as a folder name: letters (any script's: "Größe" stays readable, not "gr-e"), digits,
    '.', '+' and '-'; every other run of characters one '-'. ASCII labels read as before."""
    s = re.sub(r"(?:[^\w.+-]|_)+", "-", unicodedata.normalize("NFC", label).lower()).strip("-.")
    return re.sub(r"-{2,}", "-", s)[:48] or "row"


def run_path(results: Path, row: PlannedRow, seed: int) -> Path:
    """RESULTS/03-constant-scaling-0.5-1-s2 (the row number keeps `ls` in table order), or where the
    study's run_dir puts it."""
    if row.run_dir is not None:
        return results / row.run_dir.format(seed=seed)
    return results / f"{row.index:02d}-{slug(row.label)}-s{seed}"


def make_run(row: PlannedRow, seed: int, results: Path) -> PlannedRun:
    path = safe_path.inside(results, run_path(results, row, seed), f"row '{row.label}' seed {seed}")
    run = row.spec.run.model_copy(update={"seed": seed, "out": str(path)})
    return PlannedRun(row=row, seed=seed, path=path, spec=row.spec.model_copy(update={"run": run}))


def base_tree(study: StudyFile, path: Path, shown: str | None = None) -> dict:
    """The spec every row starts from: the study's `base` (a bundled config, or a path relative to
    the study file at `path`) with its `spec` merged over it."""
    base: dict = {}
    if study.base is not None:
        near = path.parent / study.base
        base = spec_mod.load_tree(str(near) if near.is_file() else study.base)
    return spec_mod.merge(base, expand(study.spec, f"{shown or path}: spec"))


def plan(name: str, preset: str = "paper", results: str | Path | None = None, sets: list[str] = (),
         seeds: list[int] | None = None) -> Plan:
    """Read a study (shipped name or path) and resolve every (row, seed) into a validated spec."""
    path, study_name, source = find(name)
    return resolve(load(path), path, study_name, source, preset=preset, results=results, sets=sets, seeds=seeds)


def resolve(study: StudyFile, path: Path, study_name: str, source: str, *, preset: str = "paper",
            results: str | Path | None = None, sets: list[str] = (), seeds: list[int] | None = None,
            axes: dict[str, list[Any]] | None = None, shown: str | None = None) -> Plan:
    """Every (row, seed) of a study already read, as a validated spec. `path`: the study file (its
    folder anchors a relative `base`); `axes`: values replacing a grid axis's (or picking a named
    axis's); `shown`: how errors name the study (default: the path)."""
    shown = shown or str(path)
    presets = {**BUILTIN_PRESETS, **study.presets}
    if preset not in presets:
        raise UserError(f"{shown}: unknown preset '{preset}'; valid: {', '.join(presets)}")
    chosen = presets[preset]

    base = base_tree(study, path, shown)
    preset_tree = expand(chosen.overrides, f"{shown}: preset {preset}")
    set_tree = spec_mod.tree_of(None, sets=sets)

    labels: set[str] = set()
    planned: list[PlannedRow] = []
    rows = rows_of(study, shown, axes)
    for row, _, _ in rows:
        for name in row.only_in or ():
            if name not in presets:
                raise UserError(f"{shown}: row '{row.label}': only_in names no preset '{name}'; valid: {', '.join(presets)}")
    chosen_rows = [r for r in rows if r[0].only_in is None or preset in r[0].only_in]
    for i, (row, cells, run_dir) in enumerate(chosen_rows, start=1):
        where = f"{shown}: row {i} '{row.label}'"
        if slug(row.label) in labels:
            raise UserError(f"{where}: another row has the same label; labels name run directories")
        labels.add(slug(row.label))
        unknown = sorted(set(row.presets) - set(presets))
        if unknown:
            raise UserError(f"{where}: presets.{unknown[0]} names no preset; valid: {', '.join(presets)}")
        # The preset sets the budget around the rows; what a row sets, it keeps (a depth study's
        # depths, a row's own warm-up), so the row goes on top of the preset.
        tree = spec_mod.merge(base, preset_tree)
        tree = spec_mod.merge(tree, expand(row.overrides, where))
        if preset in row.presets:
            tree = spec_mod.merge(tree, expand(row.presets[preset], f"{where}: presets.{preset}"))
        tree = spec_mod.merge(tree, set_tree)
        try:
            spec = spec_mod.load(tree, name=where)
        except UserError as exc:
            raise UserError(exc.message if exc.message.startswith(where) else f"{where}: {exc.message}") from None
        if study.metric == "val_error" and not spec.data.val_split:
            raise UserError(f"{where}: the study reports val_error but data.val_split is 0; "
                            "hold images out (data.val_split > 0) or use metric: test_error")
        planned.append(PlannedRow(index=i, label=row.label, paper=row.paper, spec=spec, group=row.group,
                                  cells=cells, run_dir=run_dir))

    run_seeds = seeds_mod.check(list(seeds) if seeds else list(chosen.seeds or study.seeds), shown)
    all_labels = [row.label for row, _, _ in rows_of(study, shown)]  # every preset's and grid value's
    family = family_mod.declared(study, all_labels, [r.label for r in planned], shown,
                                 family_mod.file_sha256(path) if path.is_file() else None, run_seeds)
    if results is None:  # the study's and the preset's names become a folder's name
        safe_path.component(study_name, "the study name", shown)
        safe_path.component(preset, "the preset name", shown)
    recipe = asked_mod.recipe(sets)
    # A changed recipe gets its own folder: its runs would otherwise collide with the study's as shipped.
    out = (Path(results) if results is not None else
           Path("runs") / "ablate" / f"{study_name}-{preset}{asked_mod.folder_suffix(recipe)}")
    runs = [make_run(row, seed, out) for row in planned for seed in run_seeds]
    return Plan(name=study_name, title=study.title or study_name, preset=preset, preset_about=chosen.about,
                paper_metric=study.paper_metric,
                fail_above=chosen.fail_above if chosen.fail_above is not None else study.fail_above,
                source=source, results=out, seeds=run_seeds, rows=planned,
                runs=runs, metric=study.metric, family=family, sets=tuple(recipe),
                changed=asked_mod.words(recipe, run_seeds if seeds else None))
