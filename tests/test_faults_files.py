"""A run's own file damaged or missing (issue 78): one line naming the file and what to do, exit 2,
in train, ablate, report and eval; a sweep goes on with its other runs and names the one it skipped."""

import json
import shutil

import pytest

from resnet_cli import errors

from invoking import invoke
from tiny_study import tiny_study

TINY = ["digits/residual8", "--set", "model.widths=[4]", "--epochs", "1", "--threads", "1"]
STUDY = tiny_study([0, 1, 2])


def error_line(result):
    lines = [line for line in result.output.splitlines() if line.startswith("resnet: error:")]
    assert len(lines) == 1 and "Traceback" not in result.output, result.output
    return lines[0]


@pytest.fixture
def unfinished(in_tmp):
    """A run with its checkpoint but no summary: what a resume continues."""
    assert invoke("train", *TINY, "--out", "run").exit_code == 0
    (in_tmp / "run" / "summary.json").unlink()
    return in_tmp / "run"


def test_a_garbage_meta_json_is_named_on_resume(unfinished):
    (unfinished / "meta.json").write_text("{not json")
    r = invoke("train", "--resume", unfinished)
    assert r.exit_code == errors.USAGE and f"{unfinished / 'meta.json'}: damaged" in error_line(r)


def test_a_missing_spec_yaml_is_named_instead_of_the_default_spec(unfinished):
    (unfinished / "spec.yaml").unlink()
    r = invoke("train", "--resume", unfinished)
    line = error_line(r)
    assert r.exit_code == errors.USAGE and f"{unfinished / 'spec.yaml'}: missing" in line and "CIFAR" not in line


def test_eval_of_a_run_without_spec_yaml_names_it(unfinished):
    (unfinished / "spec.yaml").unlink()
    r = invoke("eval", unfinished)
    assert r.exit_code == errors.USAGE and "spec.yaml" in error_line(r)


def test_a_sweep_skips_the_run_with_a_damaged_file_and_trains_the_others(in_tmp):
    (in_tmp / "s.yaml").write_text(STUDY)
    cmd = ["ablate", "s.yaml", "--out", "res", "--jobs", "1", "--json"]
    assert invoke(*cmd).exit_code == 0
    first, second, third = (p.relative_to(in_tmp) for p in sorted((in_tmp / "res").glob("0*")))
    (first / "summary.json").unlink()
    (first / "meta.json").write_text("\x00garbage")
    shutil.rmtree(second)
    (third / "summary.json").write_text('{"status": "compl')  # cut: the run reads as unfinished
    r = invoke(*cmd)
    assert r.exit_code == errors.USAGE, r.output
    assert "run 1:0 " in r.output and f"{first / 'meta.json'}: damaged" in r.output
    assert f"run 1:2 skipped: {third / 'summary.json'}: damaged" in r.output
    assert json.loads((second / "summary.json").read_text())["status"] == "completed"  # the sweep went on
    report = invoke("report", "res")
    assert f"counted as unfinished: {third / 'summary.json'}: damaged" in report.output
    assert f"counted as unfinished: {first / 'meta.json'}: damaged" in report.output
