"""`resnet ablate --budgets`: rows at multiples of the preset's length, told apart as trains / slow /
fails, from run directories alone (tiny digits nets, or hand-made run directories)."""

import json
from pathlib import Path

from rich.console import Console

from resnet_cli import spec as spec_mod
from resnet_cli.sweep import budgets
from resnet_cli.results import report as report_mod
from resnet_cli.sweep import plan as study_mod

from invoking import invoke
from processes import TINY_STUDY

# One-epoch runs of two iterations (128 images at batch 64), one seed, a 4-layer digits net.
TINY = """
title: tiny study
fail_above: 50.0
""" + TINY_STUDY + """rows:
  - label: identity
  - label: plain
    overrides: {model.shortcut.kind: none}
"""


def test_milestones_and_length_scale_with_the_budget():
    # He 2016a: 64k iterations, lr steps at 32k and 48k; twice the budget by hand: 128k, 64k and 96k.
    optim = spec_mod.validate({"optim": {"iters": 64000, "milestones": [32000, 48000], "warmup_iters": 400}}).optim
    twice = budgets.scale_optim(optim, 2)
    assert (twice.iters, twice.milestones, twice.warmup_iters) == (128000, [64000, 96000], 400)
    # A preset in epochs scales epochs, not iterations.
    ep = budgets.scale_optim(spec_mod.validate({"optim": {"epochs": 15, "milestones": [8, 12]}}).optim, 4)
    assert (ep.iters, ep.epochs, ep.milestones) == (None, 60, [32, 48])


def test_verdict_on_hand_made_numbers():
    assert budgets.verdict({1: 12.0, 2: 8.0}, 20.0) == "trains"
    assert budgets.verdict({1: 35.0, 2: 19.0, 4: 5.0}, 20.0) == "slow"
    assert budgets.verdict({1: 88.0, 2: 88.1, 4: 87.9}, 20.0) == "fails"
    # Above 20% at every budget but 11 points lower at 4x (He 2016b's 1x1 conv row on digits): not "fails".
    assert budgets.verdict({1: 82.5, 2: 77.2, 4: 71.1}, 20.0) == "falling"
    assert budgets.verdict({1: 30.0, 2: 28.5}, 20.0) == "fails"  # 1.5 points: not past FALLING
    assert budgets.verdict({1: 88.0, 2: None}, 20.0) == "incomplete"


def test_budget_one_is_the_plain_study_run(in_tmp):
    path = in_tmp / "tiny.yaml"
    path.write_text(TINY)
    plain = study_mod.plan(str(path), results="res")
    both = budgets.expand(plain, [1, 2])
    assert [r.path for r in both.runs if r.budget == 1] == [r.path for r in plain.runs]
    assert [r.spec for r in both.runs if r.budget == 1] == [r.spec for r in plain.runs]
    two = [r for r in both.runs if r.budget == 2]
    assert [r.path for r in two] == [Path("res") / "budget-2x" / r.path.name for r in plain.runs]
    assert [r.spec.optim.epochs for r in two] == [2, 2]
    assert both.find("2:0@2x").path == two[1].path


def _run(root, name, index, row, errors_by_iter, budget=1):
    d = root / name
    d.mkdir(parents=True)
    rec = {"study": "made", "title": "made-up", "preset": "quick", "index": index, "row": row, "seed": 0,
           "fail_above": 20.0, **({"budget": budget} if budget != 1 else {})}
    (d / "study.json").write_text(json.dumps(rec))
    lines = [json.dumps({"event": "epoch", "iter": it, "test_error": e}) for it, e in errors_by_iter.items()]
    (d / "metrics.jsonl").write_text("\n".join(lines) + "\n")
    last = errors_by_iter[max(errors_by_iter)]
    (d / "summary.json").write_text(json.dumps({"status": "completed", "test_error": last}))


def test_report_rebuilds_the_budget_table_from_run_directories(in_tmp):
    root = in_tmp / "res"
    _run(root, "01-a-s0", 1, "a", {100: 30.0, 200: 15.0})
    _run(root / "budget-2x", "01-a-s0", 1, "a", {200: 25.0, 400: 5.0}, 2)
    _run(root, "02-b-s0", 2, "b", {100: 60.0, 200: 40.0})
    _run(root / "budget-2x", "02-b-s0", 2, "b", {200: 30.0, 400: 18.0}, 2)
    _run(root, "03-c-s0", 3, "c", {100: 90.0, 200: 90.0})
    _run(root / "budget-2x", "03-c-s0", 3, "c", {200: 90.0, 400: 89.0}, 2)
    r = invoke("report", root, "--json")
    assert r.exit_code == 0, r.stderr
    rows = [json.loads(line) for line in r.stdout.splitlines()]
    assert [(x["row"], x["verdict"]) for x in rows] == [("a", "trains"), ("b", "slow"), ("c", "fails")]
    assert [x["iters_to_threshold"] for x in rows] == [200, 400, None]
    assert rows[1]["test_error_median"] == {"1x": 40.0, "2x": 18.0}
    tighter = [json.loads(line) for line in invoke("report", root, "--json", "--threshold", 10).stdout.splitlines()]
    # b: 40% then 18%, above 10% at both budgets but 22 points lower: falling, not fails; c: 90 -> 89.
    assert [x["verdict"] for x in tighter] == ["slow", "falling", "fails"]


def test_ablate_budgets_1_2_gives_a_slow_or_fails_column(in_tmp):
    (in_tmp / "tiny.yaml").write_text(TINY)
    r = invoke("ablate", "tiny.yaml", "--out", "res", "--jobs", 1, "--budgets", "1,2", "--json")
    assert r.exit_code == 0, r.stderr
    rows = [json.loads(line) for line in r.stdout.splitlines()]
    assert [x["row"] for x in rows] == ["identity", "plain"]
    assert all(x["verdict"] in ("trains", "slow", "fails") and x["n"] == {"1x": 1, "2x": 1} for x in rows)
    # The 2x run trained twice as long (two epochs of two iterations), in its own directory.
    metrics = (in_tmp / "res" / "budget-2x" / "01-identity-s0" / "metrics.jsonl").read_text().splitlines()
    assert [json.loads(m)["iter"] for m in metrics if json.loads(m)["event"] == "epoch"] == [2, 4]
    again = invoke("ablate", "tiny.yaml", "--out", "res", "--budgets", "1,2", "--json")
    assert again.exit_code == 0 and "0 run(s) trained, 4 already finished" in again.stderr
    (btable,) = budgets.build(report_mod.aggregate(report_mod.collect(in_tmp / "res")))
    console = Console(width=200, record=True)
    console.print(budgets.render(btable))
    header = console.export_text().splitlines()[2]
    for column in ("1x: test err %", "2x", "iters to ≤ 50%", "slow or fails"):
        assert column in header
    listed = invoke("ablate", "tiny.yaml", "--out", "res", "--budgets", "1,2", "--list").stdout.splitlines()
    assert len(listed) == 4 and "--only 2:0@2x" in listed[3] and "--budgets 1,2" in listed[3]
    # The plain study reuses budget 1's runs: nothing retrained.
    plain = invoke("ablate", "tiny.yaml", "--out", "res", "--json")
    assert "0 run(s) trained, 2 already finished" in plain.stderr
    assert [x.row for x in report_mod.aggregate(report_mod.collect(in_tmp / "res"))[0].rows] == ["identity", "plain"]
