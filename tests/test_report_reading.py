"""results/report.py reading run directories written by hand, file by file: what each file a run
leaves (spec.yaml, summary.json, study.json, metrics.jsonl, slurm.json, meta.json) puts into its
row's seed, which copies of one run `resnet report` keeps, how loose `resnet train` runs are named
and numbered, the rows of `report --runs`, and the labels of a net that belongs to no study. Every
expected value is written out by hand here."""

import json
from dataclasses import replace
from pathlib import Path

from resnet_cli.results import report
from resnet_cli.spec.yamlio import flat_dotted
from resnet_cli.results.records import SeedResult
from resnet_cli.sweep import plan as plan_mod

# A digits net (10 classes: a net that guesses errs 100 (1 - 1/10) = 90% of the time).
NET = {"model": {"family": "digits", "depth": 8, "widths": [4]}, "data": {"dataset": "digits"}}


def write(path: Path, spec=None, summary=None, study=None, metrics=None, slurm=None, meta=None) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    if spec is not None:
        (path / "spec.yaml").write_text(json.dumps(spec))  # JSON is YAML
    for name, obj in (("summary.json", summary), ("study.json", study), ("slurm.json", slurm), ("meta.json", meta)):
        if obj is not None:
            (path / name).write_text(json.dumps(obj))
    if metrics is not None:
        (path / "metrics.jsonl").write_text("".join(json.dumps(m) + "\n" for m in metrics))
    return path


def net(seed=0, lr=None, **model) -> dict:
    tree = {"model": {**NET["model"], **model}, "data": dict(NET["data"]), "run": {"seed": seed}}
    if lr is not None:
        tree["optim"] = {"lr": lr}
    return tree


DONE = {"status": "completed", "test_error": 4.5, "train_loss": 0.12, "train_error": 1.25, "val_error": 6.0,
        "wall_time_s": 31.5, "params": 1234}
STUDY = {"study": "shortcut", "title": "Shortcuts", "preset": "quick", "paper_metric": "CIFAR-10 test error",
         "index": 3, "row": "gated", "seed": 7, "paper": 8.7, "fail_above": 20.0, "budget": 2, "group": "g"}


# ---------------------------------------------------------------------------------------------
# describe: the label of a net that belongs to no study


def test_a_loose_nets_label_names_net_unit_shortcut_option_and_data():
    tree = {"model": {"family": "cifar", "depth": 110, "unit": "full_preact", "shortcut": {"kind": "projection"},
                      "downsample": "B"}, "data": {"dataset": "cifar100"}}
    assert report.describe(tree) == "cifar110 full_preact projection option B cifar100"
    tree["model"].update(shortcut={"kind": "none"}, zero_init_last_bn=True)
    assert report.describe(tree) == "cifar110 full_preact plain option B cifar100 zero-init"


def test_a_label_says_what_a_spec_leaves_out():
    assert report.describe({}) == "?? original identity option ? ?"
    assert report.describe({"model": {"shortcut": {}}, "data": {}}) == "?? original identity option ? ?"
    assert report.describe({"model": {"zero_init_last_bn": False}}) == "?? original identity option ? ?"


# ---------------------------------------------------------------------------------------------
# seed_result: one run directory as one seed


def test_a_study_runs_files_fill_every_field_of_its_seed(tmp_path):
    d = write(tmp_path / "03-gated-s7", spec=net(7), summary=DONE, study=STUDY)
    r = report.seed_result(d)
    assert (r.path, r.study, r.title, r.preset, r.paper_metric, r.index, r.row, r.seed, r.paper, r.status) == (
        d, "shortcut", "Shortcuts", "quick", "CIFAR-10 test error", 3, "gated", 7, 8.7, "completed")
    assert (r.fail_above, r.budget, r.group, r.message, r.dataset, r.chance) == (20.0, 2, "g", "", "digits", 90.0)
    assert (r.test_error, r.train_loss, r.train_error, r.wall_s, r.params) == (4.5, 0.12, 1.25, 31.5, 1234)


