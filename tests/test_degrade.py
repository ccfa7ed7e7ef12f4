"""`resnet degrade` on tiny grids: the JSON schema, reuse of finished runs, the twins, the article's findings,
the shared sweep engine (--jobs, --list, `resnet report`) and output directories of earlier versions."""

import json
import shlex
import sys

import pytest
import torch
import torch.nn.functional as F
from typer.testing import CliRunner

from resnet_cli import data as data_mod
from resnet_cli import spec as S
from resnet_cli.cli import app
from resnet_cli.results import degrade as D_results
from resnet_cli.errors import UserError
from resnet_cli.commands.degrade import execute
from resnet_cli.results import degrade_grid as G
from resnet_cli.results import degrade_reference as reference
from resnet_cli.sweep import degrade_plan as D
from resnet_cli.model import build_model, count_params
from resnet_cli.training.curve import CurveProbe
from resnet_cli.training.session import spec_callbacks
from resnet_cli.training.trainer import Trainer

RUN_KEYS = {"net", "depth", "seed", "train_loss", "train_acc", "test_acc", "grad_norm_first_layer"}
LENGTH = ["--epochs", "1", "--set", "data.train_subset=256"]
TINY = ["--depths", "4,6", "--seeds", "0..1", *LENGTH]


def lines(text: str) -> list[dict]:
    out = [json.loads(line) for line in text.splitlines() if line.strip()]  # every line must parse
    assert out
    return out


def test_cli_json_schema_files_and_reuse(in_tmp):
    runner = CliRunner()
    res = runner.invoke(app, ["degrade", *TINY, "--out", "d", "--json"])
    assert res.exit_code == 0, res.output
    objs = lines(res.stdout)
    runs = [o for o in objs if o["event"] == "run"]
    sums = [o for o in objs if o["event"] == "summary"]
    assert len(runs) == 8 and len(sums) == 4 and objs[:8] == runs  # runs first, then summaries
    for r in runs:
        assert RUN_KEYS <= set(r) and r["net"] in ("plain", "residual") and r["status"] == "completed"
        assert 0.0 <= r["train_acc"] <= 1.0 and 0.0 <= r["test_acc"] <= 1.0 and r["grad_norm_first_layer"] > 0
    assert {(r["net"], r["depth"], r["seed"]) for r in runs} == {
        (n, d, s) for n in ("plain", "residual") for d in (4, 6) for s in (0, 1)}
    for s in sums:
        assert s["n"] == 2 and s["train_acc_min"] <= s["train_acc_median"] <= s["train_acc_max"]
        assert {"grad_norm_first_layer_median", "test_acc_median", "train_loss_median"} <= set(s)
    for name in (G.RESULT_FILE, G.FIGURE_FILE):
        assert (in_tmp / "d" / name).is_file()
    assert not (in_tmp / "d" / "runs.jsonl").exists()  # the run directories are the records
    probe = json.loads((in_tmp / "d" / "runs" / "plain-4-seed0" / "probe.json").read_text())
    curve = probe["curve"]
    assert curve[-1][0] == 4 and all(0 <= point[2] <= 100 for point in curve)  # 256 / 64 -> 4 steps
    # One window a step here (64 images each): their mean error is the epoch's training error.
    summary = json.loads((in_tmp / "d" / "runs" / "plain-4-seed0" / "summary.json").read_text())
    assert sum(point[2] for point in curve) / 4 == pytest.approx(summary["train_error"])

    stamp = {p: p.stat().st_mtime_ns for p in (in_tmp / "d" / "runs").glob("*/checkpoint.pt")}
    again = runner.invoke(app, ["degrade", *TINY, "--out", "d", "--json"])
    assert again.exit_code == 0
    assert again.stderr.count("(reused)") == 8 and "0 run(s) trained" in again.stderr, again.stderr
    assert [o for o in lines(again.stdout) if o["event"] == "run"] == runs
    assert {p: p.stat().st_mtime_ns for p in stamp} == stamp  # nothing retrained


