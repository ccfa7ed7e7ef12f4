"""The machine's other refusals (issue 78), each as one line and exit 5: a read-only file system and
permission denied at a run's write, memory running out in a training step, and a full disk when
`resnet degrade` writes its results; the line names the file, what went wrong and what to do, and
the rerun of the same command finishes the work (the figures are those of a run never refused)."""

import errno
import json
import os
from pathlib import Path

import pytest

from resnet_cli import errors

from invoking import invoke

TINY = ["digits/residual8", "--set", "model.widths=[4]", "--epochs", "2", "--threads", "1"]


def refuse_at(monkeypatch, name: str, code: int) -> dict:
    """The first write-opening of a path holding `name` fails with errno `code`, as the kernel says it."""
    import builtins

    real = builtins.open
    seen = {"hit": 0}

    def fake(file, mode="r", *a, **k):
        if isinstance(file, (str, os.PathLike)) and name in os.fspath(file) and set(mode) & set("wax"):
            seen["hit"] += 1
            if seen["hit"] == 1:
                raise OSError(code, os.strerror(code), os.fspath(file))
        return real(file, mode, *a, **k)

    monkeypatch.setattr(builtins, "open", fake)
    return seen


def one_error_line(result) -> str:
    lines = [line for line in result.output.splitlines() if line.startswith("resnet: error:")]
    assert len(lines) == 1 and "Traceback" not in result.output, result.output
    return lines[0]


@pytest.mark.parametrize("code, said", [
    (errno.EROFS, "is a read-only file system while writing"),
    (errno.EACCES, "permission denied while writing"),
    (errno.EPERM, "permission denied while writing"),
])
def test_a_refused_write_of_a_runs_summary_is_one_line_and_the_rerun_finishes(in_tmp, monkeypatch, code, said):
    with monkeypatch.context() as m:
        seen = refuse_at(m, "summary.json", code)
        res = invoke("train", *TINY, "--out", "run")
    assert seen["hit"] == 1 and res.exit_code == errors.RESOURCES == 5
    line = one_error_line(res)
    # the exact command that resumes it, as train names it
    assert said in line and str(Path("run") / "summary.json") in line and "resume with: resnet train --resume run" in line
    assert not (in_tmp / "run" / "summary.json").exists()
    again = invoke("train", "--resume", "run")  # the command the line names
    assert again.exit_code == 0, again.output
    assert json.loads((in_tmp / "run" / "summary.json").read_text())["status"] == "completed"


def test_memory_running_out_in_a_step_is_one_line_naming_what_to_do(in_tmp, monkeypatch):
    from resnet_cli.training import trainer

    def no_memory(self, x, y):
        raise MemoryError()

    monkeypatch.setattr(trainer.Trainer, "_step", no_memory)
    res = invoke("train", *TINY, "--out", "run")
    assert res.exit_code == 5
    line = one_error_line(res)
    assert "out of memory" in line and "smaller net or batch" in line


@pytest.mark.parametrize("exc, said", [
    (OSError(errno.ENOMEM, "Cannot allocate memory"), "out of memory"),
    (RuntimeError("[enforce fail at alloc_cpu.cpp:117] data. DefaultCPUAllocator: not enough memory: "
                  "you tried to allocate 3221225472 bytes."), "out of memory"),
    (OSError(errno.EDQUOT, "Disk quota exceeded"), "disk quota exceeded on"),
    (ValueError("a bug"), None),  # not the machine's refusal: it keeps its traceback
])
def test_each_refusal_maps_to_its_words_and_a_bug_to_none(exc, said):
    got = errors.resource_error(exc, "/tmp/x/summary.json")
    if said is None:
        assert got is None
    else:
        assert got.code == 5 and said in got.message and "rerun the same command" in got.message


def test_a_full_disk_writing_degrades_results_is_one_line_and_the_rerun_reads_the_finished_runs(in_tmp, monkeypatch):
    from full_disk import fill_at

    args = ["degrade", "--depths", "4", "--seeds", "0", "--iters", "3", "--threads", "1", "--out", "d", "--json"]
    with monkeypatch.context() as m:
        seen = fill_at(m, "degrade.json")
        res = invoke(*args)
    assert seen["hit"] >= 1 and res.exit_code == 5
    line = one_error_line(res)
    assert "no space left on" in line and "degrade.json" in line
    assert not [p for p in Path("d").iterdir() if p.name.endswith(".tmp")]  # nothing half-written
    again = invoke(*args)
    assert again.exit_code == 0, again.output
    runs = [json.loads(x) for x in again.stdout.splitlines() if x.strip() and json.loads(x)["event"] == "run"]
    assert len(runs) == 2 and json.loads((in_tmp / "d" / "degrade.json").read_text())
    assert "0 reused" not in again.stderr  # the runs the full disk left finished are read, not retrained
