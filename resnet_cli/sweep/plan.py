"""Studies: many runs of one experiment, described as data.

A study file names a base spec, the rows of a table (each a label, spec overrides and the paper's
figure) or a grid of axes, the seeds, and presets. Every (row, seed) becomes one fully resolved
spec; the sweep engine turns each into a run directory.

    title: "He 2016b Table 1: what sits on the shortcut"
    base: cifar/resnet110            # a bundled config or a path (relative to this file)
    spec: {optim: {iters: 64000}}    # optional, merged over base
    seeds: [0, 1, 2, 3, 4]
    rows:
      - label: original (identity)
        paper: 6.61                  # a number, `fail`, or omitted
      - label: constant scaling 0.5 / 1
        overrides: {model.shortcut.kind: scale, model.shortcut.shortcut_scale: 0.5}
        paper: fail
    presets:
      quick:                         # applied to the base, under every row
        overrides: {data: {dataset: digits}, optim.epochs: 15}
        seeds: [0, 1, 2]

Overrides are a nested spec tree, dotted keys, or both. A row's spec is built as
base <- spec <- preset overrides <- row overrides <- the row's own overrides for that preset
(`presets:` inside a row) <- --set items <- (run.seed, run.out), and validated once, so a bad row
fails with one line naming the row before anything trains. A preset changes the budget around the
rows (data, widths, length); what a row varies stays as the row says.

Two presets exist for every study: `paper` (no changes: the papers' recipe) and a generic `quick`.
A study may define its own, replacing these.
"""

from __future__ import annotations

import itertools
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any, ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from .. import spec as spec_mod
from ..spec import bundled, yamlio
from ..errors import UserError
from ..spec import Spec
from ..spec.messages import one_line

PaperFigure = float | Literal["fail"] | None
# He 2016b Table 1 calls a run "fail" when its test error is above 20% (the caption), whether or not
# its loss diverged. A study states its threshold (in %) as data; None: no fail rule.
FailAbove = Annotated[float, Field(gt=0.0, le=100.0)] | None


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Row(_Strict):
    noun: ClassVar[str] = "a row"  # for "valid keys in a row" (spec/messages.py)
    label: Annotated[str, Field(min_length=1)]
    overrides: dict[str, Any] = {}
    # The paper's figure for this row, in the study's `paper_metric`; `fail` where the paper reports
    # that the net did not train (He 2016b Table 1: test error above 20%).
    paper: PaperFigure = None
    # Extra overrides for this row under a named preset, applied after the preset's own: e.g. the
    # bottleneck rows of a quick study take narrower widths than the basic ones.
    presets: dict[str, dict[str, Any]] = {}
    # Presets this row belongs to (None: all). A row whose data a preset would replace (a CIFAR-100
    # figure under a digits budget) can say it is meaningful only in `paper`.
    only_in: list[str] | None = None
    # Rows are compared with the paper's order only within their group (None: one group): He 2016b
    # Table 2 orders the units of one net at a time, so its 110- and 164-layer rows are two groups.
    group: str | None = None


class Preset(_Strict):
    noun: ClassVar[str] = "a preset"
    about: str = ""
    fail_above: FailAbove = None  # None: the study's
    overrides: dict[str, Any] = {}
    seeds: list[Annotated[int, Field(ge=0)]] | None = None  # None: the study's


