"""Every command on a tiny ViT (one or two blocks of width 8 on 8x8 digits, an epoch or less):
train, degrade, gradnorm, lesion, landscape, paths and ablate, each through the CLI, JSON on stdout."""

import json

import pytest

from invoking import invoke


SMALL = ["--set", "model.widths=[8]", "--set", "model.heads=2", "--set", "data.train_subset=128",
         "--set", "data.test_subset=60"]


def json_lines(text):
    return [json.loads(line) for line in text.splitlines() if line.strip()]  # every line must parse


@pytest.fixture(scope="module")
def vit_run(tmp_path_factory):
    """A trained pre-LN ViT of 2 blocks (4 residual units), one epoch of 128 images."""
    out = tmp_path_factory.mktemp("vit") / "vit2"
    r = invoke("train", "vit/digits-tiny", "--epochs", "1", "--set", "model.depth=2", *SMALL, "--out", out)
    assert r.exit_code == 0, r.stderr
    summary = json_lines(r.stdout)[-1]
    assert summary["event"] == "summary" and summary["status"] == "completed"
    return out


def test_train_dry_run_counts_the_units():
    r = invoke("train", "vit/digits-tiny", "--dry-run", "--json")
    assert r.exit_code == 0, r.stderr
    dry = json_lines(r.stdout)[0]
    assert dry["units"] == 8 and dry["spec"]["model"]["final_norm"] is True and dry["spec"]["model"]["image_size"] == 8


def test_lesion_names_each_unit_by_block_and_sublayer(vit_run):
    r = invoke("lesion", vit_run, "--max-k", 1, "--draws", 2)
    assert r.exit_code == 0, r.stderr
    units = [e for e in json_lines(r.stdout) if e["event"] == "lesion_unit"]
    assert [u["name"] for u in units] == ["block1.attn", "block1.mlp", "block2.attn", "block2.mlp"]
    assert all(u["deletion"] == "branch->0" and u["test_error"] is not None for u in units)
    assert units[0]["label"] == "ViT-2 (pre_ln)"
    # each one-pass figure (started from the intact net's stream) is that of the whole lesioned net
    from resnet_cli.analysis import lesion as L
    from resnet_cli.analysis.trained import load_run, runtime_for
    from resnet_cli.training.evaluation import evaluate

    trained = load_run(vit_run)
    rt = runtime_for(trained.device)
    for u in units:
        with L.lesioned(trained.model, [u["unit"] - 1]):
            assert evaluate(trained.model, trained.data, "test", rt)[1] == u["test_error"]


def test_landscape_runs_on_a_vit(vit_run, tmp_path):
    r = invoke("landscape", vit_run, "--dims", 1, "--points", 3, "--samples", 64, "--out", tmp_path / "l.png")
    assert r.exit_code == 0, r.stderr
    assert (tmp_path / "l.png").is_file()


def test_paths_routes_every_unit_of_a_vit(vit_run, tmp_path):
    r = invoke("paths", vit_run, "--samples", 2, "--batch-size", 16, "--out", tmp_path / "p.png")
    assert r.exit_code == 0, r.stderr
    summary = next(e for e in json_lines(r.stdout) if e["event"] == "paths_summary")
    assert summary["routable"] == 4


def test_gradnorm_names_vit_layers_by_block(tmp_path):
    r = invoke("gradnorm", "--base", "vit/digits-tiny", "-v", "post_ln", "-v", "pre_ln", "--set", "model.depth=1",
               *SMALL, "--out", tmp_path / "g.png")
    assert r.exit_code == 0, r.stderr
    layers = [e for e in json_lines(r.stdout) if e.get("spec") == "post_ln" and e.get("path") == "main"]
    assert [e["label"] for e in layers] == ["stem", "block1.attn.qkv", "block1.attn.proj", "block1.mlp.fc1",
                                            "block1.mlp.fc2", "fc"]
    assert all(e["grad_norm"] > 0 for e in layers)


def test_degrade_trains_plain_and_residual_vits_without_the_conv_references(tmp_path):
    r = invoke("degrade", "vit/digits-tiny", "--depths", "1,8", "--seeds", 1, "--epochs", 1, *SMALL,
               "--out", tmp_path / "d")
    assert r.exit_code == 0, r.stderr
    rows = [e for e in json_lines(r.stdout) if e["event"] == "summary"]
    assert {(e["net"], e["depth"]) for e in rows} == {(n, d) for n in ("plain", "residual") for d in (1, 8)}
    assert all("reference" not in e for e in rows)  # the article's digits figures are for its conv nets


STUDY = """
title: tiny vit study
paper_metric: made-up error %
spec:
  model: {family: vit, depth: 1, widths: [8], heads: 2, patch: 2, unit: pre_ln}
  data: {dataset: digits, train_subset: 128, test_subset: 60}
  optim: {epochs: 1, batch_size: 64, warmup_iters: 0, milestones: []}
  train: {checkpoint_every: 0}
seeds: [0]
rows:
  - label: pre-LN
    paper: 1.0
  - label: post-LN, ReZero
    overrides: {model.unit: post_ln, model.shortcut.kind: rezero}
    paper: fail
"""


def test_ablate_runs_a_vit_study(tmp_path):
    study = tmp_path / "tiny.yaml"
    study.write_text(STUDY)
    r = invoke("ablate", study, "--out", tmp_path / "a", "--jobs", 1)
    assert r.exit_code == 0, r.stderr
    rows = [e for e in json_lines(r.stdout) if e.get("event") == "row"]
    assert len(rows) == 2 and all(e["n"] == 1 for e in rows)


def test_layer_responses_of_a_vit_take_each_linear_layers_output(vit_run, tmp_path):
    """No BN follows a ViT's layers: each response is the layer's own output (stem conv + 4 per block)."""
    r = invoke("gradnorm", "--responses", vit_run, "--out", tmp_path / "r.png")
    assert r.exit_code == 0, r.stderr
    layers = [e for e in json_lines(r.stdout) if "std" in e]
    assert [e["layer"] for e in layers][:3] == ["stem.proj", "units.0.branch.qkv", "units.0.branch.proj"]
    assert len(layers) == 9 and all(e["std"] > 0 for e in layers)
