"""What a new user meets first: the study list in help and docs, what a study says before it starts,
a preset whose data is missing, and the JSON lines the README promises. Each test was watched to
fail against the behaviour it replaced (an ablate --help written by hand, a study that made its
run directories before finding CIFAR-10 missing, configs rows without `event`)."""

import json
import re
from pathlib import Path

import pytest

from resnet_cli.sweep import study_file
from test_ablate import TINY  # a two-row study of 4-layer digits nets, two seeds
from invoking import invoke as run_cli

ROOT = Path(__file__).resolve().parents[1]
SHIPPED = sorted(p.stem for p in (ROOT / "configs" / "studies").glob("*.yaml"))  # independent of the code


def invoke(*args, **env):
    return run_cli(*args, env={"COLUMNS": "400", **env})


def test_the_shipped_studies_are_ten_and_the_code_finds_each():
    assert len(SHIPPED) == 10 and study_file.shipped() == SHIPPED


def test_ablate_help_lists_every_shipped_study():
    # It listed 8 of 10 by hand (no gate-bias, no normalisation).
    text = " ".join(invoke("ablate", "--help").stdout.split())
    listed = re.sub(r"-\s+", "-", re.search(r"A shipped study \(([^)]*)\)", text).group(1))  # rich folds at a hyphen
    assert [name.strip() for name in listed.split(",")] == SHIPPED


def test_a_new_study_is_one_yaml_file_in_help_configs_and_list(tmp_path):
    """A study added as one file in the configs folder, nothing else: `resnet ablate --help` names it,
    `resnet configs` lists it and `resnet ablate NAME --list` plans it. In a child process whose
    configs folder is a copy with the file added (the help text is made when the command loads)."""
    import shutil
    import subprocess
    import sys

    configs = tmp_path / "configs"
    shutil.copytree(ROOT / "configs", configs)
    (configs / "studies" / "my-study.yaml").write_text(TINY.replace("tiny study", "my study"))
    boot = ("import pathlib, sys; import resnet_cli.spec.bundled as b; "
            f"b.configs_dir = lambda: pathlib.Path({str(configs)!r}); "
            "from resnet_cli.cli import main; sys.argv = ['resnet', *sys.argv[1:]]; main()")

    def run(*args):
        proc = subprocess.run([sys.executable, "-c", boot, *args], capture_output=True, text=True, cwd=tmp_path,
                              env={**__import__("os").environ, "COLUMNS": "400"}, timeout=120)
        assert proc.returncode == 0, proc.stderr
        return proc.stdout

    listed = re.search(r"A shipped study \(([^)]*)\)", " ".join(run("ablate", "--help").split())).group(1)
    listed = re.sub(r"-\s+", "-", listed)  # rich folds at a hyphen
    assert [n.strip() for n in listed.split(",")] == sorted(SHIPPED + ["my-study"])
    rows = [json.loads(line) for line in run("configs", "--json").splitlines()]
    assert {"name": "studies/my-study", "kind": "study", "use": "resnet ablate my-study"}.items() <= \
        next(r for r in rows if r["name"] == "studies/my-study").items()
    assert len(run("ablate", "my-study", "--preset", "quick", "--list").splitlines()) == 4  # 2 rows x 2 seeds


@pytest.mark.parametrize("page,pattern", [
    ("docs/configs.md", r"\| `studies/\*` \| `resnet ablate` studies: (.*) \|"),
])
def test_the_docs_study_list_is_the_shipped_one(page, pattern):
    line = re.search(pattern, (ROOT / page).read_text()).group(1)
    assert sorted(re.findall(r"`([\w-]+)`", line)) == SHIPPED


def test_the_ablate_page_has_a_row_for_every_shipped_study():
    text = (ROOT / "docs" / "ablate.md").read_text()
    table = text[text.index("| `resnet ablate NAME` |"):text.index("```bash")]
    assert sorted(re.findall(r"^\| `([\w-]+)` \|", table, re.M)) == SHIPPED
    assert not re.search(r"\b(Six|Seven|Eight|Nine) studies ship", text)


def test_a_study_says_what_will_run_before_it_starts(in_tmp):
    (in_tmp / "tiny.yaml").write_text(TINY)
    first = invoke("ablate", "tiny.yaml", "--preset", "paper", "--jobs", "1", "--out", "res")
    assert first.exit_code == 0, first.stderr
    head = first.stderr.splitlines()[0]
    assert head.endswith("in res: 4 runs, 4 to train; time a run: not measured here yet (the first to finish tells)")
    walls = [json.loads((in_tmp / "res" / f"01-identity-s{seed}" / "summary.json").read_text())["wall_time_s"]
             for seed in (0, 1)]
    (in_tmp / "res" / "02-plain-s1" / "summary.json").unlink()  # two runs left to train
    (in_tmp / "res" / "02-plain-s0" / "summary.json").unlink()
    again = invoke("ablate", "tiny.yaml", "--preset", "paper", "--jobs", "1", "--out", "res")
    head = again.stderr.splitlines()[0]
    m = re.search(r"4 runs, 2 to train; (\d+) s a run here \(median of 2 finished\), about (\d+) s at 1 at once", head)
    assert m, head
    # The two identity runs stayed finished: the median of their wall times, and two rounds of it.
    assert int(m.group(1)) == round(sum(walls) / 2) and int(m.group(2)) == round(sum(walls))
    assert "every run has finished" in invoke("ablate", "tiny.yaml", "--jobs", "1", "--out", "res").stderr