@pytest.mark.parametrize("args,needle", [
    (["--depths", "5"], "2n+2"),
    (["--depths", "x"], "not an integer"),
    (["--seeds", "a,b"], "--seeds"),
    (["--nets", "plain,resnet"], "--nets"),
    (["--set", "optim.lr=-1"], "optim.lr"),
    (["no-such-config"], "no such spec file"),
])
def test_bad_input_is_one_line_exit_2(in_tmp, args, needle):
    res = CliRunner().invoke(app, ["degrade", *args, "--json"])
    assert res.exit_code == 2
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("resnet: error:") and needle in lines[0], res.stderr
    assert not (in_tmp / "runs").exists()  # refused before anything was written


def test_parse_seeds_and_depths():
    from resnet_cli.spec.seeds import parse

    assert parse("3") == [3]  # one syntax in every command: a lone number is that seed, not a count
    assert parse("0,4,7") == [0, 4, 7]
    assert parse("5..7") == [5, 6, 7]
    assert parse("7,") == [7]
    for bad in ("1,1", "-1,2", "x", "3..1", ""):
        with pytest.raises(UserError):
            parse(bad)
    assert D.parse_depths(["8,26"]) == [8, 26] and D.parse_depths(["8", "26"]) == [8, 26]


@pytest.mark.parametrize("seeds, written", [([0, 1, 2, 3], "0..3"), ([3], "3"), ([0, 1], "0,1"), ([0, 3, 7], "0,3,7"),
                                            ([5, 6, 7], "5..7"), ([2, 1, 0], "2,1,0")])
def test_seeds_are_written_as_parse_reads_them(seeds, written):
    from resnet_cli.spec.seeds import parse, text

    assert text(seeds) == written  # by hand: --seeds as a user would type it
    assert parse(text(seeds)) == seeds


def test_twins_differ_only_in_shortcut_and_share_parameters():
    plan = D.make_plan(None)
    for depth in plan.depths:
        plain, res = D.twin(plan, "plain", depth, 3), D.twin(plan, "residual", depth, 3)
        assert S.diff(plain, res) == ["model.shortcut.kind"]
        assert (plain.model.shortcut.kind, res.model.shortcut.kind) == ("none", "identity")
        sizes = [count_params(build_model(s.model, 1, 10)) for s in (plain, res)]
        assert sizes[0] == sizes[1]
    # The default experiment is the "Residual Connection" article's digits experiment.
    assert (plan.depths, plan.seeds, plan.nets) == ([8, 26], list(range(10)), ["plain", "residual"])
    spec = D.twin(plan, "plain", 26, 0)
    o = spec.optim
    assert (o.lr, o.momentum, o.batch_size, o.epochs, o.weight_decay, o.milestones, o.warmup_iters) == (
        0.05, 0.9, 64, 6, 0.0, [], 0)


def test_set_changes_the_shared_spec_so_only_the_shortcut_differs():
    plan = D.make_plan(None, depths=[8], sets=["model.shortcut.kind=shortcut_gate", "optim.lr=0.02"])
    plain, res = D.twin(plan, "plain", 8, 0), D.twin(plan, "residual", 8, 0)
    assert (plain.model.shortcut.kind, res.model.shortcut.kind) == ("none", "shortcut_gate")
    assert plain.optim.lr == res.optim.lr == 0.02
    with pytest.raises(UserError, match="residual twin at depth 8 has shortcut 'none'"):
        D.make_plan(None, depths=[8], sets=["model.shortcut.kind=none"])


