"""`resnet ablate` and `resnet report` on tiny digits nets: study parsing, skip/resume, divergence,
--list, --jobs, and a report rebuilt from run directories that matches the sweep's own table."""

import json
import re
import shlex
import shutil
import signal
import subprocess
import sys

import pytest

from resnet_cli import spec as spec_mod
from resnet_cli.errors import UserError
from resnet_cli.sweep import plan as study_mod
from resnet_cli.sweep import study_file
from resnet_cli.sweep import engine as sweep

from invoking import invoke

# Two-iteration epochs: 128 training images at batch 64, a 4-layer digits net of width 4.
TINY = """
title: tiny study
paper_metric: made-up error %
spec:
  model: {family: digits, depth: 4, widths: [4]}
  data: {dataset: digits, train_subset: 128, test_subset: 60}
  optim: {epochs: 1, batch_size: 64, warmup_iters: 0, milestones: []}
  train: {checkpoint_every: 0}
seeds: [0, 1]
rows:
  - label: identity
    paper: 1.5
  - label: plain
    overrides: {model.shortcut.kind: none}
    paper: fail
"""

BLOWUP = """
  - label: absurd lr
    overrides: {optim: {lr: 10000.0}}
"""


def json_lines(text):
    return [json.loads(line) for line in text.splitlines() if line.strip()]  # every line must parse


def rows_of(text):
    """The row objects of a study's JSON lines (the last line is the study's summary)."""
    lines = json_lines(text)
    assert lines[-1]["event"] == "study" and "kendall_tau" in lines[-1] and "p_value" in lines[-1]
    return [x for x in lines if x["event"] == "row"]


def write(path, text):
    path.write_text(text)
    return path


@pytest.fixture
def tiny(in_tmp):
    return write(in_tmp / "tiny.yaml", TINY)


# ---------------------------------------------------------------------------------------------
# Study files


@pytest.mark.parametrize("name", ["shortcut", "activation", "activation-modern", "projection", "depth", "zero-init"])
@pytest.mark.parametrize("preset", ["paper", "quick"])
def test_shipped_studies_resolve(name, preset):
    plan = study_mod.plan(name, preset)
    assert plan.rows and len(plan.runs) == len(plan.rows) * len(plan.seeds)
    if preset == "quick":
        assert all(r.spec.data.dataset == "digits" for r in plan.rows)  # offline
        assert all(r.spec.optim.epochs and r.spec.optim.warmup_iters < r.spec.optim.epochs * 23 for r in plan.rows)


# The seeds each quick preset's declared claims need for a 2-sd gap at 80% power, by the exact
# sign-flip test after Holm (results/power.py; checked against the test itself in test_claims.py):
# 23 claims -> 13, 15 -> 13, 6 -> 11, 5 -> 10, 3 -> 9. Each quick preset's seeds start at 100: fresh
# seeds, none used by a run before its claims were registered anew (docs/ablate.md).
SIZED = {"shortcut": 13, "projection": 10, "zero-init": 9, "normalisation": 11, "activation": 11,
         "activation-modern": 11, "depth": 13, "gate-bias": 10}


@pytest.mark.parametrize("name", sorted(SIZED))
def test_the_quick_presets_list_the_seeds_their_claims_need_per_row(name):
    r = invoke("ablate", name, "--preset", "quick", "--list")
    assert r.exit_code == 0, r.stderr
    keys = [shlex.split(line)[shlex.split(line).index("--only") + 1] for line in r.stdout.splitlines()]
    rows: dict[str, set[str]] = {}
    for key in keys:
        row, seed = key.split(":")
        rows.setdefault(row, set()).add(seed)
    assert rows and all(seeds == {str(s) for s in range(100, 100 + SIZED[name])} for seeds in rows.values()), rows
    assert f"{SIZED[name]} seeds can resolve" in r.stderr  # the power line, before any run


def test_activation_modern_is_the_activation_study_with_a_cosine_schedule():
    """The same rows, seeds and budget as `activation`, each spec differing only in optim.schedule
    (and the milestones the step schedule fills in): the two tables can be read side by side."""
    for preset in ("paper", "quick", "fashion"):
        step, cosine = study_mod.plan("activation", preset), study_mod.plan("activation-modern", preset)
        assert [r.label for r in step.rows] == [r.label for r in cosine.rows] and step.seeds == cosine.seeds
        for a, b in zip(step.rows, cosine.rows):
            assert a.spec.optim.schedule == "step" and b.spec.optim.schedule == "cosine"
            assert spec_mod.diff(a.spec, b.spec) == ["optim.milestones", "optim.schedule"]