class StudyFile(_Strict):
    noun: ClassVar[str] = "a study"
    title: str | None = None
    about: str | None = None
    paper_metric: str | None = None  # what the paper column measures, e.g. "CIFAR-10 test error %"
    fail_above: FailAbove = None
    # What a row's runs are ranked by: the test error (the papers' tables), or the error on the
    # images held out by data.val_split, for studies that choose a setting as He 2016b chose b_g.
    metric: Literal["test_error", "val_error"] = "test_error"
    base: str | None = None
    spec: dict[str, Any] = {}
    seeds: list[Annotated[int, Field(ge=0)]] = [0]
    rows: list[Row] | None = None
    # dotted key -> values; one row per combination (the first key varies slowest).
    grid: dict[str, list[Any]] | None = None
    presets: dict[str, Preset] = {}

    @model_validator(mode="after")
    def _rows_or_grid(self) -> StudyFile:
        if (self.rows is None) == (self.grid is None):
            raise ValueError("a study has exactly one of `rows` (a list) and `grid` (axes)")
        if self.rows is not None and not self.rows:
            raise ValueError("`rows` is empty")
        if self.grid is not None and (not self.grid or any(not v for v in self.grid.values())):
            raise ValueError("every `grid` axis needs at least one value")
        if not self.seeds:
            raise ValueError("`seeds` is empty")
        if len(set(self.seeds)) != len(self.seeds):
            raise ValueError(f"`seeds` repeats a seed: {self.seeds}")
        return self


# Every study has these unless it defines its own. The generic quick preset only changes what any
# net can take (data, length, batch); a study's own `quick` can also shrink widths.
BUILTIN_PRESETS = {
    "paper": Preset(about="the papers' recipe, unchanged (CIFAR-10 runs of 64k iterations: GPU-days)"),
    "quick": Preset(
        about="generic CPU budget: 8x8 digits, 15 epochs of batch 64 at lr 0.05, 2 seeds",
        # The shipped studies' quick budget minus the widths (which depend on the family).
        overrides={"data": {"dataset": "digits"},
                   "optim": {"iters": None, "epochs": 15, "milestones": None, "batch_size": 64, "lr": 0.05,
                             "warmup_iters": 20},
                   "train": {"checkpoint_every": 0, "eval_every": "end"}},
        seeds=[0, 1],
    ),
}


# ---------------------------------------------------------------------------------------------
# The resolved plan


@dataclass(frozen=True)
class PlannedRow:
    index: int  # 1-based, the table's '#'
    label: str
    paper: PaperFigure
    spec: Spec  # the row's spec; each of its runs sets run.seed and run.out
    group: str | None = None  # Row.group


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


# ---------------------------------------------------------------------------------------------
# Finding and reading study files


def studies_dir() -> Path:
    return bundled.configs_dir() / "studies"  # looked up at each call: one place says where configs live


def shipped() -> list[str]:
    return sorted(p.stem for p in studies_dir().glob("*.yaml"))


def find(name: str) -> tuple[Path, str, str]:
    """(path, study name, what to pass back to the CLI) for a shipped name or a YAML path."""
    path = Path(name)
    if path.is_file():
        return path, path.stem, str(path.resolve())
    cand = studies_dir() / f"{name}.yaml"
    if path.suffix not in (".yaml", ".yml") and cand.is_file():
        return cand, name, name
    if path.suffix in (".yaml", ".yml"):
        raise UserError(f"{name}: no such study file; shipped studies: {', '.join(shipped())}")
    raise UserError(f"unknown study '{name}'; shipped studies: {', '.join(shipped())} (or give a PATH.yaml)")


def load(path: Path) -> StudyFile:
    tree = yamlio.load_file(path)
    if not isinstance(tree, dict):
        raise UserError(f"{path}: a study is a mapping (title, base, spec, seeds, rows or grid, presets)")
    try:
        return StudyFile.model_validate(tree)
    except ValidationError as err:
        raise UserError(one_line(err, str(path), StudyFile)) from None


# ---------------------------------------------------------------------------------------------
# Overrides: nested trees and dotted keys


def expand(overrides: dict[str, Any], source: str) -> dict:
    """{'model.shortcut.kind': 'scale', 'optim': {'lr': 0.05}} -> one nested spec tree."""
    out: dict = {}
    for key, value in overrides.items():
        if not isinstance(key, str) or not key:
            raise UserError(f"{source}: override keys are dotted spec keys, got {key!r}")
        if isinstance(value, dict):
            value = expand(value, source)
        nested: dict = {}
        try:
            spec_mod.set_dotted(nested, key, value)
        except UserError as exc:
            raise UserError(f"{source}: {exc.message.replace('--set ', '')}") from None
        out = _merge_strict(out, nested, source)
    return out


