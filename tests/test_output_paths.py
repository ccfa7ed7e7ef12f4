"""Where results go and what is read back: an --out that cannot be a run directory, a figure path
matplotlib cannot write or that names a folder, a damaged metrics.jsonl. Each is one line, exit 2,
before any work (issue 31)."""

import json
import shutil

import pytest

from invoking import invoke


TINY = ["digits/residual8", "--set", "model.widths=[4]", "--epochs", "1"]


def one_line(r, *needles) -> str:
    assert r.exit_code == 2, (r.exit_code, r.stdout, r.stderr)
    lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("resnet: error: "), r.stderr
    assert "Traceback" not in r.stderr and r.stdout == ""
    for needle in needles:
        assert needle in lines[0], lines[0]
    return lines[0]


@pytest.fixture
def a_file(in_tmp):
    path = in_tmp / "notes.txt"
    path.write_text("mine\n")
    return path


@pytest.mark.parametrize("command", ["train", "degrade", "ablate"])
@pytest.mark.parametrize("where,says", [("file", "is a file, not a directory"),
                                        ("under_file", "notes.txt is a file, not a folder"),
                                        ("proc", "cannot create")])
def test_an_out_that_cannot_be_a_directory_is_one_line(in_tmp, a_file, command, where, says):
    # ablate used to print a traceback (--jobs 1) or an error line per run (--jobs 2) with a file here
    out = {"file": a_file, "under_file": a_file / "run", "proc": "/proc/resnet-run"}[where]
    args = {"train": TINY, "degrade": ["--depths", "8", "--epochs", "1"],
            "ablate": ["projection", "--preset", "quick", "--jobs", "2"]}[command]
    if command == "ablate" and where == "proc":
        pytest.skip("/proc is a folder root may write in: the study's first run directory says it")
    one_line(invoke(command, *args, "--out", out), f"--out {out}", says)
    assert a_file.read_text() == "mine\n"  # nothing of the user's is touched
    assert sorted(p.name for p in in_tmp.iterdir()) == ["notes.txt"]  # nothing made


def test_eval_and_export_check_their_out_before_loading_anything(run_copy, in_tmp, a_file):
    one_line(invoke("eval", run_copy, "--out", a_file), f"--out {a_file}", "is a file, not a directory")
    one_line(invoke("eval", run_copy, "--figure", a_file / "cm.png"), "notes.txt is a file, not a folder")
    one_line(invoke("export", run_copy, "--out", a_file / "net.pt"), "notes.txt is a file, not a folder")
    assert a_file.read_text() == "mine\n"


@pytest.fixture
def run_copy(residual8_run, in_tmp):
    """A writable copy of the shared trained run."""
    return shutil.copytree(residual8_run, in_tmp / "run")


@pytest.mark.parametrize("args", [
    ["plot", "{run}"], ["lesion", "{run}"], ["landscape", "{run}"], ["paths", "{run}"],
    ["gradnorm", "--responses", "{run}"],
])
def test_a_figure_path_matplotlib_cannot_write_is_one_line_before_any_work(run_copy, args):
    argv = [a.replace("{run}", str(run_copy)) for a in args]
    line = one_line(invoke(*argv, "--out", "fig.xyz"), "--out fig.xyz", "unknown figure format '.xyz'")
    assert ".png" in line and ".pdf" in line and ".svg" in line  # what would be valid
    one_line(invoke(*argv, "--out", "fig"), "no file extension")
    assert not any(run_copy.parent.glob("fig*"))


def test_report_and_ablate_check_their_figure_path(run_copy, in_tmp):
    one_line(invoke("report", in_tmp, "--figure", "bars.xyz"), "--figure bars.xyz", "'.xyz'")
    one_line(invoke("ablate", "depth", "--preset", "quick", "--figure", "bars.jpgg", "--out", "res"), "'.jpgg'")
    assert not (in_tmp / "res").exists()


def test_a_figure_path_naming_a_folder_gets_the_default_name_inside(run_copy, in_tmp):
    (in_tmp / "figs").mkdir()
    for out in ("figs/", "figs", "new/"):
        r = invoke("plot", run_copy, "--out", out)
        assert r.exit_code == 0, r.stderr
        expected = in_tmp / out.rstrip("/") / "curves.png"
        assert expected.is_file()
        figure = [json.loads(ln) for ln in r.stdout.splitlines() if '"figure"' in ln][0]
        assert figure["path"] == str(expected.relative_to(in_tmp))  # the path reported is the one written
    assert not (in_tmp / "figs.png").exists() and not (in_tmp / "new.png").exists()


@pytest.mark.parametrize("damage,says", [
    (lambda text: text.replace("\n", "\n\xff\xfe\n", 1).encode("latin-1"), ":2: not UTF-8 text"),
    (lambda text: (text.splitlines()[0][:20] + "\n" + text).encode(), ":1: not a JSON record"),
])
@pytest.mark.parametrize("command", [["plot"], ["eval"], ["report"]])
def test_a_damaged_metrics_file_is_one_line_naming_file_and_line(run_copy, damage, says, command):
    metrics = run_copy / "metrics.jsonl"
    metrics.write_bytes(damage(metrics.read_text()))
    if command == ["report"]:
        (run_copy / "summary.json").unlink()  # report reads metrics.jsonl of unfinished runs only
    one_line(invoke(*command, run_copy), f"{metrics}{says}")


def test_a_last_line_cut_mid_write_is_left_out(run_copy):
    metrics = run_copy / "metrics.jsonl"
    text = metrics.read_text()
    metrics.write_text(text + text.splitlines()[0][:25])  # a kill during the next append
    r = invoke("plot", run_copy, "--json")
    assert r.exit_code == 0, r.stderr
