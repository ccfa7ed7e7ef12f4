"""A study table's statistics are computed once (resnet_cli/results/study.py) and rendered by code that
computes none: counted here by wrapping the two statistics entry points, evidence.describe (one row)
and verdicts.compare (the study's claims, pairs and tau), while `resnet report` renders a table on a
terminal and as JSON lines, and while a sweep's live table follows its events."""

from __future__ import annotations

import io
from collections import Counter

import pytest
from typer.testing import CliRunner

from resnet_cli import output
from resnet_cli.cli import app
from resnet_cli.results import evidence, verdicts

from test_ablate import TINY
from test_fidelity import _write_run

ROWS = {1: (10.0, 11.0, 12.0), 2: (14.0, 15.0, 13.0), 3: (30.0, 25.0, 28.0), 4: (9.0, 9.5, 8.0)}


@pytest.fixture
def counted(monkeypatch):
    calls: Counter = Counter()
    for module, name in ((evidence, "describe"), (verdicts, "compare")):
        real = getattr(module, name)

        def wrapper(*args, _real=real, _name=name, **kwargs):
            calls[_name] += 1
            return _real(*args, **kwargs)

        monkeypatch.setattr(module, name, wrapper)
    return calls


@pytest.mark.parametrize("fmt", [output.Format.TABLE, output.Format.JSON])
def test_one_statistics_pass_per_table(tmp_path, monkeypatch, counted, fmt):
    for study in ("a", "b"):  # two tables
        for index, errors in ROWS.items():
            for seed, err in enumerate(errors):
                _write_run(tmp_path / study, index, f"row {index}", seed, "completed", err, 20.0, paper=float(index))
        for path in (tmp_path / study).glob("*/study.json"):
            path.write_text(path.read_text().replace('"hand"', f'"{study}"'))
    monkeypatch.setattr(output, "choose", lambda json_flag, asked=None: fmt)
    r = CliRunner().invoke(app, ["report", str(tmp_path)])
    assert r.exit_code == 0, r.output
    assert "row 4" in r.stdout  # it did render
    assert counted == {"describe": 2 * len(ROWS), "compare": 2}  # one row once, one table once


def test_the_live_table_recomputes_only_the_row_an_event_changed(in_tmp, counted):
    from rich.console import Console

    from resnet_cli.commands.ablate import _Progress
    from resnet_cli.sweep import plan as study_mod

    (in_tmp / "tiny.yaml").write_text(TINY)
    plan = study_mod.plan(str(in_tmp / "tiny.yaml"), results=in_tmp / "res")
    progress = _Progress(plan, Console(file=io.StringIO()))
    progress.table()
    assert counted == {"describe": len(plan.rows)}  # the live table has no pairs: they need every seed
    progress(plan.runs[0], None)  # the first row's first seed starts
    progress.table()
    assert counted == {"describe": len(plan.rows) + 1}
    progress.table()  # nothing happened since
    assert counted == {"describe": len(plan.rows) + 1}
