"""What a new user trusts most (issue 74): the default output folders (degrade's stable for the same
grid, a changed recipe's its own), the line that says how to resume naming the exact command, an
interrupted or partial table never passed off as whole, and `resnet report` judging a directory by
the seeds and recipe asked for it. Interruptions are simulated by the sweep engine returning a
signal after training only some of the runs (what its StopFlag reports after Ctrl-C)."""

from __future__ import annotations

import dataclasses
import json
import shlex
import signal
from pathlib import Path

import pytest

from resnet_cli.sweep import asked
from resnet_cli.sweep import degrade_plan as D
from resnet_cli.sweep import engine
from resnet_cli.sweep import plan as plan_mod

from invoking import invoke
from test_ablate import TINY as TINY_STUDY

TINY_GRID = ["--depths", "4", "--seeds", "0..1", "--epochs", "1", "--set", "data.train_subset=128",
             "--set", "data.test_subset=60"]


# -- item 1 and 6: default folders ------------------------------------------------------------


def test_degrade_default_folder_is_the_grids_own_and_stable():
    base = D.make_plan(None).out
    assert base == Path("runs/degrade/digits-8-26")  # no clock in it: the same command finds its runs
    assert D.make_plan(None).out == base
    # depths, nets and seeds only pick runs (each its own directory): the same folder
    assert D.make_plan(None, depths=[8], seeds=[0, 1], nets=["plain"]).out == base
    # a flag that sets what the config already has changes no recipe
    assert D.make_plan(None, overrides=D.length_overrides(None, 6, None)).out == base
    assert D.make_plan(None, overrides=[("run.threads", 1)]).out == base  # where it runs, not what
    changed = D.make_plan(None, overrides=D.length_overrides(None, 2, None)).out
    assert D.make_plan(None, sets=["optim.lr=0.05"]).out == base  # the config's own lr
    other = D.make_plan(None, sets=["optim.lr=0.1"]).out
    assert len({base, changed, other}) == 3 and changed.parent == base.parent
    assert changed.name.startswith("digits-8-26-set-optim.epochs-2-")


def test_a_changed_recipe_gets_its_own_ablate_folder_and_seeds_do_not():
    shipped = plan_mod.plan("projection", "quick")
    assert shipped.results == Path("runs/ablate/projection-quick") and shipped.changed == ""
    fewer = plan_mod.plan("projection", "quick", seeds=[0, 1], sets=["run.threads=1"])
    assert fewer.results == shipped.results  # seeds add runs, threads are where a run executes
    recipe = plan_mod.plan("projection", "quick", seeds=[0, 1], sets=["optim.epochs=2", "run.threads=1"])
    assert recipe.results != shipped.results and recipe.results.name.startswith("projection-quick-set-optim.epochs-2-")
    assert recipe.sets == ("optim.epochs=2",) and recipe.changed == "--set optim.epochs=2, seeds 0,1"
    assert plan_mod.plan("projection", "quick", sets=["optim.epochs=3"]).results != recipe.results


def test_another_spec_in_the_way_never_suggests_deleting_finished_runs(in_tmp):
    (in_tmp / "s.yaml").write_text(TINY_STUDY)
    assert invoke("ablate", "s.yaml", "--out", "res", "--json").exit_code == 0
    r = invoke("ablate", "s.yaml", "--out", "res", "--set", "optim.lr=0.05", "--json")
    assert r.exit_code != 0
    assert "delete" not in r.stderr and "another spec" in r.stderr, r.stderr


# -- item 1 and 3: interrupted sweeps ---------------------------------------------------------


@pytest.fixture
def interrupted_after(monkeypatch):
    """The sweep trains only its first `k` runs, then reports SIGINT, as after Ctrl-C."""
    def install(k: int):
        real = engine.execute

        def stopped(plan, *args, **kwargs):
            result = real(dataclasses.replace(plan, runs=plan.runs[:k]), *args, **kwargs)
            return engine.SweepResult(result.outcomes, signal.SIGINT)

        monkeypatch.setattr(engine, "execute", stopped)
    return install


