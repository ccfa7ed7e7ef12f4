"""A study's declared claims as the Holm family its verdicts come from, fixed when its runs start.

A study file's `claims:` (study_file.Claim) expand into members, one (better, worse, metric) pair
of row labels each. The family of a preset is the members whose two rows that preset has (a row
`only_in: [paper]` takes its claims with it). A study that declares no claims keeps every pair of
rows with a paper figure as its family (a user's own study), decided as before.

The family travels with the runs: `resnet ablate` writes it into the results directory as
claims.json before the first run starts (members, size, the study file's sha256) and never rewrites
it, and `resnet report` decides from the recorded family. So editing the claims after looking at the
results cannot change an old study's verdicts; a report that finds the file's claims changed says
so in one line.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

from ..errors import UserError
from .study_file import StudyFile

FILE = "claims.json"


@dataclass(frozen=True)
class Member:
    better: str  # row label: lower in the metric, the paper says
    worse: str
    metric: str  # a summary.json field: test_error, val_error, train_loss, train_error
    source: str  # where the paper says it
    hypothesis: bool = False  # the paper's claim carried to another net or recipe: the study's, not the paper's

    def key(self) -> tuple[str, str, str]:
        return (self.better, self.worse, self.metric)


@dataclass(frozen=True)
class Note:
    """A statement of the paper between rows of this preset that the rule lists but does not test."""
    rows: tuple[str, ...]
    says: str
    reason: str


@dataclass(frozen=True)
class Family:
    declared: bool  # False: the study declares no claims; every pair with a paper figure is the family
    members: tuple[Member, ...] = ()
    effect: float = 2.0  # the gap the study is sized for, in sd of one row's seeds
    file_sha256: str | None = None
    recorded: bool = False  # read back from a results directory (not the study file as it is now)
    source: str | None = field(default=None, compare=False)  # the study as `resnet ablate` takes it, where recorded
    note: str | None = field(default=None, compare=False)  # why this family and not another, where it matters
    listed: tuple[Note, ...] = field(default=(), compare=False)  # stated, not tested (study_file.Listed)
    # The seeds the family was registered for (None: not recorded, an older results directory): a
    # decision is taken at these, so seeds added later cannot move it unnoticed.
    seeds: tuple[int, ...] | None = field(default=None, compare=False)

    @property
    def size(self) -> int:
        return len(self.members)

    def same_claims(self, other: Family) -> bool:
        return (self.declared, [m.key() for m in self.members]) == (other.declared, [m.key() for m in other.members])

    def record(self, study: str, preset: str, source: str) -> dict[str, Any]:
        seeds = None if self.seeds is None else list(self.seeds)
        return {"study": study, "preset": preset, "source": source, "declared": self.declared,
                "size": self.size, "effect": self.effect, "file_sha256": self.file_sha256,
                "seeds": seeds, "n": None if seeds is None else len(seeds),
                "claims": [asdict(m) for m in self.members],
                "listed": [{"rows": list(n.rows), "says": n.says, "reason": n.reason} for n in self.listed]}


def file_sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def declared(study: StudyFile, all_labels: list[str], labels: list[str], shown: str,
             sha256: str | None = None, seeds: list[int] | None = None) -> Family:
    """The family of one preset: `all_labels` are every row the study file has (in any preset or
    grid value), `labels` the rows this plan has. A claim naming a row the file does not have, or
    the error the study does not report, is one line. A claim (or listed statement) joins a
    preset's family only where the preset has every row it names."""
    listed = []
    for i, item in enumerate(study.listed, start=1):
        for label in item.rows:
            if label not in all_labels:
                raise UserError(f"{shown}: listed {i} ({item.says}): no row '{label}'; rows: " + "; ".join(all_labels))
        if all(label in labels for label in item.rows):
            listed.append(Note(tuple(item.rows), item.says, item.reason))
    seeds_t = None if seeds is None else tuple(seeds)
    if study.claims is None:
        return Family(declared=False, effect=study.effect, file_sha256=sha256, listed=tuple(listed), seeds=seeds_t)
    members: list[Member] = []
    seen: set[tuple[str, str, str]] = set()
    for i, claim in enumerate(study.claims, start=1):
        metric = claim.metric or study.metric
        where = f"{shown}: claim {i} ({claim.source})"
        if metric in ("test_error", "val_error") and metric != study.metric:
            raise UserError(f"{where}: metric {metric}, but the study reports {study.metric}; "
                            f"valid: {study.metric}, train_loss, train_error")
        for better, worse in claim.pairs():
            for label in (better, worse):
                if label not in all_labels:
                    raise UserError(f"{where}: no row '{label}'; rows: " + "; ".join(all_labels))
            if better == worse:
                raise UserError(f"{where}: '{better}' is compared with itself")
            member = Member(better, worse, metric, claim.source, claim.hypothesis)
            if member.key() in seen:
                raise UserError(f"{where}: '{better}' below '{worse}' in {metric} is declared twice")
            seen.add(member.key())
            if better in labels and worse in labels:
                members.append(member)
    return Family(declared=True, members=tuple(members), effect=study.effect, file_sha256=sha256,
                  listed=tuple(listed), seeds=seeds_t)


