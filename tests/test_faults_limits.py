"""Issue 78, item 4: a spec or study file over the size limit is one line before it is read; "in
use" is exit 4 in ablate as in train; a --list process that finds its run finished says skipped."""

import json
import time

import pytest

from resnet_cli import errors
from resnet_cli.runs.writer import RunDir
from resnet_cli.spec import yamlio

from invoking import invoke
from tiny_study import tiny_study

STUDY = tiny_study([0])


@pytest.mark.parametrize("command", [["train", "big.yaml", "--dry-run"], ["ablate", "big.yaml", "--list"]])
def test_a_file_over_the_limit_is_one_line_and_fast(in_tmp, command):
    (in_tmp / "big.yaml").write_text("title: " + "x" * (yamlio.MAX_BYTES + 10) + "\n")  # one long line
    tick = time.perf_counter()
    r = invoke(*command)
    assert r.exit_code == errors.USAGE and "big.yaml: 1.0 MiB; a spec or study file is at most 1 MiB" in r.output
    assert time.perf_counter() - tick < 5  # the whole file is never parsed


def test_a_file_at_the_limit_is_read():
    assert yamlio.MAX_BYTES == 1 << 20  # the documented limit


def test_ablate_on_a_run_in_use_exits_4_as_train_does(in_tmp):
    (in_tmp / "s.yaml").write_text(STUDY)
    run = RunDir(in_tmp / "res" / "01-a-s0")
    run.lock()  # another `resnet` holds it (flock is per open file: this one conflicts too)
    try:
        r = invoke("ablate", "s.yaml", "--out", "res", "--jobs", "1")
        t = invoke("train", "digits/residual8", "--resume", "auto", "--out", "res/01-a-s0")
    finally:
        run.unlock()
    assert r.exit_code == t.exit_code == errors.LOCKED, (r.output, t.output)
    assert "in use by another resnet process" in r.output


def test_only_reports_skipped_when_another_process_finished_the_run_meanwhile(in_tmp, monkeypatch):
    """Found unfinished, then finished by another process before this one took the lock: the resume
    trains nothing, and the line says so ("skipped": true), as for a run found finished at once."""
    from resnet_cli.runs import reader
    from resnet_cli.sweep import one_run

    (in_tmp / "s.yaml").write_text(STUDY)
    assert invoke("ablate", "s.yaml", "--out", "res", "--jobs", "1").exit_code == 0
    real = reader.RunRecord.read
    first = {"done": False}

    def stale(path):  # the check before the lock sees the run as it was before the other finished
        rec = real(path)
        if not first["done"]:
            first["done"] = True
            rec.summary = None
        return rec

    monkeypatch.setattr(one_run.RunRecord, "read", staticmethod(stale))
    r = invoke("ablate", "s.yaml", "--out", "res", "--only", "1:0", "--json")
    assert r.exit_code == 0, r.output
    assert json.loads(r.stdout.splitlines()[-1])["skipped"] is True