def test_a_study_json_that_says_little_takes_the_defaults(tmp_path):
    d = write(tmp_path / "planned-here", study={})  # planned: study.json alone, training not begun
    r = report.seed_result(d)
    assert (r.study, r.title, r.preset, r.paper_metric, r.index, r.row, r.seed, r.paper) == (
        "?", "?", "-", None, 0, "planned-here", None, None)
    assert (r.status, r.fail_above, r.budget, r.group, r.dataset, r.chance, r.test_error) == (
        "pending", None, 1, None, None, None, None)


def test_the_error_a_row_reports_is_the_studys_metric_unless_the_caller_names_one(tmp_path):
    d = write(tmp_path / "r", spec=net(), summary=DONE, study={**STUDY, "metric": "val_error"})
    assert report.seed_result(d).test_error == 6.0
    assert report.seed_result(d, "train_error").test_error == 1.25
    plain = write(tmp_path / "p", spec=net(), summary=DONE, study={"study": "s"})
    assert report.seed_result(plain).test_error == 4.5


def test_a_run_outside_any_study_is_a_seed_of_the_runs_table_labelled_by_its_spec(tmp_path):
    d = write(tmp_path / "loose", spec=net(5, unit="full_preact"), summary={**DONE, "status": "diverged"})
    r = report.seed_result(d)
    assert (r.study, r.title, r.preset, r.paper_metric, r.index, r.seed, r.paper, r.status) == (
        "runs", "runs", "-", None, 0, 5, None, "diverged")
    assert r.row == "digits8 full_preact identity option A digits"
    assert (r.dataset, r.chance, r.counted()) == ("digits", 90.0, 90.0)


def test_a_run_still_going_shows_its_last_epoch_and_a_cut_off_one_its_status(tmp_path):
    d = write(tmp_path / "going", spec=net(), study={"study": "s"},
              metrics=[{"epoch": 1, "test_error": 40.0, "train_loss": 1.5},
                       {"epoch": 2, "test_error": 30.0, "train_loss": 0.9, "val_error": 33.0}])
    r = report.seed_result(d)
    assert (r.status, r.test_error, r.train_loss, r.train_error, r.wall_s) == ("unfinished", 30.0, 0.9, None, None)
    assert report.seed_result(d, "val_error").test_error == 33.0
    # study.json and metrics but no spec: not a run that trained here; its records are not read
    bare = write(tmp_path / "bare", study={"study": "s"}, metrics=[{"test_error": 12.0, "train_loss": 0.5}])
    assert (report.seed_result(bare).test_error, report.seed_result(bare).train_loss) == (None, None)


def test_a_failed_slurm_task_is_an_error_with_its_message(tmp_path):
    d = write(tmp_path / "r", spec=net(), study={"study": "s"},
              slurm={"state": "failed", "job": "88_1", "message": "out of memory", "log": "/logs/88_1.err"})
    r = report.seed_result(d)
    assert (r.status, r.message) == ("error", "task 88_1 failed: out of memory; log: /logs/88_1.err")


def test_a_spec_this_version_rejects_keeps_its_dataset_but_no_chance(tmp_path):
    d = write(tmp_path / "r", spec={**net(), "bogus": 1}, summary=DONE)
    r = report.seed_result(d)
    assert (r.dataset, r.chance, r.test_error) == ("digits", None, 4.5)
    bare = report.seed_result(write(tmp_path / "b", spec={"model": {"family": "digits"}, "bogus": 1}))
    assert (bare.seed, bare.dataset, bare.chance, bare.row) == (None, None, None, "digits? original identity option ? ?")
    cifar100 = write(tmp_path / "c", spec={"model": {"family": "cifar", "depth": 20}, "data": {"dataset": "cifar100"}},
                     summary=DONE)
    assert report.seed_result(cifar100).chance == 99.0