def _from_record(record: dict[str, Any]) -> Family:
    seeds = record.get("seeds")  # absent in a directory recorded before seeds were
    return Family(declared=bool(record.get("declared")),
                  members=tuple(Member(**{k: m[k] for k in ("better", "worse", "metric", "source")},
                                       hypothesis=bool(m.get("hypothesis", False)))
                                for m in record.get("claims") or ()),
                  effect=float(record.get("effect") or 2.0), file_sha256=record.get("file_sha256"), recorded=True,
                  source=record.get("source"),
                  listed=tuple(Note(tuple(n["rows"]), n["says"], n["reason"]) for n in record.get("listed") or ()),
                  seeds=None if seeds is None else tuple(int(s) for s in seeds))


def read(results: Path, study: str, preset: str) -> Family | None:
    """The family recorded in a results directory for this study and preset (None: none recorded,
    or a file that is not one: the caller says so)."""
    path = Path(results) / FILE
    try:
        record = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(record, dict) or (record.get("study"), record.get("preset")) != (study, preset):
        return None
    try:
        return _from_record(record)
    except (TypeError, KeyError, ValueError):
        return None


def record_once(results: Path, family: Family, study: str, preset: str, source: str) -> Family:
    """Write the family into `results` before its first run; where one is recorded already, that one
    stands (returned, with a note where the study file, its claims or the seeds now differ).

    Safe under any number of concurrent starts (`--list | parallel`): each process writes its own
    temporary file and links it into place, which fails for all but the first; the others read the
    file the first one wrote, whole (a link is atomic)."""
    old = read(results, study, preset)
    if old is None:
        path = Path(results) / FILE
        path.parent.mkdir(parents=True, exist_ok=True)
        # No check that the file is absent first: another process may link it between that check and
        # ours. The link itself never overwrites; a file already there is read below, and one that
        # holds another study's family (or is damaged) is refused there.
        fd, tmp = tempfile.mkstemp(prefix=f".{FILE}.", suffix=".tmp", dir=path.parent)
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as f:
                f.write(json.dumps(family.record(study, preset, source), indent=2) + "\n")
                f.flush()
                os.fsync(f.fileno())
            os.link(tmp, path)  # exclusive: FileExistsError where another process was first
        except FileExistsError:
            old = read(results, study, preset)
            if old is None:
                raise UserError(f"{path}: holds no claims of {study} (preset {preset}); "
                                "give this study its own --out") from None
        finally:
            os.unlink(tmp)
        if old is None:
            return replace(family, recorded=True)
    note = differences(results, old, family, family.seeds)
    return replace(old, note=note) if note else old


def changed_note(results: Path, recorded: Family, now: Family) -> str:
    return (f"the study file's claims ({now.size}) differ from those recorded in {Path(results) / FILE} when "
            f"these runs started ({recorded.size}): the recorded family decides")


def differences(results: Path, recorded: Family, now: Family | None, seeds: Iterable[int] | None,
                all_seeds: bool = False) -> str | None:
    """One line on what changed since the family was recorded, or None: the study file's claims
    (the recorded ones decide), the file alone (same claims, another sha256), seeds beyond the
    recorded ones (the claims are decided at the recorded seeds, unless `all_seeds` asks for every
    seed found)."""
    parts = []
    if now is not None and not recorded.same_claims(now):
        parts.append(changed_note(results, recorded, now))
    elif (now is not None and recorded.file_sha256 and now.file_sha256
          and recorded.file_sha256 != now.file_sha256):
        parts.append(f"the study file changed after {Path(results) / FILE} was recorded (sha256 "
                     f"{recorded.file_sha256[:12]} then, {now.file_sha256[:12]} now); its claims are the same")
    if recorded.seeds is not None and seeds is not None:
        added = sorted(set(seeds) - set(recorded.seeds))
        if added:
            where = (f"--all-seeds decides them at every seed found (n = {len(set(seeds))})" if all_seeds else
                     f"the claims are decided at the recorded seeds ({_seed_range(recorded.seeds)}; "
                     "report --all-seeds decides at every seed found)")
            parts.append(f"seeds {', '.join(map(str, added))} were added after the claims were recorded at "
                         f"n = {len(recorded.seeds)}: {where}")
    return "; ".join(parts) or None


def _seed_range(seeds: Iterable[int]) -> str:
    s = sorted(seeds)
    return f"{s[0]}..{s[-1]}" if s == list(range(s[0], s[-1] + 1)) and len(s) > 2 else ", ".join(map(str, s))
