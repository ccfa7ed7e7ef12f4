"""`resnet plot`: training curves and a summary of one or many runs, read from their run directories."""

import json

import pytest

from invoking import invoke


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    root = tmp_path_factory.mktemp("plot")
    out = []
    for name in ("residual8", "plain8"):
        r = invoke("train", f"digits/{name}", "--epochs", 2, "--set", "model.widths=[4]", "--out", root / name)
        assert r.exit_code == 0, r.stderr
        out.append(root / name)
    return out


def test_plot_two_runs(runs, tmp_path):
    fig = tmp_path / "curves.png"
    r = invoke("plot", *runs, "--out", fig)
    assert r.exit_code == 0, r.stderr
    rows = [json.loads(line) for line in r.stdout.splitlines()]
    assert [x["event"] for x in rows] == ["run", "run", "figure"]
    res, plain = rows[0], rows[1]
    assert (res["label"], plain["label"]) == ("ResNet-8", "plain-8")
    for row in (res, plain):
        assert row["status"] == "completed" and row["epochs"] == 2 and row["iterations"] == 46
        assert 0 <= row["train_error"] <= 100 and 0 <= row["test_error"] <= 100 and row["test_error_epoch"] == 2
    summary = json.loads((runs[0] / "summary.json").read_text())
    assert res["test_error"] == summary["test_error"]  # the last epoch's, as `resnet train` reports it
    assert rows[-1]["path"] == str(fig) and fig.read_bytes()[:4] == b"\x89PNG"


def test_plot_default_path_and_unfinished_run(runs, tmp_path):
    import shutil

    run = tmp_path / "copy"
    shutil.copytree(runs[0], run)
    (run / "summary.json").unlink()  # as if still training, or killed
    (run / "checkpoint.pt").write_bytes(b"garbage")  # curves need only the metrics
    r = invoke("plot", run)
    assert r.exit_code == 0, r.stderr
    assert json.loads(r.stdout.splitlines()[0])["status"] == "unfinished"
    assert (run / "curves.png").is_file()


@pytest.mark.parametrize("kind", ["missing", "file", "no spec", "no metrics"])
def test_bad_run_dir_is_one_line(kind, runs, tmp_path):
    bad = tmp_path / "bad"
    needle = {"missing": "no such run directory", "file": "not a run directory", "no spec": "no spec.yaml",
              "no metrics": "no epoch records"}[kind]
    if kind == "file":
        bad.write_text("x")
    elif kind != "missing":
        bad.mkdir()
    if kind == "no metrics":
        (bad / "spec.yaml").write_text((runs[0] / "spec.yaml").read_text())
    r = invoke("plot", runs[0], bad)
    assert r.exit_code == 2
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("resnet: error:") and needle in lines[0], r.stderr
    assert r.stdout == ""
