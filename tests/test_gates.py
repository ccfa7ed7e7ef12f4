"""Gate telemetry (He 2016b Table 1's gated shortcuts): the logged mean gate per unit against
sigmoid(W_g x + b_g) computed by hand from each unit's input, and `resnet report --gates`."""

import json

import torch
from typer.testing import CliRunner

from oracles import gate_of
from resnet_cli import data as data_mod
from resnet_cli import spec as S
from resnet_cli.cli import app


def test_logged_gate_means_equal_the_hand_computed_gates(tmp_path):
    out = tmp_path / "gated"
    r = CliRunner().invoke(app, ["train", "digits/residual8", "--epochs", "2", "--set", "model.widths=[4]",
                                 "--set", "model.shortcut.kind=exclusive_gate", "--out", str(out)])
    assert r.exit_code == 0, r.stderr
    records = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    epochs = [rec for rec in records if rec.get("event") == "epoch"]
    assert len(epochs) == 2 and all(len(rec["gate_mean"]) == 3 for rec in epochs)  # 3 units, each gated

    from resnet_cli.experiments.trained import load_run

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


def test_gate_bias_study_selects_on_the_validation_split():
    from resnet_cli.experiments.study import load_study

    study = load_study("gate-bias")
    assert study.metric == "val_error"
    assert [row.overrides["model.shortcut.gate_bias"] for row in study.rows] == [0.0, -2.0, -4.0, -6.0, -8.0, -10.0]
    spec = S.build(study.base, sets=[f"{k}={v}" for k, v in study.presets["quick"].overrides_flat().items()]) \
        if hasattr(study.presets["quick"], "overrides_flat") else None
    assert spec is None or spec.data.val_split > 0
