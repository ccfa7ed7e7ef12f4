"""The degradation problem's grid as a study plan (He 2016a sec. 4.2 and Fig. 6; the digits
experiment of the "Residual Connection" article).

Plain and residual twins (the same layers and parameters; only `model.shortcut.kind` differs) at
several depths over several seeds. The grid is a study (sweep/study_file.py): configs/degrade/*.yaml
cross `model.depth` with the two twins (a named axis `net`: plain sets no shortcut, residual keeps
the spec's), one row per (depth, net), one run directory per seed, OUT/runs/<net>-<depth>-seed<seed>,
run by the sweep engine of `resnet ablate` (sweep/engine.py: in this process or on `--jobs` workers;
finished runs reused, a run cut off resumed from its checkpoint, a directory holding another spec
refused). Any spec file serves as the base of the same grid. Each run's spec asks for the `degrade`
probe (train.probes), which writes the step-1 gradient norm and the curve into the run directory.
Its runs' records are read by runs/degrade_records.py, its summaries computed by results/.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from .. import spec as spec_mod
from ..errors import UserError
from ..runs.degrade_records import RUN_DIRS, load_record
from ..runs.reader import RunRecord, legacy_probes
from ..runs.writer import make_dir
from ..spec.messages import one_line
from ..spec.seeds import text as seeds_text
from . import asked as asked_mod
from . import engine as sweep
from . import plan as study_mod
from . import study_file

NETS = ("plain", "residual")  # the twins, as the grid's `net` axis names them
DEFAULT_CONFIG = "degrade/digits-8-26"
# A degrade study's grid (configs/degrade/*.yaml): the depth, then the twin, so rows read
# plain-8, residual-8, plain-26, ...; its runs keep the names earlier versions gave them, so an
# output directory of theirs is reused.
AXES = ("model.depth", "net")
LABEL = "{net}-{depth}"
RUN_DIR = f"{RUN_DIRS}/{{net}}-{{depth}}-seed{{seed}}"

class Section(BaseModel):
    """The `degrade:` section of a degrade config; everything else in the file is a spec."""

    model_config = ConfigDict(extra="forbid", strict=True)
    noun: ClassVar[str] = "degrade"  # for "valid keys in degrade" (spec/messages.py)
    depths: list[int] = Field(default_factory=lambda: [8, 26], min_length=1)
    seeds: Annotated[int, Field(ge=1)] | list[Annotated[int, Field(ge=0)]] = 10  # a count (0..n-1) or a list
    nets: list[Literal["plain", "residual"]] = Field(default_factory=lambda: list(NETS), min_length=1)


@dataclass
class Plan:
    """What to train: the twins' shared spec tree, the depths, seeds and nets chosen, and the
    output directory; `study` is the grid as the sweep engine runs it: one row per (depth, net),
    labelled `<net>-<depth>`, one run per seed in OUT/runs/<net>-<depth>-seed<seed>."""

    base: dict
    depths: list[int]
    seeds: list[int]
    nets: list[str]
    source: str
    out: Path
    study: study_mod.Plan


def _section(raw: Any, source: str) -> Section:
    if raw is None:
        raw = {}
    if not isinstance(raw, dict):
        raise UserError(f"{source}: 'degrade' is a mapping (depths, seeds, nets)")
    try:
        return Section.model_validate(raw)
    except ValidationError as err:
        raise UserError(one_line(err, source, Section, prefix=("degrade",))) from None


def parse_depths(items: list[str]) -> list[int]:
    """'8,26' or repeated --depths 8 --depths 26."""
    out: list[int] = []
    for item in items:
        for part in str(item).split(","):
            if part.strip():
                try:
                    out.append(int(part))
                except ValueError:
                    raise UserError(f"--depths {item}: '{part}' is not an integer depth") from None
    if not out:
        raise UserError("--depths: give at least one depth, e.g. --depths 8,26")
    return out


def _is_study(tree: dict) -> bool:
    return "grid" in tree or "rows" in tree  # no spec has either key


def _as_study(tree: dict, source: str) -> study_file.StudyFile:
    """A spec file as a degrade study: its `degrade:` section (if any) gives the axes and seeds;
    the plain twin has no shortcut, the residual one the base's (so a user can set plain against,
    say, a gated net), identity where the base has none. Every run carries the degrade probe
    (train.probes), which measures and changes nothing the run computes."""
    tree = dict(tree)
    section = _section(tree.pop("degrade", None), source)
    kind = ((tree.get("model") or {}).get("shortcut") or {}).get("kind", "identity")
    probes = (tree.get("train") or {}).get("probes") or []
    tree = spec_mod.tree_of(tree, [("train.probes", [*probes, *(["degrade"] if "degrade" not in probes else [])])])
    residual = {"model.shortcut.kind": "identity"} if kind == "none" else {}
    seeds = list(range(section.seeds)) if isinstance(section.seeds, int) else list(section.seeds)
    nets = {"plain": {"model.shortcut.kind": "none"}, "residual": residual}
    return study_file.StudyFile(spec=tree, seeds=seeds, label=LABEL, run_dir=RUN_DIR,
                               grid={"model.depth": list(section.depths), "net": {n: nets[n] for n in section.nets}})


def _read(name: str) -> tuple[Path | None, study_file.StudyFile]:
    """A degrade study file, or any spec file as one (`_as_study`)."""
    tree = spec_mod.load_tree(name)
    if not _is_study(tree):
        return None, _as_study(tree, name)
    path = spec_mod.find_spec_file(name)
    return path, study_file.load(path)


def base_of(name: str) -> dict:
    """The spec tree the twins share, for a degrade study or any spec file."""
    path, study = _read(name)
    return study_mod.base_tree(study, path or Path(name), name)


def make_plan(spec_file: str | None, *, depths: list[int] | None = None, seeds: list[int] | None = None,
              nets: list[str] | None = None, overrides: list[tuple[str, Any]] = (), sets: list[str] = (),
              out: str | Path | None = None) -> Plan:
    """The grid of a degrade study (default: the digits experiment) or of any spec file as the base,
    with the flags: --depths and --nets pick the axes' values; --seeds the seeds; the length, data
    and --set flags change the shared spec, so both twins take them and only the shortcut differs.
    Every row's spec is validated here, before anything trains."""
    name = spec_file or DEFAULT_CONFIG
    path, study = _read(name)
    if list(study.grid or {}) != list(AXES) or not isinstance(study.grid["net"], dict):
        raise UserError(f"{name}: a degrade study's grid has the axes {' and '.join(AXES)} (in that order; "
                        f"net names its twins: {', '.join(NETS)})")
    shipped = study_mod.base_tree(study, path or Path(name), name)
    base = spec_mod.tree_of(shipped, overrides, sets)
    study = study.model_copy(update={"base": None, "spec": base})
    axes: dict[str, list[Any]] = {}
    if depths:
        axes["model.depth"] = list(dict.fromkeys(depths))
    if nets:
        axes["net"] = list(nets)
    results = Path(out) if out else default_out(name, asked_mod.changed(shipped, base))
    sp = study_mod.resolve(study, path or Path(name), "degrade", name, results=results, seeds=seeds, axes=axes,
                           shown=name)
    for row in sp.rows:
        cells = dict(row.cells)
        if (cells["net"] == "plain") != (row.spec.model.shortcut.kind == "none"):
            raise UserError(f"{name}: the {cells['net']} twin at depth {cells['depth']} has shortcut "
                            f"'{row.spec.model.shortcut.kind}'; plain is shortcut none, residual any other")
    sp = dataclasses.replace(sp, title=f"degradation: plain vs residual ({name})", preset=name, preset_about="")
    return Plan(base=base, depths=list(dict.fromkeys(dict(r.cells)["depth"] for r in sp.rows)), seeds=sp.seeds,
                nets=list(dict.fromkeys(dict(r.cells)["net"] for r in sp.rows)), source=name, out=results, study=sp)


