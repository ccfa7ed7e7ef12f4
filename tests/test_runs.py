"""The run directory's one reader (resnet_cli/runs/reader.py): what each state of a directory reads as,
made by hand here (the files written as a run, a sweep or a SLURM task would write them), and the
rule that no module outside runs/ spells a run-directory file name."""

from __future__ import annotations

import ast
import fcntl
import json
import os
from pathlib import Path

import pytest

from resnet_cli.runs.reader import RunRecord, find

PACKAGE = Path(__file__).resolve().parent.parent / "resnet_cli"
# Written out here, not imported: the test holds the reader to the names the docs give.
NAMES = {"spec.yaml", "meta.json", "metrics.jsonl", "checkpoint.pt", "summary.json", "study.json", "probe.json",
         "slurm.json", "ablate.log", ".lock"}


def _write(path: Path, name: str, obj) -> None:
    path.mkdir(parents=True, exist_ok=True)
    (path / name).write_text(obj if isinstance(obj, str) else json.dumps(obj))


SPEC = "model: {depth: 8}\n"


@pytest.mark.parametrize("files, status", [
    ({}, None),  # not a run
    ({"study.json": {"study": "s", "row": "r", "seed": 0}}, "pending"),  # planned, not started
    ({"spec.yaml": SPEC}, "unfinished"),  # started, no summary
    ({"spec.yaml": SPEC, "summary.json": {"status": "interrupted"}}, "unfinished"),  # stopped on a signal
    ({"spec.yaml": SPEC, "summary.json": {"status": "completed"}}, "completed"),
    ({"spec.yaml": SPEC, "summary.json": {"status": "diverged"}}, "diverged"),
    ({"spec.yaml": SPEC, "summary.json": "{\"status\": \"compl"}, "unfinished"),  # cut mid-write
    ({"spec.yaml": SPEC, "slurm.json": {"state": "failed", "job": "7_1", "message": "oom", "log": "l"}}, "error"),
    ({"spec.yaml": SPEC, "summary.json": {"status": "completed"}, "slurm.json": {"state": "failed"}}, "completed"),
])
def test_status_from_the_files_alone(tmp_path, files, status):
    run = tmp_path / "run"
    run.mkdir()
    for name, obj in files.items():
        _write(run, name, obj)
    rec = RunRecord.read(run)
    assert rec.is_run == (status is not None)
    if status is not None:
        assert rec.status == status
        assert rec.finished == (status in ("completed", "diverged"))
    if status == "error":
        assert rec.task_message == "task 7_1 failed: oom; log: l"


def test_a_held_lock_is_a_running_run_and_a_dead_holders_is_not(tmp_path):
    run = tmp_path / "run"
    _write(run, "spec.yaml", SPEC)
    fd = os.open(run / ".lock", os.O_RDWR | os.O_CREAT)
    ready_r, ready_w = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child holds the lock, as a training process would, until it is killed
        fcntl.flock(fd, fcntl.LOCK_EX)
        os.write(ready_w, b"x")
        os.pause()
        os._exit(0)
    os.close(fd)
    try:
        assert os.read(ready_r, 1) == b"x"
        assert RunRecord.read(run).status == "running"
    finally:
        os.kill(pid, 9)
        os.waitpid(pid, 0)
    assert (run / ".lock").exists() and RunRecord.read(run).status == "unfinished"


def test_spec_tree_reads_an_earlier_versions_spec_with_todays_defaults(tmp_path):
    run = tmp_path / "run"
    _write(run, "spec.yaml", "model: {depth: 20}\nrun: {seed: 3}\n")
    tree = RunRecord.read(run).spec_tree
    assert tree["model"]["depth"] == 20 and tree["run"]["seed"] == 3
    assert tree["model"]["shortcut"]["kind"] == "identity"  # a default the file never wrote (He 2016a)
    assert RunRecord.read(run).spec_written == {"model": {"depth": 20}, "run": {"seed": 3}}


def test_metrics_leave_out_a_line_cut_by_a_kill(tmp_path):
    run = tmp_path / "run"
    _write(run, "metrics.jsonl", '{"iter": 1}\n{"iter": 2}\n{"it')
    assert [r["iter"] for r in RunRecord.read(run).metrics()] == [1, 2]
    assert RunRecord.read(run).last_metrics() == {"iter": 2}


def test_find_gives_every_run_directory_below_a_root_once(tmp_path):
    _write(tmp_path / "a", "spec.yaml", SPEC)
    _write(tmp_path / "a", "study.json", {})
    _write(tmp_path / "b" / "c", "study.json", {})
    _write(tmp_path / "d", "notes.txt", "")
    assert find(tmp_path) == [tmp_path / "a", tmp_path / "b" / "c"]


def _file_name_literals(root: Path) -> list[str]:
    """'module:line name' for each string constant (docstrings aside) that is a run-directory file name."""
    out = []
    for path in sorted(root.rglob("*.py")):
        tree = ast.parse(path.read_text(), str(path))
        docstrings = {id(n.body[0].value) for n in ast.walk(tree)
                      if isinstance(n, (ast.Module, ast.FunctionDef, ast.ClassDef, ast.AsyncFunctionDef))
                      and n.body and isinstance(n.body[0], ast.Expr) and isinstance(n.body[0].value, ast.Constant)}
        for node in ast.walk(tree):
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings:
                if node.value in NAMES:
                    out.append(f"{path.relative_to(root.parent)}:{node.lineno} {node.value}")
    return out


def test_no_run_directory_file_name_is_spelled_outside_runs():
    outside = [hit for hit in _file_name_literals(PACKAGE) if not hit.startswith("resnet_cli/runs/")]
    assert not outside, f"file names of the run directory outside resnet_cli/runs/files.py: {outside}"
    inside = _file_name_literals(PACKAGE / "runs")
    assert {h.split()[-1] for h in inside} == NAMES  # the checker sees them where they are


def test_the_checker_finds_a_planted_literal(tmp_path):
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "m.py").write_text('"""summary.json in a docstring is prose."""\n'
                                           'def f(p):\n    return p / "summary.json"\n')
    assert _file_name_literals(tmp_path / "pkg") == ["pkg/m.py:3 summary.json"]


def test_report_reads_run_directories_without_the_slurm_launcher():
    """A run's SLURM task state is read by runs/reader.py; the study report needs nothing of the launcher."""
    from test_structure import import_graph

    graph = import_graph(PACKAGE)
    assert "resnet_cli.runs.reader" in graph["resnet_cli.results.report"]
    assert "resnet_cli.sweep.slurm" not in graph["resnet_cli.results.report"]