def test_a_spec_with_the_earlier_degrade_section_runs_as_the_same_grid(in_tmp):
    (in_tmp / "old.yaml").write_text("model: {family: digits, shortcut: {kind: none}}\ndata: {dataset: digits}\n"
                                     "degrade: {depths: [6, 10], seeds: 2, nets: [residual, plain]}\n")
    plan = D.make_plan(str(in_tmp / "old.yaml"), out=in_tmp / "out")
    assert (plan.depths, plan.seeds, plan.nets) == ([6, 10], [0, 1], ["residual", "plain"])
    # A plain base gets identity for its residual twin; every run carries the probe.
    assert D.twin(plan, "residual", 10, 1).model.shortcut.kind == "identity"
    assert all(run.spec.train.probes == ["degrade"] for run in plan.study.runs)
    assert [run.path.relative_to(in_tmp / "out").as_posix() for run in plan.study.runs[:3]] == [
        "runs/residual-6-seed0", "runs/residual-6-seed1", "runs/plain-6-seed0"]


def test_cifar_fig6_config_plans():
    plan = D.make_plan("degrade/cifar10-fig6")
    assert plan.depths == [20, 32, 44, 56]
    spec = D.twin(plan, "residual", 56, 0)
    assert (spec.model.downsample, spec.data.dataset, spec.optim.iters, spec.optim.milestones) == (
        "A", "cifar10", 64000, [32000, 48000])


def test_epochs_flag_keeps_the_seed_recipe_without_lr_steps(in_tmp):
    plan = D.make_plan(None, overrides=D.length_overrides(None, 2, None))
    assert D.twin(plan, "plain", 8, 0).optim.milestones == []


def test_first_layer_grad_norm_matches_a_hand_computed_step():
    """The probe's number is ||dE/dW|| of the stem conv for the trainer's first batch."""
    plan = D.make_plan(None, depths=[6], overrides=[("optim.iters", 1), ("optim.epochs", None)])
    spec = D.twin(plan, "plain", 6, 4)
    data = data_mod.load(spec.data)
    trainer = Trainer(spec, data=data, callbacks=spec_callbacks(spec, None, True))
    trainer.run()
    (probe,) = [cb for cb in trainer.callbacks if isinstance(cb, CurveProbe)]  # the spec asks for it
    torch.manual_seed(spec.run.seed)
    model = build_model(spec.model, 1, 10)
    batches = data_mod.batches_for(data, "train", 64, "none", 0, "cpu", spec.run.seed)
    # data.shuffle: global (the article's stream): the first order is the next draw after the init
    x, y = next(iter(batches.epoch(0, order=torch.randperm(len(batches)))))
    F.cross_entropy(model(x), y).backward()
    assert probe.grad_norm_first_layer == pytest.approx(model.stem[0].weight.grad.norm().item(), rel=1e-4)


def _summary(net, depth, acc, grad, dataset="digits"):
    recs = [{"net": net, "depth": depth, "seed": 0, "status": "completed", "train_loss": 1.0, "train_acc": acc,
             "test_acc": acc, "grad_norm_first_layer": grad, "params": 1, "dataset": dataset}]
    return G.summarise(recs)[0]


def test_findings_say_whether_our_medians_lie_in_the_articles_ten_seed_ranges():
    # The article's 10-seed ranges by hand: training accuracy 0.395-0.834 (plain-26) and 0.966-0.988
    # (residual-26), step-1 norms 1.9-3.2 (plain) and 0.4-0.7 (residual).
    ok = reference.findings([_summary("plain", 26, 0.6, 3.0), _summary("residual", 26, 0.98, 0.6)])
    assert [f["in_range"] for f in ok] == [True, True, True, True]
    assert ok[0]["article"] == 0.56 and ok[0]["article_range"] == (0.395, 0.834)
    bad = reference.findings([_summary("plain", 26, 0.85, 1.0), _summary("residual", 26, 0.9, 0.8)])
    assert [f["in_range"] for f in bad] == [False, False, False, False]
    edge = reference.findings([_summary("plain", 26, 0.834, 1.9), _summary("residual", 26, 0.966, 0.7)])
    assert [f["in_range"] for f in edge] == [True, True, True, True]  # the range's ends are inside it
    assert reference.findings([_summary("plain", 8, 0.6, 3.0)]) is None
    assert not any("reproduced" in f for f in ok)  # a range is not a test of an ordering
    # each finding named and measured as docs/degrade.md's table prints it, ours beside the article's
    assert [(f["finding"], f["measure"], f["ours"]) for f in ok] == [
        ("plain-26 degrades", "median training accuracy, plain", 0.6),
        ("residual-26 fits", "median training accuracy, residual", 0.98),
        ("plain-26's step-1 gradient is larger, not vanishing", "median first-conv norm, plain", 3.0),
        ("residual-26's step-1 gradient", "median first-conv norm, residual", 0.6)]
    # a grid without one of the twins at 26 has no finding (the other twin alone compares nothing)
    assert reference.findings([_summary("plain", 26, 0.6, 3.0)]) is None
    assert reference.findings([_summary("residual", 26, 0.98, 0.6)]) is None


