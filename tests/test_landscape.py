"""`resnet landscape`: filter-normalised directions (Li et al. 2018), the smoothness measures on
known curves, and the command on a net trained here."""

import json

import numpy as np
import pytest
import torch
from torch import nn

from resnet_cli import spec as S
from resnet_cli.analysis import landscape as LS
from resnet_cli.analysis.trained import load_run
from resnet_cli.model import build_model

from invoking import invoke


@pytest.fixture
def run(residual8_run):
    return residual8_run  # conftest: the bundled residual 8-layer digits net, width 4, one epoch


@pytest.mark.parametrize("kind", ["identity", "exclusive_gate", "conv1x1"])
def test_direction_filters_have_the_weights_norms(kind):
    s = S.resolve(S.validate({"model": {"depth": 8, "widths": [2, 4, 4], "downsample": "B",
                                        "shortcut": {"kind": kind}}}))
    torch.manual_seed(0)
    model = build_model(s.model, 3, 10)
    d = LS.random_direction(model, torch.Generator().manual_seed(1))
    seen = {"conv": 0, "linear": 0, "zero": 0}
    for (name, w), di in zip(model.named_parameters(), d):
        assert di.shape == w.shape
        if w.dim() <= 1:  # biases, BN gamma/beta (and gate biases): no direction
            assert torch.count_nonzero(di) == 0, name
            seen["zero"] += 1
        else:
            torch.testing.assert_close(di.flatten(1).norm(dim=1), w.detach().flatten(1).norm(dim=1))
            assert not torch.allclose(di, w)  # a random direction, not the weights themselves
            seen["conv" if w.dim() == 4 else "linear"] += 1
    assert seen["conv"] > 0 and seen["linear"] == 1 and seen["zero"] > 0
    bn = next(m for m in model.modules() if isinstance(m, nn.BatchNorm2d))
    assert bn.weight.dim() == 1


def test_measures_tell_one_valley_from_many():
    a = np.linspace(-1, 1, 41)
    bowl = LS.measures(1 + a ** 2)
    assert bowl["local_minima"] == 1 and 1 <= bowl["tv_ratio"] <= 2 and bowl["nonconvex_fraction"] == 0
    rough = LS.measures(1 + a ** 2 + 0.3 * np.sin(40 * a))
    assert rough["local_minima"] >= 4 and rough["tv_ratio"] > 3 and rough["nonconvex_fraction"] > 0.3
    xx, yy = np.meshgrid(a, a)
    plane = LS.measures(1 + xx ** 2 + 2 * yy ** 2)
    assert plane["local_minima"] == 1 and plane["nonconvex_fraction"] == 0 and plane["tv_ratio"] <= 2
    saddle = LS.measures(xx ** 2 - yy ** 2 + 3)
    assert saddle["local_minima"] == 0 and saddle["nonconvex_fraction"] == 1.0
    eggs = LS.measures(xx ** 2 + yy ** 2 + 0.2 * np.cos(25 * xx) * np.cos(25 * yy))
    assert eggs["local_minima"] > 4 and eggs["tv_ratio"] > plane["tv_ratio"]


def test_scan_restores_weights_and_passes_through_the_minimiser(run):
    trained = load_run(run)
    before = {k: v.clone() for k, v in trained.model.state_dict().items()}
    out = LS.scan(trained, dims=1, lo=-0.5, hi=0.5, points=5, samples=100, seed=0)
    after = trained.model.state_dict()
    assert all(torch.equal(before[k], after[k]) for k in before)
    centre = out["points"][2]
    assert centre["alpha"] == 0.0
    assert centre["loss"] == pytest.approx(out["center"]["loss"], rel=1e-5)
    assert out["samples"] == 100 and out["bn"].startswith("eval")


@pytest.mark.parametrize("dims,points", [(1, 5), (2, 3)])
def test_landscape_cli(run, tmp_path, dims, points):
    fig = tmp_path / f"l{dims}.png"
    r = invoke("landscape", run, "--dims", dims, "--range", -0.5, 0.5, "--points", points, "--samples", 200,
               "--out", fig)
    assert r.exit_code == 0, r.stderr
    rows = [json.loads(line) for line in r.stdout.splitlines()]
    pts = [x for x in rows if x["event"] == "landscape_point"]
    assert len(pts) == points ** dims
    assert all(set(p) >= {"run", "label", "alpha", "loss", "accuracy"} for p in pts)
    assert all(("beta" in p) == (dims == 2) for p in pts)
    assert pts[0]["alpha"] == -0.5 and pts[-1]["alpha"] == 0.5
    (summary,) = [x for x in rows if x["event"] == "landscape_summary"]
    assert summary["dims"] == dims and summary["samples"] == 200 and summary["points"] == points ** dims
    assert {"local_minima", "tv_ratio", "nonconvex_fraction", "loss_center"} <= set(summary)
    assert rows[-1] == {"event": "figure", "path": str(fig)}
    assert fig.read_bytes()[:4] == b"\x89PNG"


@pytest.mark.parametrize("kind", ["missing", "no spec", "no checkpoint", "corrupt checkpoint"])
def test_bad_run_dir_is_one_line(kind, run, tmp_path):
    bad = tmp_path / "bad"
    needle = "no such run directory"
    if kind != "missing":
        bad.mkdir()
        needle = "no spec.yaml"
    if kind in ("no checkpoint", "corrupt checkpoint"):
        (bad / "spec.yaml").write_text((run / "spec.yaml").read_text())
        needle = "no checkpoint.pt"
    if kind == "corrupt checkpoint":
        (bad / "checkpoint.pt").write_bytes((run / "checkpoint.pt").read_bytes()[:300])  # cut by a kill
        needle = "not a loadable checkpoint"
    r = invoke("landscape", bad)
    assert r.exit_code == 2
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("resnet: error:") and needle in lines[0], r.stderr
    assert r.stdout == ""


def test_bad_grid_is_one_line(run):
    r = invoke("landscape", run, "--range", 1, -1)
    assert r.exit_code == 2 and "--range" in r.stderr and len(r.stderr.strip().splitlines()) == 1