def _merge_strict(a: dict, b: dict, source: str, path: str = "") -> dict:
    out = dict(a)
    for key, value in b.items():
        here = f"{path}.{key}" if path else key
        if key in out and isinstance(out[key], dict) and isinstance(value, dict):
            out[key] = _merge_strict(out[key], value, source, here)
        elif key in out:
            raise UserError(f"{source}: '{here}' is given twice (as a dotted key and in a nested tree)")
        else:
            out[key] = value
    return out


def _label_value(value: Any) -> str:
    if isinstance(value, list):
        return "x".join(str(v) for v in value)
    return str(value)


def _rows(study: StudyFile) -> list[Row]:
    if study.rows is not None:
        return list(study.rows)
    keys = list(study.grid)
    rows = []
    for combo in itertools.product(*(study.grid[k] for k in keys)):
        label = ", ".join(f"{k.split('.')[-1]}={_label_value(v)}" for k, v in zip(keys, combo))
        rows.append(Row(label=label, overrides=dict(zip(keys, combo))))
    return rows


def slug(label: str) -> str:
    s = re.sub(r"[^A-Za-z0-9.+-]+", "-", label.lower()).strip("-.")
    return re.sub(r"-{2,}", "-", s)[:48] or "row"


def run_path(results: Path, row: PlannedRow, seed: int) -> Path:
    """RESULTS/03-constant-scaling-0.5-1-s2: the row number keeps `ls` in table order."""
    return results / f"{row.index:02d}-{slug(row.label)}-s{seed}"


def make_run(row: PlannedRow, seed: int, results: Path) -> PlannedRun:
    path = run_path(results, row, seed)
    run = row.spec.run.model_copy(update={"seed": seed, "out": str(path)})
    return PlannedRun(row=row, seed=seed, path=path, spec=row.spec.model_copy(update={"run": run}))


def plan(name: str, preset: str = "paper", results: str | Path | None = None, sets: list[str] = (),
         seeds: list[int] | None = None) -> Plan:
    """Read a study (shipped name or path) and resolve every (row, seed) into a validated spec."""
    path, study_name, source = find(name)
    study = load(path)
    presets = {**BUILTIN_PRESETS, **study.presets}
    if preset not in presets:
        raise UserError(f"{path}: unknown preset '{preset}'; valid: {', '.join(presets)}")
    chosen = presets[preset]

    base: dict = {}
    if study.base is not None:
        near = path.parent / study.base
        base_file = str(near) if near.is_file() else study.base
        base = spec_mod.load_tree(base_file)
    base = spec_mod.merge(base, expand(study.spec, f"{path}: spec"))
    preset_tree = expand(chosen.overrides, f"{path}: preset {preset}")
    set_tree = spec_mod.tree_of(None, sets=sets)

    labels: set[str] = set()
    planned: list[PlannedRow] = []
    for row in _rows(study):
        for name in row.only_in or ():
            if name not in presets:
                raise UserError(f"{path}: row '{row.label}': only_in names no preset '{name}'; valid: {', '.join(presets)}")
    chosen_rows = [row for row in _rows(study) if row.only_in is None or preset in row.only_in]
    for i, row in enumerate(chosen_rows, start=1):
        where = f"{path}: row {i} '{row.label}'"
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
        planned.append(PlannedRow(index=i, label=row.label, paper=row.paper, spec=spec, group=row.group))

    run_seeds = list(seeds) if seeds else list(chosen.seeds or study.seeds)
    out = Path(results) if results is not None else Path("runs") / "ablate" / f"{study_name}-{preset}"
    runs = [make_run(row, seed, out) for row in planned for seed in run_seeds]
    return Plan(name=study_name, title=study.title or study_name, preset=preset, preset_about=chosen.about,
                paper_metric=study.paper_metric,
                fail_above=chosen.fail_above if chosen.fail_above is not None else study.fail_above,
                source=source, results=out, seeds=run_seeds, rows=planned,
                runs=runs, metric=study.metric)