def test_he2016a_orderings_are_claims_decided_by_the_paired_test():
    """He 2016a's orderings between depths, decided by the sign-flip test with Holm, not by medians:
    training accuracy plain 0.90 / 0.70 at 20 / 56 layers and residual 0.92 / 0.85, test accuracy 0.02
    lower, every seed alike but for a per-seed shift, so each difference agrees at all 10 seeds: p
    2/1024 each, Holm over the 5 claims 5 x 2/1024 (all tie). The claims, by hand from sec. 4.1:
    training error, plain-20 < plain-56, residual-56 < plain-56, residual-56 < residual-20; test
    error, plain-20 < plain-56 and residual-56 < plain-56. The shallow twins are "comparably
    accurate": listed, no claim. The deeper residual net trains worse here: that claim is reversed."""
    recs = [{"net": n, "depth": d, "seed": s, "train_acc": a + s / 1000, "test_acc": a - 0.02 + s / 1000}
            for n, d, a in [("plain", 20, 0.90), ("residual", 20, 0.92), ("plain", 56, 0.70), ("residual", 56, 0.85)]
            for s in range(10)]
    got = D_results.claims(recs)
    verdict = {(c["better"], c["worse"], c["metric"]): (c["verdict"], c["p_holm"]) for c in got["claims"]}
    holm = pytest.approx(10 / 1024)
    assert verdict == {("plain-20", "plain-56", "train_error"): ("in order", holm),
                       ("residual-56", "plain-56", "train_error"): ("in order", holm),
                       ("residual-56", "residual-20", "train_error"): ("reversed", holm),
                       ("plain-20", "plain-56", "test_error"): ("in order", holm),
                       ("residual-56", "plain-56", "test_error"): ("in order", holm)}
    assert [n["rows"] for n in got["family"]["listed"]] == [["residual-20", "plain-20"]] * 2


def test_every_run_keeps_a_run_directory_the_analyses_read(in_tmp):
    from resnet_cli.analysis.trained import load_run

    res = CliRunner().invoke(app, ["degrade", *TINY, "--seeds", "0", "--out", "d", "--json"])
    assert res.exit_code == 0, res.output
    runs = {(r["net"], r["depth"]): r for r in lines(res.stdout) if r["event"] == "run"}
    assert len(runs) == 4
    for net, depth in runs:
        path = in_tmp / "d" / "runs" / f"{net}-{depth}-seed0"
        metrics = [json.loads(line) for line in (path / "metrics.jsonl").read_text().splitlines()]
        epoch = [m for m in metrics if m.get("event") == "epoch"][-1]
        # The kept checkpoint is the trained net: evaluated again, it gives the run's own test accuracy.
        trained = load_run(path)
        with torch.no_grad():
            pairs = [(trained.model(x).argmax(1) != y).sum().item() for x, y in
                     data_mod.eval_for(trained.data, "test", 97, trained.device)]
        wrong = sum(pairs) / data_mod.num_examples(trained.data, "test")
        assert 100 * wrong == pytest.approx(epoch["test_error"], abs=1e-6)
        assert runs[(net, depth)]["test_acc"] == pytest.approx(1 - wrong, abs=1e-6)
    assert (in_tmp / "d" / "runs" / "plain-4-seed0" / "spec.yaml").is_file()
    lesion = CliRunner().invoke(app, ["lesion", str(in_tmp / "d" / "runs" / "residual-6-seed0"), "--json"])
    assert lesion.exit_code == 0, lesion.output