def test_a_directory_that_is_no_run_is_none(tmp_path):
    assert report.seed_result(write(tmp_path / "empty")) is None
    assert report.seed_result(write(tmp_path / "only-summary", summary=DONE)) is None


# ---------------------------------------------------------------------------------------------
# The dotted spec a loose run is grouped by


def test_a_spec_flattens_to_dotted_keys_with_empty_sections_kept():
    assert flat_dotted({"a": {"b": 1, "c": {}}, "d": [1, 2]}) == {"a.b": 1, "a.c": {}, "d": [1, 2]}
    assert flat_dotted({}) == {"": {}}
    assert flat_dotted(3) == {"": 3}


def test_a_specs_key_leaves_out_seed_and_out_and_ignores_key_order():
    one = {"run": {"seed": 1, "out": "a"}, "b": {"y": 2, "x": Path("p")}}
    assert report._spec_key(one) == '{"b.x": "p", "b.y": 2}'
    assert report._spec_key({"b": {"x": Path("p"), "y": 2}, "run": {"seed": 9, "out": "z"}}) == report._spec_key(one)
    assert report._spec_key({"run": {"seed": 1, "threads": 2}}) == '{"run.threads": 2}'


def loose(path: str, label: str) -> SeedResult:
    return SeedResult(path=Path(path), study="runs", title="runs", preset="-", paper_metric=None, index=0,
                      row=label, seed=0, paper=None, status="completed")


def test_loose_runs_are_numbered_by_spec_and_twins_told_apart_by_where_they_differ():
    trees = {Path("a"): {"model": {"depth": 8}, "optim": {"lr": 0.1}, "run": {"seed": 0}},
             Path("b"): {"model": {"depth": 8}, "optim": {"lr": 0.05}, "extra": 1},
             Path("c"): {"model": {"depth": 8}, "optim": {"lr": 0.1}, "run": {"seed": 4, "out": "c"}},
             Path("d"): {"model": {"depth": 20}}}
    runs = [loose("d", "M"), loose("a", "L"), loose("b", "L"), loose("c", "L")]
    report._label_loose(runs, trees)
    assert [(r.index, r.row) for r in runs] == [
        (1, "M"), (2, "L (extra=-, optim.lr=0.1)"), (3, "L (extra=1, optim.lr=0.05)"), (2, "L (extra=-, optim.lr=0.1)")]


# ---------------------------------------------------------------------------------------------
# collect: each run once


def test_the_same_study_run_found_twice_is_one_seed_the_finished_copy_kept(tmp_path):
    study = {"study": "s", "preset": "quick", "index": 1, "row": "a", "seed": 0}
    write(tmp_path / "a" / "01-a-s0", spec=net(), study=study)  # cut off on one machine
    write(tmp_path / "b" / "01-a-s0", spec=net(), study=study, summary=DONE)  # finished on another
    write(tmp_path / "c" / "01-a-s0", spec=net(), study=study, summary={**DONE, "test_error": 9.9})
    write(tmp_path / "c" / "01-a-s1", spec=net(1), study={**study, "seed": 1})  # unfinished, kept
    write(tmp_path / "d" / "01-a-s0", spec=net(), study={**study, "budget": 2}, summary=DONE)  # --budgets 2x
    dups: list[Path] = []
    kept = report.collect(tmp_path, dups)
    assert [r.path.relative_to(tmp_path).as_posix() for r in kept] == ["b/01-a-s0", "c/01-a-s1", "d/01-a-s0"]
    assert [p.relative_to(tmp_path).as_posix() for p in dups] == ["c/01-a-s0", "a/01-a-s0"]
    assert [r.status for r in kept] == ["completed", "unfinished", "completed"]
    assert [r.path for r in report.collect(tmp_path)] == [r.path for r in kept]  # no list to fill: none asked