def test_a_resumed_study_counts_the_runs_left_and_the_end_line_counts_each_kind(in_tmp):
    # On resume the counter read [1/20] ... [8/20] when 8 runs remained.
    (in_tmp / "tiny.yaml").write_text(TINY)
    assert invoke("ablate", "tiny.yaml", "--jobs", "1", "--out", "res").exit_code == 0
    (in_tmp / "res" / "02-plain-s1" / "summary.json").unlink()
    again = invoke("ablate", "tiny.yaml", "--jobs", "1", "--out", "res")
    lines = again.stderr.splitlines()
    assert [ln.split("]")[0] for ln in lines if ln.startswith("[")] == ["[1/1"], again.stderr
    assert "1 run(s) trained, 3 already finished, in" in again.stderr


def test_the_end_line_counts_interrupted_failed_and_unstarted_runs_apart():
    from resnet_cli.sweep.engine import Outcome, tally

    outcomes = {"1:0": Outcome("completed"), "1:1": Outcome("diverged"), "2:0": Outcome("interrupted"),
                "2:1": Outcome("interrupted"), "3:0": Outcome("error"), "3:1": Outcome("skipped")}
    # 10 planned: 2 trained to their end, 2 interrupted, 1 failed, 1 finished before, 4 never reached
    assert tally(outcomes, 10) == ("2 run(s) trained, 2 interrupted, 1 failed, 4 not started, "
                                   "1 already finished")
    assert tally({}, 3, finished=3, finished_words="reused") == "0 run(s) trained, 3 reused"


def test_a_paper_preset_whose_data_is_missing_is_one_error_before_anything_is_made(in_tmp):
    # It used to make 01-original-identity-s{0,1}/ with study.json and ablate.log, then print the
    # error three times.
    (in_tmp / "empty").mkdir()
    r = invoke("ablate", "shortcut", "--set", "data.download=false", "--set", f"data.dir={in_tmp / 'empty'}",
               "--out", "res")
    assert r.exit_code == 2 and r.stdout == ""
    lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("resnet: error: CIFAR-10 not found in"), r.stderr
    assert sorted(p.name for p in in_tmp.iterdir()) == ["empty"]


def test_every_json_line_of_configs_parses_alone_and_says_what_it_is():
    out = invoke("configs", "--json").stdout
    with pytest.raises(json.JSONDecodeError):
        json.loads(out)  # not one document: what README now says next to its --json examples
    assert {json.loads(line)["event"] for line in out.splitlines()} == {"config"}
    assert "JSON lines, not one JSON document" in (ROOT / "README.md").read_text()


def test_report_of_a_study_under_way_shows_the_rows_and_seeds_not_run_yet(in_tmp):
    # With 1 of 36 runs finished it showed one `completed` row, n 1/1, and a caption "ours: ?".
    r = invoke("ablate", "projection", "--preset", "quick", "--only", "1:100", "--out", "res",
               "--set", "optim.epochs=1")
    assert r.exit_code == 0, r.stderr
    rep = invoke("report", "res", "--json")
    assert rep.exit_code == 0, rep.stderr
    rows = [json.loads(line) for line in rep.stdout.splitlines()][:-1]
    # He 2016a Table 3's four rows, each over the quick preset's ten seeds (what its five claims need).
    assert [(row["index"], row["status"], row["n"], row["runs"]) for row in rows] == [
        (1, "incomplete 1/10", 1, 10), (2, "incomplete 0/10", 0, 10), (3, "incomplete 0/10", 0, 10),
        (4, "incomplete 0/10", 0, 10)]
    assert {row["dataset"] for row in rows} == {"digits"}  # the caption's "ours: digits test error %"
    assert "39 run(s) asked for have no run directory below res yet: shown as pending" in rep.stderr
    assert "projection (preset quick): run with --set optim.epochs=1" in rep.stderr  # the recipe actually run


def test_the_landscape_table_defines_its_columns_in_its_caption():
    from resnet_cli.commands.landscape import view

    caption = view([{"dims": 1, "points": [0.0], "samples": 8, "wall_s": 0.0}], Path("x.png"), -1, 1).caption
    for column in ("TV/range", "nonconvex %", "minima"):
        assert f"{column}:" in caption, column  # each defined, not only used


@pytest.mark.parametrize("args", [["degrade", "--help"], ["gradnorm", "--help"], ["configs", "--json"]])
def test_the_article_is_said_to_be_an_article_wherever_it_is_named(args):
    text = " ".join(invoke(*args).stdout.replace('\\"', '"').split())
    named = [m.start() for m in re.finditer(r"Residual Connection", text)]
    assert named, args
    for at in named:
        assert 'encyclopedia-style "' in text[max(0, at - 25):at], text[max(0, at - 60):at + 30]