def test_a_run_another_process_is_training_stops_the_grid_in_one_line(in_tmp):
    from resnet_cli import errors
    from resnet_cli.runs.writer import RunDir

    held = RunDir(in_tmp / "d" / "runs" / "plain-4-seed0")
    held.lock()  # as a second `resnet degrade --out d` training this run would hold it
    try:
        res = CliRunner().invoke(app, ["degrade", *TINY, "--seeds", "0", "--depths", "4", "--out", "d", "--json"])
        assert res.exit_code == errors.LOCKED
        err = [ln for ln in res.stderr.splitlines() if "error" in ln]
        assert len(err) == 1 and "in use by another resnet process" in err[0] and "Traceback" not in res.output
        assert not (in_tmp / "d" / "runs" / "plain-4-seed0" / "spec.yaml").exists()  # nothing written under the lock
    finally:
        held.unlock()
    again = CliRunner().invoke(app, ["degrade", *TINY, "--seeds", "0", "--depths", "4", "--out", "d", "--json"])
    assert again.exit_code == 0, again.output


def test_a_field_added_since_a_run_leaves_it_reusable(in_tmp):
    import yaml

    args = ["degrade", *TINY, "--seeds", "0", "--out", "d", "--json"]
    assert CliRunner().invoke(app, args).exit_code == 0
    # The run as an older version wrote it: its spec.yaml lacks a field that has a default now.
    for rec_dir in (in_tmp / "d" / "runs").iterdir():
        tree = yaml.safe_load((rec_dir / "spec.yaml").read_text())
        del tree["optim"]["warmup_lr"]
        (rec_dir / "spec.yaml").write_text(yaml.safe_dump(tree))
    again = CliRunner().invoke(app, args)
    assert again.exit_code == 0 and again.stderr.count("(reused)") == 4, again.stderr
    # A value the run really used still counts: another warm-up lr is another run, refused in one
    # line per run (the sweep engine never reuses or resumes a directory of another spec).
    other = CliRunner().invoke(app, [*args, "--set", "optim.warmup_lr=0.02"])
    assert other.exit_code == 2 and "(reused)" not in other.stderr and other.stdout.strip() == ""
    assert other.stderr.count("holds a run with another spec (optim.warmup_lr)") == 4, other.stderr


class _Crash(Exception):
    pass


def test_a_run_cut_off_midway_resumes_to_the_same_record(in_tmp, monkeypatch):
    # 16 epochs of 4 steps: curve windows of 2 steps. A checkpoint every 5 steps falls mid-window,
    # and the crash comes at step 7, after it: the resumed run must carry the curve and the step-1
    # gradient from before the cut and the half-filled window.
    overrides = [("optim.epochs", 16), ("data.train_subset", 256), ("train.checkpoint_every", 5)]
    whole = execute(D.make_plan(None, depths=[6], seeds=[0], nets=["residual"], overrides=overrides,
                                  out=in_tmp / "whole")).records[0]
    plan = D.make_plan(None, depths=[6], seeds=[0], nets=["residual"], overrides=overrides, out=in_tmp / "cut")
    real = CurveProbe.after_backward

    def crash_at_7(self, t):
        if t.p.iteration == 6:
            raise _Crash  # as a kill or a crash would cut the run, after its checkpoint at step 5
        real(self, t)

    monkeypatch.setattr(CurveProbe, "after_backward", crash_at_7)
    with pytest.raises(_Crash):
        execute(plan)
    monkeypatch.setattr(CurveProbe, "after_backward", real)
    path = in_tmp / "cut" / "runs" / "residual-6-seed0"
    assert not (path / "summary.json").exists() and (path / "checkpoint.pt").is_file()  # cut off, resumable
    grid = execute(plan)
    (resumed,) = grid.records
    assert grid.outcomes["1:0"].status == "completed"
    for key in ("train_loss", "train_acc", "test_acc", "grad_norm_first_layer", "curve", "iterations"):
        assert resumed[key] == whole[key], key
    assert [point[0] for point in resumed["curve"]] == list(range(2, 65, 2))
    metrics = (path / "metrics.jsonl").read_text().splitlines()
    epochs = [json.loads(line)["epoch"] for line in metrics if json.loads(line).get("event") == "epoch"]
    assert epochs == list(range(1, 17))  # each epoch logged once across the two processes


