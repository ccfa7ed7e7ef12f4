"""What a study table is made of: one result per run directory (SeedResult: its row, seed, status and
errors), a row's runs (RowStats), and a study's rows (StudyTable). results/report.py reads run
directories into these; study.py computes their statistics once (with evidence.py); table.py renders.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..runs.files import FINAL
from ..sweep.family import Family


@dataclass
class SeedResult:
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
    budget: int = 1  # a multiple of the preset's length (`resnet ablate --budgets`)
    group: str | None = None  # the study row's group: pairs are compared within it
    chance: float | None = None  # its dataset's chance error: what the run counts as if it diverged
    metric: str = "test_error"  # the summary.json field its row reports (the study's `metric`)

    @property
    def diverged(self) -> bool:
        """Diverged, or completed with no finite error (a NaN net)."""
        return self.status == "diverged" or (self.status == "completed" and not finite(self.test_error))

    def counted_as(self, metric: str) -> float | None:
        """As `counted`, for the training figures a claim may name: a diverged run's training error
        at chance, its training loss at a uniform guess's, ln(classes) (classes from the chance error,
        100 (1 - 1/classes)); None for a run not finished or a figure it did not record."""
        if metric not in ("train_loss", "train_error"):
            return self.counted()
        if self.diverged:
            if self.chance is None:
                return None
            return self.chance if metric == "train_error" else math.log(100.0 / (100.0 - self.chance))
        value = self.train_loss if metric == "train_loss" else self.train_error
        return value if self.status == "completed" and finite(value) else None

    def counted(self) -> float | None:
        """The error this run counts as in its row: the last epoch's where it completed; its dataset's
        chance error where it diverged (a failed run, never left out: leaving it out would compare a
        row on its survivors); None for a run not finished."""
        if self.diverged:
            return self.chance
        return self.test_error if self.status == "completed" else None


@dataclass
class RowStats:
    index: int
    row: str
    paper: float | str | None
    runs: list[SeedResult] = field(default_factory=list)
    group: str | None = None

    @property
    def errors(self) -> list[float]:
        """The seeds' errors as counted (SeedResult.counted): diverged runs at chance error."""
        return [v for r in self.runs if (v := r.counted()) is not None]

    @property
    def n(self) -> int:
        return len(self.errors)

    @property
    def diverged(self) -> int:
        """Runs counted at chance error: diverged, or completed with a NaN error."""
        return sum(r.diverged for r in self.runs)

    def values(self, metric: str = "error") -> dict[Any, float | None]:
        """seed -> the row's error (or `metric`: train_loss, train_error), as counted (None where the
        run gave none): what paired differences pair on."""
        return {r.seed: r.counted_as(metric) for r in self.runs}

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
    budget: int = 1
    family: Family | None = None  # the declared claims its verdicts come from (None: every paper pair)

    @property
    def fail_above(self) -> float | None:
        rules = [r.fail_above for row in self.rows for r in row.runs if r.fail_above is not None]
        return rules[0] if rules else None

    @property
    def dataset(self) -> str | None:
        names = sorted({r.dataset for row in self.rows for r in row.runs if r.dataset})
        return ", ".join(names) or None

    @property
    def metric(self) -> str:
        """The error the rows report (the study's `metric`): test_error unless the study says val_error."""
        return next((r.metric for row in self.rows for r in row.runs), "test_error")


def finite(x: Any) -> bool:
    return isinstance(x, (int, float)) and math.isfinite(x)