@pytest.mark.parametrize("name", ["shortcut", "activation", "depth"])
def test_fashion_presets_keep_the_rows_and_change_only_the_budget(name):
    paper, fashion = study_mod.plan(name, "paper"), study_mod.plan(name, "fashion")
    kept = [r.label for r in paper.rows if r.spec.data.dataset == "cifar10"]  # CIFAR-100 rows stay paper-only
    assert [r.label for r in fashion.rows] == kept
    for p_row, f_row in zip([r for r in paper.rows if r.label in kept], fashion.rows):
        pm, fm = p_row.spec.model, f_row.spec.model
        assert (fm.depth, fm.unit, fm.block, fm.downsample, fm.shortcut) == (pm.depth, pm.unit, pm.block, pm.downsample, pm.shortcut)
        f = f_row.spec
        assert f.data.dataset == "fashion_mnist" and f.data.train_subset and f.data.test_subset is None
        # The papers' rate per example (He 2016a sec. 4.2: 0.1 at batch 128), whatever the batch.
        assert f.optim.lr / f.optim.batch_size == pytest.approx(0.1 / 128)
        total = f.optim.iters or f.optim.epochs * (f.data.train_subset // f.optim.batch_size)
        assert f.optim.warmup_iters < 0.1 * total  # the warm-up ends well inside the run


def test_shortcut_study_has_every_row_of_table_1():
    rows = {r.label: r for r in study_mod.plan("shortcut").rows}
    kinds = [(r.spec.model.shortcut.kind, r.spec.model.shortcut.gate_bias) for r in rows.values()]
    for bias in (0.0, -6.0, -7.0):
        assert ("exclusive_gate", bias) in kinds
    for bias in (0.0, -6.0):
        assert ("shortcut_gate", bias) in kinds
    scales = {(r.spec.model.shortcut.shortcut_scale, r.spec.model.shortcut.branch_scale)
              for r in rows.values() if r.spec.model.shortcut.kind == "scale"}
    assert scales == {(0.5, 1.0), (0.5, 0.5)}
    assert {"none", "conv1x1", "dropout", "identity"} <= {k for k, _ in kinds}
    assert rows["original (identity)"].paper == 6.61 and rows["dropout shortcut, p 0.5"].paper == "fail"


def test_activation_study_has_five_units_at_two_depths():
    rows = study_mod.plan("activation").rows
    assert {(r.spec.model.unit, r.spec.model.depth) for r in rows} == {
        (u, d) for u in ("original", "bn_after_add", "relu_before_add", "relu_preact", "full_preact")
        for d in (110, 164)}


def test_nested_and_dotted_overrides_agree(in_tmp):
    dotted = TINY.replace("overrides: {model.shortcut.kind: none}",
                          "overrides: {model.shortcut.kind: none, optim.lr: 0.05}")
    nested = TINY.replace("overrides: {model.shortcut.kind: none}",
                          "overrides: {model: {shortcut: {kind: none}}, optim: {lr: 0.05}}")
    a = study_mod.plan(str(write(in_tmp / "a.yaml", dotted))).rows[1].spec
    b = study_mod.plan(str(write(in_tmp / "b.yaml", nested))).rows[1].spec
    assert a == b and a.model.shortcut.kind == "none" and a.optim.lr == 0.05


def test_grid_rows(in_tmp):
    text = TINY.split("rows:")[0] + "grid:\n  model.unit: [original, full_preact]\n  optim.lr: [0.1, 0.05]\n"
    plan = study_mod.plan(str(write(in_tmp / "g.yaml", text)))
    assert [r.label for r in plan.rows] == ["unit=original, lr=0.1", "unit=original, lr=0.05",
                                            "unit=full_preact, lr=0.1", "unit=full_preact, lr=0.05"]
    assert plan.rows[3].spec.model.unit == "full_preact" and plan.rows[3].spec.optim.lr == 0.05


def test_a_grid_axis_of_named_overrides_with_label_and_run_dir_templates(in_tmp):
    text = TINY.split("rows:")[0] + (
        "grid:\n  model.depth: [8, 14]\n  net: {plain: {model.shortcut.kind: none}, residual: {}}\n"
        'label: "{net}-{depth}"\nrun_dir: "runs/{net}-{depth}-seed{seed}"\n')
    plan = study_mod.plan(str(write(in_tmp / "g.yaml", text)), results=in_tmp / "out")
    # By hand: depth varies slowest; the named values set the shortcut, {} keeps the base's.
    assert [(r.label, r.spec.model.depth, r.spec.model.shortcut.kind) for r in plan.rows] == [
        ("plain-8", 8, "none"), ("residual-8", 8, "identity"), ("plain-14", 14, "none"), ("residual-14", 14, "identity")]
    assert plan.runs[0].path == in_tmp / "out" / "runs" / "plain-8-seed0"
    assert plan.find("4:0").path == in_tmp / "out" / "runs" / "residual-14-seed0"
    path, name, source = study_file.find(str(in_tmp / "g.yaml"))
    picked = study_mod.resolve(study_file.load(path), path, name, source, axes={"model.depth": [20], "net": ["residual"]})
    assert [r.label for r in picked.rows] == ["residual-20"]


@pytest.mark.parametrize("tail, needle", [
    ('label: "{net}-{width}"\n', "names '{width}'; valid: {depth}, {net}"),
    ('run_dir: "runs/{net}-{depth}"\n', "needs {seed}"),
    ('run_dir: "../{net}-{depth}-{seed}"\n', "inside the results directory"),
])
def test_a_grid_template_naming_no_axis_is_one_line(in_tmp, tail, needle):
    text = TINY.split("rows:")[0] + "grid:\n  model.depth: [8]\n  net: {plain: {model.shortcut.kind: none}}\n" + tail
    with pytest.raises(UserError, match=re.escape(needle)):
        study_mod.plan(str(write(in_tmp / "g.yaml", text)))


def test_preset_sits_under_rows_and_row_presets_on_top(in_tmp):
    text = TINY + "presets:\n  quick:\n    overrides: {optim.lr: 0.2, model.widths: [8]}\n    seeds: [5]\n"
    text = text.replace("overrides: {model.shortcut.kind: none}",
                        "overrides: {model.shortcut.kind: none, optim.lr: 0.01}\n"
                        "    presets: {quick: {model.widths: [2]}}")
    plan = study_mod.plan(str(write(in_tmp / "p.yaml", text)), preset="quick")
    assert plan.seeds == [5]
    assert (plan.rows[0].spec.optim.lr, plan.rows[0].spec.model.widths) == (0.2, [8])
    assert (plan.rows[1].spec.optim.lr, plan.rows[1].spec.model.widths) == (0.01, [2])


@pytest.mark.parametrize("text, expected", [
    (TINY + "colour: red\n", "unknown key 'colour'; valid keys in a study: title"),
    (TINY.replace("  - label: plain", "  - lable: plain"), "rows.1.label: Field required"),
    (TINY.replace("paper: 1.5", "paper: 1.5\n    overide: {}"), "unknown key 'rows.0.overide'; did you mean 'rows.0.overrides'? valid keys in a row"),
    (TINY + "presets:\n  quick: {seeds: [0], overrides: {}, speed: 2}\n", "unknown key 'presets.quick.speed'"),
    (TINY.replace("overrides: {model.shortcut.kind: none}", "overrides: {model.shortcut.kind: bogus}"),
     "row 2 'plain': model.shortcut.kind"),
    (TINY.replace("overrides: {model.shortcut.kind: none}", "overrides: {model.shortcut.knd: none}"),
     "row 2 'plain': unknown key 'model.shortcut.knd'"),
    (TINY.replace("overrides: {model.shortcut.kind: none}", "overrides: {model.depth: 7}"),
     "row 2 'plain': model.depth 7 is not 2n+2"),
    (TINY.replace("label: plain", "label: identity"), "same label"),
    (TINY.replace("seeds: [0, 1]", "seeds: [0, 0]"), "repeats a seed"),
    (TINY + "grid: {optim.lr: [0.1]}\n", "exactly one of `rows`"),
    (TINY.replace("paper: 1.5", "paper: great"), "rows.0.paper"),
])
def test_bad_studies_fail_in_one_line(in_tmp, text, expected):
    path = write(in_tmp / "bad.yaml", text)
    r = invoke("ablate", path, "--list")
    assert r.exit_code == 2, r.output
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in r.stderr, r.stderr
    assert expected in lines[0], lines[0]
    assert str(path) in lines[0]


def test_unknown_study_and_preset(in_tmp, tiny):
    r = invoke("ablate", "shortcuts")
    assert r.exit_code == 2 and "unknown study 'shortcuts'; shipped studies: activation, " in r.stderr
    shipped = r.stderr.split("shipped studies: ")[1].split(" (")[0].split(", ")
    assert shipped == sorted(shipped) and {"shortcut", "zero-init", "activation-modern", "transformer-ln"} <= set(shipped)
    r = invoke("ablate", tiny, "--preset", "fast", "--list")
    assert r.exit_code == 2 and "unknown preset 'fast'; valid: paper, quick" in r.stderr


# ---------------------------------------------------------------------------------------------
# Sweeps


def test_sweep_json_skip_and_figure(in_tmp, tiny, monkeypatch):
    r = invoke("ablate", tiny, "--out", "res", "--jobs", 1, "--json")
    assert r.exit_code == 0, r.stderr
    rows = rows_of(r.stdout)
    assert [x["row"] for x in rows] == ["identity", "plain"]
    for x in rows:
        for key in ("row", "test_error_median", "test_error_mean", "test_error_std", "n", "train_loss", "status",
                    "paper"):
            assert key in x
        assert x["n"] == 2 and x["status"] == "completed" and len(x["test_errors"]) == 2
    assert rows[0]["paper"] == 1.5 and rows[1]["paper"] == "fail"
    assert (in_tmp / "res" / "tiny.png").stat().st_size > 1000
    run = in_tmp / "res" / "02-plain-s1"
    assert json.loads((run / "study.json").read_text())["row"] == "plain"
    # A second invocation trains nothing.
    import resnet_cli.training.trainer as train_mod

    def refuse(*a, **k):
        raise AssertionError("a finished run was trained again")

    monkeypatch.setattr(train_mod.Trainer, "run", refuse)
    again = invoke("ablate", tiny, "--out", "res", "--jobs", 1, "--json")
    assert again.exit_code == 0, again.stderr
    assert rows_of(again.stdout) == rows
    assert "0 run(s) trained, 4 already finished" in again.stderr


def test_unfinished_run_resumes_from_its_checkpoint(in_tmp, tiny):
    from resnet_cli.runs.writer import RunDir
    from resnet_cli.training.trainer import Callback, StopFlag, Trainer

    text = TINY.replace("epochs: 1", "epochs: 2").replace("seeds: [0, 1]", "seeds: [0]")
    plan = study_mod.plan(str(write(in_tmp / "two.yaml", text)), results="res")
    run = plan.runs[0]

    class StopAfterFirstEpoch(Callback):
        def on_epoch(self, t, record):
            t.stop.signum = signal.SIGTERM  # as a scheduler's SIGTERM would

    sweep.write_study_json(plan, run)
    rd = RunDir(run.path)
    rd.create(run.spec, runtime={})
    Trainer(run.spec, rd, callbacks=[StopAfterFirstEpoch()], stop=StopFlag()).run()
    (run.path / "summary.json").unlink()  # a checkpoint, no summary: killed after saving
    first = json_lines((run.path / "metrics.jsonl").read_text())
    assert [m["epoch"] for m in first] == [1] and (run.path / "checkpoint.pt").exists()

    r = invoke("ablate", "two.yaml", "--out", "res", "--only", "1:0", "--json")
    assert r.exit_code == 0, r.stderr
    (rec,) = json_lines(r.stdout)
    assert rec["status"] == "completed" and not rec["skipped"]
    metrics = json_lines((run.path / "metrics.jsonl").read_text())
    assert [m["epoch"] for m in metrics] == [1, 2]
    assert metrics[0] == first[0]  # epoch 1 was not trained again
    assert json.loads((run.path / "summary.json").read_text())["iterations"] == 4


def test_diverged_row_is_marked_and_the_sweep_goes_on(in_tmp):
    path = write(in_tmp / "blow.yaml", TINY.replace("seeds: [0, 1]", "seeds: [0]") + BLOWUP)
    r = invoke("ablate", path, "--out", "res", "--jobs", 1, "--json")
    assert r.exit_code == 0, r.stderr
    rows = {x["row"]: x for x in rows_of(r.stdout)}
    # Counted, not left out: a failed run at the digits' chance error, 9 in 10 wrong.
    assert rows["absurd lr"]["status"] == "diverged" and rows["absurd lr"]["n"] == 1
    assert rows["absurd lr"]["diverged"] == 1 and rows["absurd lr"]["test_error_median"] == 90.0
    assert rows["identity"]["status"] == rows["plain"]["status"] == "completed"
    # One run alone reports divergence as `resnet train` does: exit code 3.
    shutil.rmtree(in_tmp / "res" / "03-absurd-lr-s0")
    one = invoke("ablate", path, "--out", "res", "--only", "3:0", "--json")
    assert one.exit_code == 3 and json_lines(one.stdout)[0]["status"] == "diverged"


def test_list_prints_one_command_per_run_and_each_runs_one(in_tmp, tiny):
    r = invoke("ablate", tiny, "--preset", "paper", "--out", "shared", "--set", "optim.lr=0.05", "--list")
    assert r.exit_code == 0
    lines = r.stdout.strip().splitlines()
    assert len(lines) == 4
    argv = [shlex.split(line) for line in lines]
    # This interpreter by its absolute path: the line runs where the venv is not on PATH.
    assert all(a[:4] == [sys.executable, "-m", "resnet_cli", "ablate"] for a in argv)
    assert all("--only" in a and a[a.index("--out") + 1] == "shared" for a in argv)
    assert [a[a.index("--only") + 1] for a in argv] == ["1:0", "1:1", "2:0", "2:1"]
    assert all(a[a.index("--set") + 1] == "optim.lr=0.05" for a in argv)
    one = invoke(*argv[2][3:])
    assert one.exit_code == 0, one.stderr
    (rec,) = json_lines(one.stdout)
    assert (rec["row"], rec["seed"], rec["status"]) == ("plain", 0, "completed")
    # the family, fixed at the first start, and what was asked (seeds, recipe) for `resnet report`
    assert sorted(p.name for p in (in_tmp / "shared").iterdir()) == ["02-plain-s0", "asked.json", "claims.json"]


def test_a_list_line_starts_with_what_runs_without_path_or_with_resnet_given(in_tmp, tiny, monkeypatch):
    r = invoke("ablate", tiny, "--out", "shared", "--list")
    head = shlex.split(r.stdout.splitlines()[0])[:3]
    alone = subprocess.run([*head, "--version"], env={}, capture_output=True, text=True, timeout=60)  # no PATH
    assert alone.returncode == 0 and alone.stdout.startswith("resnet "), alone.stderr
    monkeypatch.setenv("RESNET", "srun resnet")
    r = invoke("ablate", tiny, "--out", "shared", "--list")
    assert all(shlex.split(line)[:3] == ["srun", "resnet", "ablate"] for line in r.stdout.splitlines())


def test_report_rebuilds_the_same_table_from_gathered_dirs(in_tmp, tiny):
    r = invoke("ablate", tiny, "--out", "res", "--jobs", 1, "--json")
    assert r.exit_code == 0
    # Gather the runs as if from two machines, into one directory with other things in it.
    for i, run in enumerate(sorted((in_tmp / "res").glob("0*"))):
        shutil.copytree(run, in_tmp / "gathered" / f"machine{i % 2}" / run.name)
    shutil.copy(in_tmp / "res" / "claims.json", in_tmp / "gathered")  # the family recorded at the start travels too
    rep = invoke("report", in_tmp / "gathered", "--json", "--figure", in_tmp / "fig.png")
    assert rep.exit_code == 0, rep.stderr
    assert json_lines(rep.stdout) == json_lines(r.stdout)
    assert (in_tmp / "fig.png").is_file()
    # Plain `resnet train` runs are reported too, grouped by spec with seeds pooled.
    for seed in (0, 1):
        t = invoke("train", "digits/residual8", "--set", "model.widths=[4]", "--set", "data.train_subset=128",
                   "--epochs", 1, "--seed", seed, "--out", in_tmp / "loose" / f"s{seed}")
        assert t.exit_code == 0, t.stderr
    loose = rows_of(invoke("report", in_tmp / "loose", "--json").stdout)
    assert len(loose) == 1 and loose[0]["study"] == "runs" and loose[0]["n"] == 2


def test_report_table_and_errors(in_tmp, tiny):
    assert invoke("ablate", tiny, "--out", "res", "--jobs", 1).exit_code == 0
    from resnet_cli.results import report

    (table,) = report.aggregate(report.collect(in_tmp / "res"))
    assert [row.n for row in table.rows] == [2, 2] and table.dataset == "digits"
    r = invoke("report", in_tmp / "nothing-here")
    assert r.exit_code == 2 and "no such directory" in r.stderr
    (in_tmp / "empty").mkdir()
    assert "no run directories" in invoke("report", in_tmp / "empty").stderr


def test_changed_study_does_not_reuse_old_runs(in_tmp, tiny):
    assert invoke("ablate", tiny, "--out", "res", "--jobs", 1, "--json").exit_code == 0
    write(tiny, TINY.replace("overrides: {model.shortcut.kind: none}",
                             "overrides: {model.shortcut.kind: none, optim.lr: 0.02}"))
    r = invoke("ablate", tiny, "--out", "res", "--jobs", 1, "--json")
    assert r.exit_code == 2
    rows = {x["row"]: x for x in rows_of(r.stdout)}
    assert rows["plain"]["status"] == "error" and rows["identity"]["status"] == "completed"
    assert "holds a run with another spec (optim.lr)" in r.stderr


@pytest.mark.slow
def test_jobs_run_in_child_processes(in_tmp, tiny):
    text = TINY.replace("seeds: [0, 1]", "seeds: [0]").split("  - label: plain")[0] + BLOWUP
    r = invoke("ablate", write(in_tmp / "kids.yaml", text), "--out", "res", "--jobs", 2, "--json")
    assert r.exit_code == 0, r.stderr
    rows = {x["row"]: x for x in rows_of(r.stdout)}
    assert [rows[k]["status"] for k in ("identity", "absurd lr")] == ["completed", "diverged"]
    assert (in_tmp / "res" / "01-identity-s0" / "ablate.log").is_file()


def test_only_rejects_bad_keys(in_tmp, tiny):
    plan = study_mod.plan(str(tiny))
    with pytest.raises(UserError, match="no row 9"):
        plan.find("9:0")
    with pytest.raises(UserError, match="expected ROW:SEED"):
        plan.find("plain")
    assert plan.find("2:7").seed == 7  # any seed of a row can be run alone


def test_data_that_cannot_be_read_stops_the_sweep_before_it_starts(in_tmp, tiny):
    # CIFAR-10 is not there and may not be downloaded: every run would fail alike, so the study is
    # refused in one line before any run directory is made.
    (in_tmp / "empty").mkdir()
    r = invoke("ablate", tiny, "--out", "res", "--jobs", 1, "--set", "data.dataset=cifar10",
               "--set", "data.download=false", "--set", f"data.dir={in_tmp / 'empty'}")
    assert r.exit_code == 2, r.output
    lines = r.stderr.strip().splitlines()
    assert "Traceback" not in r.stderr and len(lines) == 1
    assert lines[0].startswith("resnet: error: CIFAR-10 not found")
    assert not (in_tmp / "res").exists()


@pytest.mark.slow
def test_threads_reach_every_run_and_finished_runs_are_still_reused(in_tmp, tiny):
    # Two workers would get one core each on this 2-core machine, and tests run torch with one
    # thread: 3 threads per run is what only the flag can give.
    r = invoke("ablate", str(tiny), "--out", "res", "--jobs", 2, "--threads", 3, "--json")
    assert r.exit_code == 0, r.stderr
    metas = sorted((in_tmp / "res").glob("*/meta.json"))
    assert len(metas) == 4
    # What torch itself reported inside each run, not the flag echoed back.
    assert all(json.loads(m.read_text())["threads"] == 3 for m in metas)
    again = invoke("ablate", str(tiny), "--out", "res", "--threads", 1, "--json")
    assert again.exit_code == 0, again.stderr
    assert "0 run(s) trained, 4 already finished" in again.stderr