def test_summaries_carry_intervals_and_the_twins_paired_by_seed():
    """The median's interval against scipy called directly; the residual row's paired difference
    by hand (seed 2 of plain diverged without a figure: paired over seeds 0 and 1 only)."""
    import numpy as np

    def run(net, seed, acc):
        return {"net": net, "depth": 26, "seed": seed, "status": "completed", "train_loss": 1.0, "train_acc": acc,
                "test_acc": acc, "grad_norm_first_layer": 1.0, "params": 1, "dataset": "digits"}

    res_acc = (0.95, 0.97, 0.90, 0.99)
    recs = [run("plain", 0, 0.5), run("plain", 1, 0.6), {**run("plain", 2, None), "status": "diverged"},
            *(run("residual", s, a) for s, a in enumerate(res_acc))]
    plain, res = G.summarise(recs)
    # Four seeds: the median's order-statistic interval is [min, max], covering 1 - 2 (1/2)^4 = 87.5%.
    assert res["train_acc_interval"] == [0.90, 0.99] and res["train_acc_coverage"] == 0.875
    assert res["train_acc_std"] == pytest.approx(np.std(res_acc, ddof=1))
    assert plain["train_acc_interval"] is None  # two figures: no interval
    pair = res["paired"]["train_acc"]
    assert pair["seeds"] == [0, 1] and pair["mean"] == pytest.approx((0.45 + 0.37) / 2)
    # Two differences, both positive: sign-flip p = 2/4. A grid of one depth has no deeper twin: its
    # pairs are the shallowest's, which He 2016a calls "comparably accurate" (listed, not tested), so
    # both are exploratory: never adjusted, never resolved, and the grid declares no claim.
    assert pair["p"] == 0.5 and pair["p_holm"] is None and pair["resolved"] is False and pair["verdict"] == "exploratory"
    test = res["paired"]["test_acc"]
    assert test["p"] == 0.5 and test["p_holm"] is None and test["verdict"] == "exploratory"
    got = D_results.claims(recs)
    assert got["claims"] == [] and [n["rows"] for n in got["family"]["listed"]] == [["residual-26", "plain-26"]] * 2
    assert pair["diffs"] == pytest.approx([0.45, 0.37])  # training accuracy, residual minus plain, seeds 0 and 1
    # The difference's size: Walsh averages of (0.45, 0.37) are 0.37, 0.41, 0.45: Hodges-Lehmann 0.41;
    # two seeds give no interval.
    assert pair["shift"] == pytest.approx(0.41) and pair["interval"] is None
    assert "paired" not in plain


@pytest.mark.slow  # two worker processes
def test_jobs_2_gives_the_same_records_as_jobs_1(in_tmp):
    """Two worker processes (the sweep engine of `resnet ablate`) train the same runs bitwise: every
    record but the wall time equal, in the plan's order whatever order the runs finished in."""
    args = ["degrade", "--depths", "4,6", "--seeds", "0", "--epochs", "1", "--set", "data.train_subset=128", "--json"]
    one = CliRunner().invoke(app, [*args, "--out", "one", "--jobs", "1"])
    two = CliRunner().invoke(app, [*args, "--out", "two", "--jobs", "2"])
    assert one.exit_code == 0 and two.exit_code == 0, two.output
    assert (in_tmp / "two" / "runs" / "plain-4-seed0" / "ablate.log").is_file()  # trained by a worker
    strip = lambda out: [{k: v for k, v in o.items() if k != "wall_s"} for o in lines(out)]  # noqa: E731
    assert strip(one.stdout) == strip(two.stdout)
    assert len(strip(two.stdout)) == 4 + 4 + 1  # runs, summaries, and the grid's claims