def _resume_line(stderr: str) -> list[str]:
    (line,) = [x for x in stderr.splitlines() if "to resume, rerun:" in x]
    return shlex.split(line.split("to resume, rerun:", 1)[1])


def test_interrupted_degrade_names_the_command_and_writes_no_table(in_tmp, interrupted_after):
    interrupted_after(1)
    (in_tmp / "t.tex").write_text("% a whole table from before\n")
    r = invoke("degrade", *TINY_GRID, "--format", "latex", "--output", "t.tex")
    assert r.exit_code == 130, r.stderr
    assert (in_tmp / "t.tex").read_text() == "% a whole table from before\n"  # never over a whole one
    assert "t.tex not written: the grid was interrupted (1 of 4 runs finished)" in " ".join(r.stderr.split())
    words = _resume_line(r.stderr)
    out = words[words.index("--out") + 1]
    assert words[:2] == ["resnet", "degrade"] and Path(out).parent == Path("runs/degrade")
    assert (in_tmp / out / "runs").is_dir()


def test_the_resume_line_resumes_and_then_the_table_is_whole(in_tmp, interrupted_after, monkeypatch):
    real = engine.execute
    interrupted_after(1)
    first = invoke("degrade", *TINY_GRID, "--format", "latex", "--output", "t.tex")
    assert first.exit_code == 130
    words = _resume_line(first.stderr)
    monkeypatch.setattr(engine, "execute", real)
    again = invoke(*words[1:])
    assert again.exit_code == 0, again.stderr
    tex = (in_tmp / "t.tex").read_text()
    assert tex.startswith("\\begin{table}") and "% partial" not in tex and "Partial:" not in tex
    # 1 run reused, 3 trained: the same folder, not a new one
    assert len(list((in_tmp / "runs" / "degrade").iterdir())) == 1
    assert "3 run(s) trained" in again.stderr and "1 reused" in again.stderr, again.stderr


def test_a_partial_degrade_table_on_stdout_says_so_first(in_tmp, interrupted_after):
    interrupted_after(2)
    r = invoke("degrade", *TINY_GRID, "--format", "latex")
    assert r.exit_code == 130
    first = r.stdout.splitlines()[0]
    assert first == "% partial: 2 of 4 runs finished"
    assert "\\caption{Partial: 2 of 4 runs finished." in r.stdout
    md = invoke("report", _resume_line(r.stderr)[_resume_line(r.stderr).index("--out") + 1], "--format", "markdown")
    assert md.exit_code == 0 and md.stdout.startswith("**partial: 2 of 4 runs finished**")


def test_interrupted_ablate_names_the_command_and_writes_no_table(in_tmp, interrupted_after):
    interrupted_after(1)
    (in_tmp / "s.yaml").write_text(TINY_STUDY)
    r = invoke("ablate", "s.yaml", "--set", "optim.lr=0.05", "--format", "latex", "--output", "t.tex")
    assert r.exit_code == 130, r.stderr
    assert not (in_tmp / "t.tex").exists()
    words = _resume_line(r.stderr)
    out = words[words.index("--out") + 1]
    assert Path(out).name.startswith("s-paper-set-optim.lr-0.05-")  # the recipe's own folder, named
    assert words[words.index("--set") + 1] == "optim.lr=0.05" and "--output" in words
    # stdout, not a file: the table is written, and says it is partial on its first line and in its caption
    md = invoke("report", out, "--format", "latex")
    assert md.stdout.splitlines()[0] == "% partial: 1 of 4 runs finished", md.stdout
    assert "Partial: 1 of 4 runs finished." in md.stdout and "& 1/2 & incomplete 1/2" in md.stdout


