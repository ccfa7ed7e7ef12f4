"""Gate telemetry (He 2016b Table 1's gated shortcuts): the logged mean gate per unit against
sigmoid(W_g x + b_g) computed by hand from each unit's input, and `resnet report --gates`."""

import json

import torch
from typer.testing import CliRunner

from oracles import gate_of
from resnet_cli import data as data_mod
from resnet_cli.cli import app


def test_logged_gate_means_equal_the_hand_computed_gates(tmp_path):
    out = tmp_path / "gated"
    r = CliRunner().invoke(app, ["train", "digits/residual8", "--epochs", "2", "--set", "model.widths=[4]",
                                 "--set", "model.shortcut.kind=exclusive_gate", "--out", str(out)])
    assert r.exit_code == 0, r.stderr
    records = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    epochs = [rec for rec in records if rec.get("event") == "epoch"]
    assert len(epochs) == 2 and all(len(rec["gate_mean"]) == 3 for rec in epochs)  # 3 units, each gated

    from resnet_cli.analysis.trained import load_run

    trained = load_run(out, torch.device("cpu"))  # the last checkpoint: the weights of epoch 2's record
    x = next(iter(data_mod.eval_for(trained.data, "test", 256, "cpu")))[0]  # the first 256 test images
    inputs = []
    hooks = [u.combine.register_forward_pre_hook(lambda m, args: inputs.append(args[0])) for u in trained.model.units]
    with torch.no_grad():
        trained.model.eval()(x)
        hand = [gate_of(u)(xin).mean().item() for u, xin in zip(trained.model.units, inputs)]
    for h in hooks:
        h.remove()
    assert all(abs(a - b) < 1e-6 for a, b in zip(epochs[-1]["gate_mean"], hand, strict=True))
    assert epochs[0]["gate_mean"] != epochs[1]["gate_mean"]  # it moves with the weights

    png = tmp_path / "gates.png"
    r = CliRunner().invoke(app, ["report", str(tmp_path), "--gates", str(png), "--json"])
    assert r.exit_code == 0, r.stderr
    assert png.stat().st_size > 1000 and png.read_bytes()[:4] == b"\x89PNG"


def test_a_net_without_gates_logs_none_and_the_figure_refuses_in_one_line(residual8_run):
    assert "gate_mean" not in json.loads((residual8_run / "metrics.jsonl").read_text().splitlines()[-1])
    r = CliRunner().invoke(app, ["report", str(residual8_run.parent), "--gates", "x.png"])
    assert r.exit_code == 2 and "no run below it logged gate means" in r.stderr


def test_gate_bias_study_sweeps_exclusive_gating_on_resnet110_and_ranks_on_held_out_images():
    from resnet_cli.sweep import plan as study_mod

    for preset in ("paper", "quick"):
        plan = study_mod.plan("gate-bias", preset)
        assert plan.metric == "val_error"
        assert [r.spec.model.shortcut.gate_bias for r in plan.rows] == [0.0, -2.0, -4.0, -6.0, -8.0, -10.0]
        assert all(r.spec.model.shortcut.kind == "exclusive_gate" and r.spec.model.depth == 110
                   and r.spec.model.unit == "original" and r.spec.data.val_split > 0 for r in plan.rows)
    assert plan.rows[0].spec.data.dataset == "digits"  # quick: offline


STUDY = """
title: tiny val study
metric: val_error
base: digits/residual8
spec: {model: {widths: [4], shortcut: {kind: exclusive_gate}}, data: {val_split: 100},
       optim: {epochs: 1}}
seeds: [0]
rows:
  - label: b_g -6
"""


def test_a_val_error_study_reports_each_runs_validation_error(in_tmp):
    (in_tmp / "s.yaml").write_text(STUDY)
    r = CliRunner().invoke(app, ["ablate", str(in_tmp / "s.yaml"), "--preset", "paper", "--out", "res", "--json"])
    assert r.exit_code == 0, r.stderr
    rows = [json.loads(line) for line in r.stdout.splitlines() if '"row"' in line]
    summary = json.loads(next((in_tmp / "res").rglob("summary.json")).read_text())
    assert summary["val_error"] != summary["test_error"]  # 100 held-out images against 360 test images
    reported = [row for row in rows if row.get("test_error_median") is not None][-1]
    assert reported["test_error_median"] == round(summary["val_error"], 4)