def test_list_prints_one_rerunnable_command_per_run_and_report_reads_the_grid(in_tmp):
    args = [*LENGTH, "--depths", "4", "--seeds", "0,1", "--out", "d"]
    listed = CliRunner().invoke(app, ["degrade", *args, "--list"])
    assert listed.exit_code == 0, listed.output
    cmds = listed.stdout.splitlines()
    assert len(cmds) == 4 and not (in_tmp / "d").exists()  # nothing trained by --list
    keys = [shlex.split(c)[shlex.split(c).index("--only") + 1] for c in cmds]
    assert keys == ["1:0", "1:1", "2:0", "2:1"]  # rows (depth, net) in order, then seeds
    for cmd in cmds[:2] + cmds[:1]:  # the first one twice: a rerun reuses it
        argv = shlex.split(cmd)
        assert argv[:4] == [sys.executable, "-m", "resnet_cli", "degrade"]
        res = CliRunner().invoke(app, argv[3:])
        assert res.exit_code == 0, res.output
        (obj,) = lines(res.stdout)
        assert obj["event"] == "run" and obj["net"] == "plain" and obj["status"] == "completed"
    assert obj["skipped"] is True and obj["seed"] == 0
    assert sorted(p.name for p in (in_tmp / "d" / "runs").iterdir()) == ["plain-4-seed0", "plain-4-seed1"]
    # The grid itself then trains only the two runs the listed commands did not.
    grid = CliRunner().invoke(app, ["degrade", *args, "--json"])
    assert grid.exit_code == 0 and "2 run(s) trained, 2 reused" in grid.stderr, grid.stderr
    rows = [o for o in lines(CliRunner().invoke(app, ["report", "d", "--json"]).stdout) if o["event"] == "row"]
    assert [(r["row"], r["n"]) for r in rows] == [("plain-4", 2), ("residual-4", 2)]
    summaries = [o for o in lines(grid.stdout) if o["event"] == "summary"]
    for row, s in zip(rows, summaries):  # the report's test error is the grid's test accuracy
        assert row["test_error_median"] == pytest.approx(100 * (1 - s["test_acc_median"]), abs=1e-3)


def test_an_output_directory_of_the_previous_version_reports_and_is_reused(in_tmp):
    """The layout earlier versions wrote: runs.jsonl (one record per finished run, with its probe
    values and a `spec_key`) beside runs/<net>-<depth>-seed<seed>/ whose spec.yaml has no
    train.probes and no study.json or probe.json beside it."""
    import yaml

    args = ["degrade", *LENGTH, "--depths", "4", "--seeds", "0", "--out", "d", "--json"]
    assert CliRunner().invoke(app, args).exit_code == 0
    out = in_tmp / "d"
    planted = {"plain": (0.125, [[2, 2.0, 75.0], [4, 1.5, 50.0]]), "residual": (0.375, [[4, 1.0, 25.0]])}
    with open(out / "runs.jsonl", "w", encoding="utf-8") as f:
        for net, (grad, curve) in planted.items():
            path = out / "runs" / f"{net}-4-seed0"
            for name in ("probe.json", "study.json"):
                (path / name).unlink()
            tree = yaml.safe_load((path / "spec.yaml").read_text())
            del tree["train"]["probes"]
            (path / "spec.yaml").write_text(yaml.safe_dump(tree, sort_keys=False))
            summary = json.loads((path / "summary.json").read_text())
            f.write(json.dumps({"event": "run", "net": net, "depth": 4, "seed": 0, "status": "completed",
                                "train_loss": summary["train_loss"], "grad_norm_first_layer": grad,
                                "spec_key": "0123456789abcdef", "curve": curve, "run_dir": f"runs/{net}-4-seed0"}) + "\n")
    (out / "degrade.json").unlink()
    old_report = CliRunner().invoke(app, ["report", "d", "--json"])  # before any rerun: loose runs, still a table
    assert old_report.exit_code == 0 and len([o for o in lines(old_report.stdout) if o["event"] == "row"]) == 2
    stamp = {p: p.stat().st_mtime_ns for p in out.glob("runs/*/checkpoint.pt")}
    again = CliRunner().invoke(app, args)
    assert again.exit_code == 0 and "0 run(s) trained, 2 reused" in again.stderr, again.stderr
    assert {p: p.stat().st_mtime_ns for p in stamp} == stamp
    recs = {o["net"]: o for o in lines(again.stdout) if o["event"] == "run"}
    assert {net: recs[net]["grad_norm_first_layer"] for net in planted} == {"plain": 0.125, "residual": 0.375}
    result = json.loads((out / "degrade.json").read_text())
    assert [s["grad_norm_first_layer_median"] for s in result["summaries"]] == [0.125, 0.375]
    rows = [o for o in lines(CliRunner().invoke(app, ["report", "d", "--json"]).stdout) if o["event"] == "row"]
    assert [(r["study"], r["row"]) for r in rows] == [("degrade", "plain-4"), ("degrade", "residual-4")]


