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

    def key(self) -> tuple[str, str, str]:
        return (self.better, self.worse, self.metric)


@dataclass(frozen=True)
class Family:
    declared: bool  # False: the study declares no claims; every pair with a paper figure is the family
    members: tuple[Member, ...] = ()
    effect: float = 2.0  # the gap the study is sized for, in sd of one row's seeds
    file_sha256: str | None = None
    recorded: bool = False  # read back from a results directory (not the study file as it is now)
    source: str | None = field(default=None, compare=False)  # the study as `resnet ablate` takes it, where recorded
    note: str | None = field(default=None, compare=False)  # why this family and not another, where it matters

    @property
    def size(self) -> int:
        return len(self.members)

    def same_claims(self, other: Family) -> bool:
        return (self.declared, [m.key() for m in self.members]) == (other.declared, [m.key() for m in other.members])

    def record(self, study: str, preset: str, source: str) -> dict[str, Any]:
        return {"study": study, "preset": preset, "source": source, "declared": self.declared,
                "size": self.size, "effect": self.effect, "file_sha256": self.file_sha256,
                "claims": [asdict(m) for m in self.members]}


def file_sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def declared(study: StudyFile, all_labels: list[str], labels: list[str], shown: str,
             sha256: str | None = None) -> Family:
    """The family of one preset: `all_labels` are every row the study file has (in any preset or
    grid value), `labels` the rows this plan has. A claim naming a row the file does not have, or
    the error the study does not report, is one line."""
    if study.claims is None:
        return Family(declared=False, effect=study.effect, file_sha256=sha256)
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
            member = Member(better, worse, metric, claim.source)
            if member.key() in seen:
                raise UserError(f"{where}: '{better}' below '{worse}' in {metric} is declared twice")
            seen.add(member.key())
            if better in labels and worse in labels:
                members.append(member)
    return Family(declared=True, members=tuple(members), effect=study.effect, file_sha256=sha256)


def _from_record(record: dict[str, Any]) -> Family:
    return Family(declared=bool(record.get("declared")),
                  members=tuple(Member(**{k: m[k] for k in ("better", "worse", "metric", "source")})
                                for m in record.get("claims") or ()),
                  effect=float(record.get("effect") or 2.0), file_sha256=record.get("file_sha256"), recorded=True,
                  source=record.get("source"))


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
    stands (returned, with a note where the study file's claims now differ)."""
    old = read(results, study, preset)
    if old is not None:
        if not old.same_claims(family):
            return replace(old, note=changed_note(results, old, family))
        return old
    path = Path(results) / FILE
    path.parent.mkdir(parents=True, exist_ok=True)
    if path.exists():  # another study's family, or a damaged file: never overwritten
        raise UserError(f"{path}: holds no claims of {study} (preset {preset}); give this study its own --out")
    tmp = path.with_name(f".{FILE}.tmp")
    tmp.write_text(json.dumps(family.record(study, preset, source), indent=2) + "\n", encoding="utf-8")
    os.replace(tmp, path)
    return replace(family, recorded=True)


def changed_note(results: Path, recorded: Family, now: Family) -> str:
    return (f"the study file's claims ({now.size}) differ from those recorded in {Path(results) / FILE} when "
            f"these runs started ({recorded.size}): the recorded family decides")