def default_out(name: str, recipe: list[str] = ()) -> Path:
    """runs/degrade/<config> for a grid as its config has it, so the same command resumes and a
    finished grid is read back, not trained again (`make demo` fills the default one). Depths,
    nets and seeds only pick runs (each has its own directory), so they share the folder; a changed
    recipe (`recipe`: the keys --epochs, --lr, --set ... change, asked.changed) gets a folder of its
    own (sweep/asked.py)."""
    stem = name.removesuffix(".yaml").removesuffix(".yml").removeprefix("degrade/")
    return Path("runs") / "degrade" / (study_mod.slug(stem) + asked_mod.folder_suffix(list(recipe)))


def twin(plan: Plan, net: str, depth: int, seed: int):
    """The spec of one twin at one seed (its run.out left as the row's)."""
    for row in plan.study.rows:
        if dict(row.cells) == {"depth": depth, "net": net}:
            return row.spec.model_copy(update={"run": row.spec.run.model_copy(update={"seed": seed})})
    raise KeyError((net, depth))


def adopt(sp: study_mod.Plan) -> None:
    """A finished run an earlier version left (no study.json) joins the study, so `resnet report`
    groups it with the rest; one holding another spec is left for the sweep to refuse."""
    for run in sp.runs:
        rec = RunRecord.read(run.path)
        if rec.finished and rec.study is None:
            try:
                sweep.check_reusable(run)
            except UserError:
                continue
            sweep.write_study_json(sp, run)


