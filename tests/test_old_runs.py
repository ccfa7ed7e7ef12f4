"""A run directory written by an earlier version resumes and reports.

Versions add spec fields with defaults (model.norm, model.stochastic_depth, model.widen,
model.dropout, train.probes came with the later answers to He 2016b and the sweep engine's degrade).
A run whose spec.yaml and checkpoint predate such fields ran with their defaults, so it must resume
under this version exactly as it would have continued: bitwise the uninterrupted run.
"""

from __future__ import annotations

import json
from pathlib import Path

import torch
import yaml
from typer.testing import CliRunner

from resnet_cli.cli import app
from resnet_cli.training import checkpoint as ckpt
from resnet_cli.training.trainer import Trainer

ARGS = ["train", "digits/residual8", "--set", "model.widths=[4]", "--set", "data.train_subset=256", "--epochs", "2"]
ADDED = {"model": ("norm", "stochastic_depth", "widen", "dropout"), "train": ("probes",)}


def _strip(tree: dict) -> dict:
    """The spec tree as a version without the ADDED fields wrote it."""
    for section, keys in ADDED.items():
        for key in keys:
            assert key in tree[section], f"{section}.{key} is no longer a field: update ADDED"
            del tree[section][key]
    return tree


def _as_before(run: Path) -> None:
    spec_file = run / "spec.yaml"
    spec_file.write_text(yaml.safe_dump(_strip(yaml.safe_load(spec_file.read_text()))))
    state = ckpt.load(run / "checkpoint.pt")
    state["spec"] = _strip(state["spec"])
    ckpt.save(state, run / "checkpoint.pt")


def test_a_run_from_before_new_fields_resumes_bitwise(in_tmp, monkeypatch):
    whole = CliRunner().invoke(app, [*ARGS, "--out", "whole", "--json"])
    assert whole.exit_code == 0, whole.stderr

    real = Trainer._end_epoch

    def stop_after_epoch_1(self):
        real(self)  # epoch 1's record and its checkpoint are written; then the process "dies"
        raise KeyboardInterrupt

    monkeypatch.setattr(Trainer, "_end_epoch", stop_after_epoch_1)
    cut = CliRunner().invoke(app, [*ARGS, "--out", "cut", "--json"])
    assert cut.exit_code != 0 and (in_tmp / "cut" / "checkpoint.pt").is_file()
    monkeypatch.setattr(Trainer, "_end_epoch", real)
    _as_before(in_tmp / "cut")

    resumed = CliRunner().invoke(app, ["train", "--resume", "cut", "--json"])
    assert resumed.exit_code == 0, resumed.stderr
    a, b = (json.loads((in_tmp / d / "summary.json").read_text()) for d in ("whole", "cut"))
    assert (a["train_loss"], a["test_error"], a["iterations"]) == (b["train_loss"], b["test_error"], b["iterations"])
    wa, wb = (torch.load(in_tmp / d / "checkpoint.pt", weights_only=True)["model"] for d in ("whole", "cut"))
    assert all(torch.equal(wa[k], wb[k]) for k in wa)
    report = CliRunner().invoke(app, ["report", "cut", "--json"])
    assert report.exit_code == 0 and any(json.loads(line).get("n") == 1 for line in report.stdout.splitlines())


def _drop_after_addition(tree: dict) -> dict:
    del tree["model"]["shortcut"]["after_addition"]
    return tree


def test_a_rezero_run_from_before_after_addition_resumes_as_the_net_it_trained(in_tmp, monkeypatch):
    """Earlier versions built ReZero with the unit's ReLU after the addition; `after_addition: auto`
    now gives ReZero its paper's unit (nothing there). A run written before the field resumes
    bitwise as the uninterrupted run of the net it trained (`after_addition: ordering`), not as the
    new default."""
    rezero = [*ARGS, "--set", "model.norm=none", "--set", "model.shortcut.kind=rezero"]
    whole = CliRunner().invoke(app, [*rezero, "--set", "model.shortcut.after_addition=ordering", "--out", "whole", "--json"])
    assert whole.exit_code == 0, whole.stderr
    real = Trainer._end_epoch

    def stop_after_epoch_1(self):
        real(self)
        raise KeyboardInterrupt

    monkeypatch.setattr(Trainer, "_end_epoch", stop_after_epoch_1)
    cut = CliRunner().invoke(app, [*rezero, "--set", "model.shortcut.after_addition=ordering", "--out", "cut", "--json"])
    assert cut.exit_code != 0
    monkeypatch.setattr(Trainer, "_end_epoch", real)
    run = in_tmp / "cut"
    (run / "spec.yaml").write_text(yaml.safe_dump(_drop_after_addition(yaml.safe_load((run / "spec.yaml").read_text()))))
    state = ckpt.load(run / "checkpoint.pt")
    state["spec"] = _drop_after_addition(state["spec"])
    ckpt.save(state, run / "checkpoint.pt")

    resumed = CliRunner().invoke(app, ["train", "--resume", "cut", "--json"])
    assert resumed.exit_code == 0, resumed.stderr
    a, b = (json.loads((in_tmp / d / "summary.json").read_text()) for d in ("whole", "cut"))
    assert (a["train_loss"], a["test_error"]) == (b["train_loss"], b["test_error"])
    assert yaml.safe_load((run / "spec.yaml").read_text())["model"]["shortcut"].get("after_addition") in (None, "ordering")