def test_of_two_finished_copies_the_first_by_its_path_as_text_is_kept(tmp_path):
    study = {"study": "s", "preset": "quick", "index": 1, "row": "a", "seed": 0}
    write(tmp_path / "b" / "01-a-s0", spec=net(), study=study, summary=DONE)
    write(tmp_path / "b-copy" / "01-a-s0", spec=net(), study=study, summary={**DONE, "test_error": 9.9})
    dups: list[Path] = []
    [kept] = report.collect(tmp_path, dups)  # "b-copy/..." sorts before "b/..." ('-' before '/')
    assert (kept.path, kept.test_error, dups) == (tmp_path / "b-copy" / "01-a-s0", 9.9, [tmp_path / "b" / "01-a-s0"])


def test_loose_runs_pool_seeds_of_one_spec_and_keep_specs_that_differ(tmp_path):
    write(tmp_path / "x1", spec={**net(0, lr=0.1), "run": {"seed": 0, "out": "x1"}}, summary=DONE)
    write(tmp_path / "x2", spec={**net(0, lr=0.1), "run": {"seed": 0, "out": "x2"}}, summary=DONE)  # a copy
    write(tmp_path / "x3", spec=net(1, lr=0.1), summary=DONE)
    write(tmp_path / "y", spec=net(0, lr=0.05), summary=DONE)  # same label, same seed, another lr
    write(tmp_path / "z", spec=net(0, shortcut={"kind": "none"}), summary=DONE)
    dups: list[Path] = []
    kept = report.collect(tmp_path, dups)
    label = "digits8 original identity option A digits"
    assert [(r.path.name, r.index, r.row, r.seed) for r in kept] == [
        ("x1", 1, f"{label} (optim.lr=0.1)", 0), ("x3", 1, f"{label} (optim.lr=0.1)", 1),
        ("y", 2, f"{label} (optim.lr=0.05)", 0), ("z", 3, "digits8 original plain option A digits", 0)]
    assert dups == [tmp_path / "x2"]


# ---------------------------------------------------------------------------------------------
# planned: a study's runs as the plan has them, on disk or not


def test_planned_runs_read_what_is_on_disk_and_say_what_is_not(tmp_path):
    plan = plan_mod.plan("activation", "quick", results=tmp_path)
    done, going, failed, moved = plan.runs[0], plan.runs[1], plan.runs[2], plan.runs[3]
    write(done.path, spec=net(), summary=DONE,
          study={**done.record(plan), "row": "an older label", "index": 9, "paper_metric": "older", "group": "x"})
    write(moved.path, spec=net(), summary=DONE)  # a plain run where the plan puts one: not the plan's
    recs = report.planned(plan, running={done.key, going.key}, errors={failed.key: "no GPU"})
    assert len(recs) == len(plan.runs) == 10 * 11
    first = recs[0]  # labelled as the plan has it now, its figures from disk, finished whatever the sweep says
    assert (first.study, first.title, first.preset, first.index, first.row, first.paper, first.group) == (
        "activation", plan.title, "quick", 1, "(a) original, 110", 6.61, "ResNet-110")
    assert first.paper_metric == plan.paper_metric == "CIFAR-10 test error % (He 2016b Table 2, median of 5)"
    assert (first.status, first.test_error, first.fail_above, first.budget, first.dataset) == (
        "completed", 4.5, None, 1, "digits")
    assert (recs[1].status, recs[1].seed, recs[1].path, recs[1].paper_metric) == (
        "running", 101, going.path, plan.paper_metric)
    assert (recs[2].status, recs[2].message) == ("error", "no GPU")
    pending = recs[3]
    assert (pending.status, pending.study, pending.title, pending.preset, pending.paper_metric) == (
        "pending", "activation", plan.title, "quick", plan.paper_metric)
    assert (pending.index, pending.row, pending.seed, pending.paper, pending.group, pending.path) == (
        1, "(a) original, 110", 103, 6.61, "ResNet-110", moved.path)
    assert (pending.test_error, pending.dataset, pending.chance, pending.budget) == (None, "digits", 90.0, 1)
    assert {r.status for r in recs[4:]} == {"pending"}
    assert (recs[-1].index, recs[-1].row, recs[-1].seed, recs[-1].group) == (10, "(e) full pre-activation, 164",
                                                                             110, "ResNet-164")