def only(plan: Plan, key: str) -> tuple[dict[str, Any] | None, sweep.Outcome]:
    """One run of the grid, ROW:SEED as `--list` prints it: trained (or resumed, or reused) here."""
    sp = plan.study
    run = sp.find(key)
    if run.key not in {r.key for r in sp.runs}:
        raise UserError(f"--only {key}: no seed {run.seed} in this grid; seeds: {', '.join(map(str, plan.seeds))}")
    make_dir(plan.out)
    outcome = sweep.run_one(sp, run)
    return load_record(run.path, plan.out, legacy_probes(plan.out)), outcome


def train(plan: Plan, jobs: int | None = 1, notify: sweep.Notify | None = None):
    """Train every unfinished run of the grid (sweep.execute: in this process, or on `jobs` workers;
    None: one per free GPU or CPU core); the sweep's result (outcomes, signal). A run that cannot
    start stops the grid with its own exit status (4: locked by another process)."""
    sp = plan.study
    make_dir(plan.out)
    adopt(sp)
    codes: dict[str, int] = {}

    def seen(run: study_mod.PlannedRun, outcome: sweep.Outcome | None) -> None:
        if outcome is not None:
            codes[run.key] = outcome.code
        if notify:
            notify(run, outcome)

    try:
        return sweep.execute(sp, jobs=jobs, notify=seen)
    except sweep.SweepStopped as exc:
        raise UserError(exc.message, code=codes.get(exc.run.key) or exc.code) from None


def parse_nets(nets: str | None) -> list[str] | None:
    if nets is None:
        return None
    names = [n.strip() for n in nets.split(",") if n.strip()]
    if not names or any(n not in NETS for n in names):
        raise UserError(f"--nets {nets}: valid names are {', '.join(NETS)}")
    return names


def replay_args(spec_file, plan, epochs, iters, flags: dict[str, Any], sets: list[str]) -> list[str]:
    """The flags that rebuild this plan, for the command lines --list prints."""
    args = [spec_file] if spec_file else []
    args += ["--depths", ",".join(map(str, plan.depths)), "--seeds", seeds_text(plan.seeds),
             "--nets", ",".join(plan.nets)]
    for name, value in (("epochs", epochs), ("iters", iters), *flags.items()):
        if value is not None:
            args += [f"--{name.replace('_', '-')}", str(value)]
    for item in sets:
        args += ["--set", item]
    return args


def key_of(plan: Plan, record: dict[str, Any]) -> str:
    """ROW:SEED of a record: rows are (depth, net) in plan order, numbered from 1."""
    index = plan.depths.index(record["depth"]) * len(plan.nets) + plan.nets.index(record["net"]) + 1
    return f"{index}:{record['seed']}"


def length_overrides(spec_file: str | None, epochs: int | None, iters: int | None) -> list[tuple[str, Any]]:
    """--epochs/--iters change the length only: a base without lr steps (milestones: [], the article's
    digits recipe) keeps none; otherwise the steps move to 50%/75% of the new length."""
    if epochs is not None and iters is not None:
        raise UserError("--epochs and --iters are exclusive: give one length")
    if epochs is None and iters is None:
        return []
    base = base_of(spec_file or DEFAULT_CONFIG).get("optim") or {}
    milestones = [] if base.get("milestones") == [] else None
    if epochs is not None:
        return [("optim.epochs", epochs), ("optim.iters", None), ("optim.milestones", milestones)]
    return [("optim.iters", iters), ("optim.epochs", None), ("optim.milestones", milestones)]
