"""Study files: many runs of one experiment, described as data.

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

Instead of rows, a grid: one row per combination of its axes, each a dotted key with its values
or a name with named sets of overrides, labelled and placed by templates over the axes' names
(`resnet degrade`'s studies, configs/degrade/):

    grid:
      model.depth: [8, 26]
      net: {plain: {model.shortcut.kind: none}, residual: {}}
    label: "{net}-{depth}"                 # default: "depth=8, net=plain"
    run_dir: "runs/{net}-{depth}-seed{seed}"

Overrides are a nested spec tree, dotted keys, or both. A row's spec is built as
base <- spec <- preset overrides <- row overrides <- the row's own overrides for that preset
(`presets:` inside a row) <- --set items <- (run.seed, run.out), and validated once, so a bad row
fails with one line naming the row before anything trains. A preset changes the budget around the
rows (data, widths, length); what a row varies stays as the row says.

What the paper claims is declared beside the rows, before any run, and is the family the study's
verdict is decided by (sweep/family.py, results/verdicts.py); every other pair is exploratory:

    claims:
      - better: original (identity)        # a label or a list
        worse: [constant scaling 0.5 / 1]  # a label or a list; or `chain: [best, ..., worst]`
        metric: train_error                # default: the study's metric; or train_loss
        source: "He 2016b sec. 3.2"
        hypothesis: false                  # true: the paper's claim carried to another net or recipe
    listed:                                # what the paper says that the rule leaves untested, and why
      - rows: [original (identity), "shortcut-only gating, b_g -6"]
        says: "6.91 is much closer to the baseline"
        reason: "closeness, not an order"
    effect: 2.0                            # the gap the presets are sized for, in sd of a row's seeds

Which orderings are claims is decided by one rule from the papers alone (docs/ablate.md, "Writing
a study"): `claims` and `listed` together are everything the paper states between the study's rows.

Two presets exist for every study: `paper` (no changes: the papers' recipe) and a generic `quick`.
A study may define its own, replacing these.
"""

from __future__ import annotations

import itertools
import string
from pathlib import Path
from typing import Annotated, Any, ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from .. import spec as spec_mod
from ..spec import bundled, yamlio
from ..errors import UserError
from ..spec.messages import one_line
from .safe_path import component

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


# What a claim compares: the error the study reports (its `metric`), or how far training got, for the
# papers' optimisation claims (He 2016b sec. 3.2: the gated and 1x1 shortcuts reach higher training
# error; He 2016a Fig. 6: the deeper plain net's higher training error).
ClaimMetric = Literal["test_error", "val_error", "train_loss", "train_error"]


class Claim(_Strict):
    """An ordering the paper states in words, declared before the runs: each of `better` below each
    of `worse` (each a label or a list), or a `chain` of labels, best first (each below the next).
    The claims are the family Holm's adjustment runs over; every other pair is exploratory."""

    noun: ClassVar[str] = "a claim"
    better: str | list[str] | None = None
    worse: str | list[str] | None = None
    chain: list[str] | None = None
    metric: ClaimMetric | None = None  # None: the study's `metric`
    source: Annotated[str, Field(min_length=1)]  # where the paper says it: "He 2016b sec. 3, Table 1"
    # A paper's claim carried to another net, depth, dataset or recipe than the paper's (SkipInit on
    # ResNet-110, a cosine schedule, a ViT): the study's hypothesis, tested alike but never shown as
    # the paper's finding.
    hypothesis: bool = False

    @model_validator(mode="after")
    def _pair_or_chain(self) -> Claim:
        if self.chain is not None:
            if self.better is not None or self.worse is not None:
                raise ValueError("a claim is either `better` with `worse`, or a `chain`, not both")
            if len(self.chain) < 2:
                raise ValueError("a `chain` names at least two rows, best first")
        elif not self.better or not self.worse:
            raise ValueError("a claim needs `better` and `worse` (a label or a list), or a `chain` of labels")
        return self

    def pairs(self) -> list[tuple[str, str]]:
        """(better, worse) label pairs, in the order written."""
        if self.chain is not None:
            return list(zip(self.chain, self.chain[1:]))
        better = [self.better] if isinstance(self.better, str) else list(self.better)
        worse = [self.worse] if isinstance(self.worse, str) else list(self.worse)
        return [(b, w) for b in better for w in worse]