def test_a_partial_table_never_replaces_a_whole_one(in_tmp, interrupted_after):
    (in_tmp / "s.yaml").write_text(TINY_STUDY)
    interrupted_after(1)
    assert invoke("ablate", "s.yaml", "--out", "res", "--json").exit_code == 130
    (in_tmp / "whole.md").write_text("| a whole table |\n")
    r = invoke("report", "res", "--format", "markdown", "--output", "whole.md")
    assert r.exit_code == 2 and "whole.md not written: this table is partial: 1 of 4 runs finished" in r.stderr
    assert (in_tmp / "whole.md").read_text() == "| a whole table |\n"
    assert invoke("report", "res", "--format", "markdown", "--output", "new.md").exit_code == 0
    assert (in_tmp / "new.md").read_text().startswith("**partial: 1 of 4 runs finished**")


# -- item 4 and 6: report judges a directory by what was asked ---------------------------------


def test_report_judges_a_smaller_run_by_the_seeds_and_recipe_asked(in_tmp):
    """The shipped projection study run deliberately smaller: its row's two seeds are all that was
    asked, so it is complete, nothing is pending, and the recipe run is said."""
    args = ["ablate", "projection", "--preset", "quick", "--seeds", "0..1", "--set", "optim.epochs=1",
            "--set", "data.train_subset=128", "--set", "data.test_subset=60"]
    for seed in (0, 1):
        r = invoke(*args, "--only", f"1:{seed}", "--json")
        assert r.exit_code == 0, r.stderr
    out = next(Path("runs/ablate").iterdir())
    recorded = json.loads((out / asked.FILE).read_text())
    assert recorded["seeds"] == [0, 1] and recorded["sets"] == ["optim.epochs=1", "data.train_subset=128",
                                                                 "data.test_subset=60"]
    rep = invoke("report", out, "--json")
    assert rep.exit_code == 0, rep.stderr
    rows = [json.loads(line) for line in rep.stdout.splitlines() if json.loads(line)["event"] == "row"]
    # 4 rows x the 2 seeds asked: row 1 complete, the others pending at 0/2 (not 1/10 against the file's seeds)
    assert [(r["index"], r["status"], r["n"], r["runs"]) for r in rows] == [
        (1, "completed", 2, 2), (2, "incomplete 0/2", 0, 2), (3, "incomplete 0/2", 0, 2), (4, "incomplete 0/2", 0, 2)]
    assert "6 run(s) asked for have no run directory" in rep.stderr
    assert "run with --set optim.epochs=1, --set data.train_subset=128, --set data.test_subset=60, seeds 0,1" in rep.stderr
    tex = invoke("report", out, "--format", "latex").stdout
    assert "run with --set optim.epochs=1" in tex and "n per row as the table gives it; 3 of 4 rows have no" in tex
    runs = invoke("report", out, "--runs", "--json")
    assert "6 run(s) asked for have no run directory below" in runs.stderr and "not listed" in runs.stderr
    assert len(runs.stdout.splitlines()) == 2


def test_the_study_header_states_the_recipe_run(in_tmp):
    (in_tmp / "s.yaml").write_text(TINY_STUDY)
    r = invoke("ablate", "s.yaml", "--seeds", "0", "--set", "optim.lr=0.05", "--json")
    assert r.exit_code == 0, r.stderr
    head = r.stderr.splitlines()[0]
    assert "run here with --set optim.lr=0.05, seeds 0" in head, head


def test_list_lines_carry_the_seeds_asked_so_each_records_them(in_tmp):
    (in_tmp / "s.yaml").write_text(TINY_STUDY)
    lines = invoke("ablate", "s.yaml", "--seeds", "1", "--out", "res", "--list").stdout.splitlines()
    assert len(lines) == 2
    words = shlex.split(lines[0])
    assert words[words.index("--seeds") + 1] == "1"
    r = invoke(*words[words.index("ablate"):])
    assert r.exit_code == 0, r.stderr
    assert json.loads((in_tmp / "res" / asked.FILE).read_text())["seeds"] == [1]  # not the file's 0, 1