def test_report_on_a_degrade_directory_prints_degrades_own_metrics_and_medians(in_tmp):
    """`resnet report D` on `resnet degrade --out D`: per (net, depth) the training loss and
    accuracy, test accuracy and step-1 gradient norm with the medians degrade printed, and the same
    claims; the medians also equal a hand median of the run records degrade printed."""
    import statistics

    res = CliRunner().invoke(app, ["degrade", "--depths", "4", "--seeds", "0..2", *LENGTH, "--out", "d", "--json"])
    assert res.exit_code == 0, res.output
    printed = lines(res.stdout)
    rep = CliRunner().invoke(app, ["report", "d", "--json"])
    assert rep.exit_code == 0, rep.stderr
    again = lines(rep.stdout)
    # Runs, summaries and claims, record for record; report calls a summary a row, as for any study.
    assert again == [{**o, "event": "row"} if o["event"] == "summary" else o for o in printed]
    sums = {s["net"]: s for s in again if s["event"] == "row"}
    assert set(sums) == {"plain", "residual"}
    for net, s in sums.items():
        runs = [r for r in printed if r["event"] == "run" and r["net"] == net]
        for metric in ("train_loss", "train_acc", "test_acc", "grad_norm_first_layer"):
            assert s[f"{metric}_median"] == statistics.median(r[metric] for r in runs)


def test_a_directory_written_by_the_52c9c0e_layout_reports_its_printed_medians(in_tmp):
    """tests/data/degrade-52c9c0e: `resnet degrade --depths 4 --seeds 0..1 --epochs 1 --set
    data.train_subset=256` as commit 52c9c0e wrote it (degrade.json with its findings fields,
    each run's summary, probe and study files; checkpoints dropped, run_dir naming where it was).
    `resnet report` reads it as a degrade grid: each row's medians are the ones 52c9c0e printed."""
    import shutil
    from pathlib import Path

    src = Path(__file__).parent / "data" / "degrade-52c9c0e"
    shutil.copytree(src, in_tmp / "old")
    printed = {(s["net"], s["depth"]): s for s in lines((src / "printed-summaries.jsonl").read_text())}
    rep = CliRunner().invoke(app, ["report", "old", "--json"])
    assert rep.exit_code == 0, rep.stderr
    rows = {(r["net"], r["depth"]): r for r in lines(rep.stdout) if r["event"] == "row"}
    assert set(rows) == set(printed) == {("plain", 4), ("residual", 4)}
    for key, old in printed.items():
        for metric in ("train_loss", "train_acc", "test_acc", "grad_norm_first_layer"):
            assert rows[key][f"{metric}_median"] == pytest.approx(old[f"{metric}_median"], rel=1e-12), (key, metric)
        assert rows[key]["n"] == old["n"] == 2