def test_a_planned_run_reports_the_plans_metric_and_takes_its_budget(tmp_path):
    plan = replace(plan_mod.plan("shortcut", "quick", results=tmp_path), metric="train_error")
    run = replace(plan.runs[0], budget=3)
    write(run.path, study={"study": "shortcut", "metric": "test_error"}, summary=DONE)  # no spec.yaml
    rec = report.planned_run(plan, run)
    assert (rec.test_error, rec.budget, rec.dataset, rec.status, rec.fail_above) == (1.25, 3, "digits", "completed", 20.0)
    assert (report.planned_run(plan, replace(plan.runs[1], budget=2)).budget, plan.runs[1].budget) == (2, 1)
    assert report.planned_run(plan, plan.runs[5]).status == "pending"  # not running unless told


# ---------------------------------------------------------------------------------------------
# `resnet report --runs`: one row per run directory


def test_run_rows_hold_each_runs_figures_status_and_provenance(tmp_path):
    meta = {"params": 999, "device": "cuda:0", "threads": 4, "versions": {"torch": "2.14.1"}, "git_commit": "abc123"}
    study = {"study": "s", "preset": "quick", "index": 1, "row": "a", "group": "g"}
    write(tmp_path / "1", spec=net(), study={**study, "seed": 0}, meta=meta,
          summary={**DONE, "epochs": 6, "iterations": 180, "device": "cpu"})
    write(tmp_path / "2", spec=net(1), study={**study, "seed": 1}, meta=meta,
          summary={"status": "diverged", "test_error": None, "epochs": 2, "wall_time_s": 3.0})
    write(tmp_path / "3", spec=net(2), study={**study, "seed": 2}, summary={"status": "interrupted", "test_error": 50.0, "train_loss": 2.0})
    write(tmp_path / "4", spec=net(3), study={**study, "seed": 3}, slurm={"state": "failed"})
    write(tmp_path / "5", spec=net(4), study={**study, "seed": 4})
    write(tmp_path / "0", study={**study, "seed": 5})  # planned, nothing run: no row
    rows = report.run_rows(report.collect(tmp_path))
    common = {"event": "run", "study": "s", "preset": "quick", "index": 1, "row": "a", "group": "g"}
    assert rows[0] == {**common, "seed": 0, "status": "completed", "test_error": 4.5, "counted_error": 4.5,
                       "train_loss": 0.12, "train_error": 1.25, "epochs": 6, "iterations": 180, "wall_s": 31.5,
                       "params": 1234, "device": "cpu", "threads": 4, "torch": "2.14.1", "git_commit": "abc123",
                       "run_dir": str(tmp_path / "1")}
    assert rows[1] == {**common, "seed": 1, "status": "diverged", "test_error": None, "counted_error": 90.0,
                       "train_loss": None, "train_error": None, "epochs": 2, "iterations": None, "wall_s": 3.0,
                       "params": 999, "device": "cuda:0", "threads": 4, "torch": "2.14.1", "git_commit": "abc123",
                       "run_dir": str(tmp_path / "2")}
    nothing = {"train_error": None, "epochs": None, "iterations": None, "wall_s": None, "params": None,
               "device": None, "threads": None, "torch": None, "git_commit": None}
    assert rows[2] == {**common, **nothing, "seed": 2, "status": "interrupted", "test_error": 50.0,
                       "counted_error": None, "train_loss": 2.0, "run_dir": str(tmp_path / "3")}
    assert [(r["seed"], r["status"]) for r in rows[3:]] == [(3, "failed"), (4, "unfinished")]
    assert len(rows) == 5