class Listed(_Strict):
    """Something the paper states between rows of the study that the rule does not test: a gap
    under its own noise, a pair it calls similar, an early-training remark with no early metric, an
    order that only follows by transitivity. Said in the file, so a reader sees the family whole."""

    noun: ClassVar[str] = "a listed statement"
    rows: Annotated[list[str], Field(min_length=1)]  # the rows it is about (labels)
    says: Annotated[str, Field(min_length=1)]  # what the paper says, in short
    reason: Annotated[str, Field(min_length=1)]  # why it is not tested: "gap 0.24, under the paper's noise"


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
    # One row per combination of the axes (the first varies slowest). An axis is a dotted spec key
    # with its values, or a name with named values, each a set of overrides:
    #     grid: {model.depth: [8, 26], net: {plain: {model.shortcut.kind: none}, residual: {}}}
    grid: dict[str, list[Any] | dict[str, dict[str, Any]]] | None = None
    # How a grid's rows are labelled and where their runs go, as templates over the axes' names
    # (the last part of a dotted key) and, for run_dir, {seed}: "{net}-{depth}" and
    # "runs/{net}-{depth}-seed{seed}". Default: "depth=8, net=plain" and RESULTS/01-depth-8-net-plain-s0.
    label: str | None = None
    run_dir: str | None = None
    presets: dict[str, Preset] = {}
    # The orderings the paper states, tested as one family (None: every pair with a paper figure is).
    claims: list[Claim] | None = None
    listed: list[Listed] = []
    # The gap the study is sized for, in sd of one row's seeds (results/power.py): the seeds a preset
    # needs to resolve it with 80% power are said before any run starts.
    effect: Annotated[float, Field(gt=0.0)] = 2.0

    @model_validator(mode="after")
    def _rows_or_grid(self) -> StudyFile:
        if (self.rows is None) == (self.grid is None):
            raise ValueError("a study has exactly one of `rows` (a list) and `grid` (axes)")
        if self.rows is not None and not self.rows:
            raise ValueError("`rows` is empty")
        if self.grid is not None and (not self.grid or any(not v for v in self.grid.values())):
            raise ValueError("every `grid` axis needs at least one value")
        if self.grid is None and (self.label or self.run_dir):
            raise ValueError("`label` and `run_dir` name a grid's rows; a study with `rows` labels each row")
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



# ---------------------------------------------------------------------------------------------
# A grid's rows


def _label_value(value: Any) -> str:
    if isinstance(value, list):
        return "x".join(str(v) for v in value)
    return str(value)


def _named(template: str) -> list[str]:
    return [f for _, f, _, _ in string.Formatter().parse(template) if f is not None]


def _fields(template: str, allowed: list[str], source: str, what: str) -> None:
    """A template names only the grid's axes (and, for run_dir, the seed): one line if not."""
    try:
        names = _named(template)
    except ValueError as exc:
        raise UserError(f"{source}: {what} '{template}': {exc}") from None
    for name in names:
        if name not in allowed:
            raise UserError(f"{source}: {what} '{template}' names '{{{name}}}'; valid: "
                            + ", ".join(f"{{{a}}}" for a in allowed))


def _axis(key: str, values: list[Any] | dict[str, dict[str, Any]], chosen: list[Any] | None,
          source: str) -> list[tuple[Any, dict[str, Any]]]:
    """(shown value, overrides) per value of one axis; `chosen` replaces a list axis's values or
    picks (and orders) a named axis's."""
    if isinstance(values, dict):
        names = list(values) if chosen is None else list(chosen)
        for name in names:
            if name not in values:
                raise UserError(f"{source}: the grid's {key} has no value '{name}'; valid: {', '.join(values)}")
        return [(name, values[name]) for name in names]
    return [(value, {key: value}) for value in (values if chosen is None else chosen)]


def rows_of(study: StudyFile, source: str, axes: dict[str, list[Any]] | None = None) -> list[tuple[Row, tuple, str | None]]:
    """The study's rows, each with its grid cells and its run_dir template ({seed} left to fill)."""
    if study.rows is not None:
        return [(row, (), None) for row in study.rows]
    axes = axes or {}
    unknown = sorted(set(axes) - set(study.grid))
    if unknown:
        raise UserError(f"{source}: the grid has no axis '{unknown[0]}'; axes: {', '.join(study.grid)}")
    keys = list(study.grid)
    names = [k.split(".")[-1] for k in keys]
    if len(set(names)) != len(names):
        raise UserError(f"{source}: two grid axes end in the same name ({', '.join(keys)}); labels could not tell them apart")
    if study.label:
        _fields(study.label, names, source, "label")
    if study.run_dir:
        _fields(study.run_dir, [*names, "seed"], source, "run_dir")
        if "{seed}" not in study.run_dir:
            raise UserError(f"{source}: run_dir '{study.run_dir}' needs {{seed}}: each seed is its own run directory")
        if Path(study.run_dir).is_absolute() or ".." in Path(study.run_dir).parts:
            raise UserError(f"{source}: run_dir '{study.run_dir}' is a path inside the results directory "
                            "(relative, without '..')")
    rows = []
    for combo in itertools.product(*(_axis(k, study.grid[k], axes.get(k), source) for k in keys)):
        cells = tuple((name, shown) for name, (shown, _) in zip(names, combo))
        values = {name: _label_value(shown) for name, shown in cells}
        label = (study.label.format(**values) if study.label
                 else ", ".join(f"{name}={value}" for name, value in values.items()))
        overrides: dict[str, Any] = {}
        for _, over in combo:
            overrides.update(over)
        run_dir = None
        if study.run_dir:
            # Each value the template takes becomes part of a path: one component, never '..' or '/'.
            for name in _named(study.run_dir):
                if name != "seed":
                    component(values[name], f"grid axis '{name}' value", source)
            run_dir = study.run_dir.format(**values, seed="{seed}")
        rows.append((Row(label=label, overrides=overrides), cells, run_dir))
    return rows


