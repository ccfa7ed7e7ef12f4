"""`resnet lesion`: a deleted unit is its shortcut path, plain units become the identity where
shapes allow, and the command works on nets trained here (tiny, on digits)."""

import json

import pytest
import torch

from resnet_cli import spec as S
from resnet_cli.analysis import lesion as L
from resnet_cli.analysis.trained import Trained
from resnet_cli.model import build_model

from oracles import shortcut_path

from invoking import invoke


def json_lines(r):
    return [json.loads(line) for line in r.stdout.splitlines()]


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """A residual and a plain 8-layer digits net, width 4, one epoch (about a second each)."""
    root = tmp_path_factory.mktemp("lesion")
    out = {}
    for name in ("residual8", "plain8"):
        r = invoke("train", f"digits/{name}", "--epochs", 1, "--set", "model.widths=[4]", "--out", root / name)
        assert r.exit_code == 0, r.stderr
        out[name] = root / name
    return out


def cifar_model(kind, unit="original", downsample="A"):
    s = S.resolve(S.validate({"model": {"depth": 8, "widths": [2, 4, 4], "unit": unit, "downsample": downsample,
                                        "shortcut": {"kind": kind, "gate_bias": -1.0, "shortcut_scale": 0.5}}}))
    torch.manual_seed(0)
    model = build_model(s.model, 3, 10)
    with torch.no_grad():  # BN statistics and affine parameters away from their identity values
        for m in model.modules():
            if isinstance(m, torch.nn.BatchNorm2d):
                m.running_mean.uniform_(-0.5, 0.5), m.running_var.uniform_(0.5, 2)
                m.weight.uniform_(0.5, 1.5), m.bias.uniform_(-0.5, 0.5)
    return s, model.eval()


CASES = [("identity", "original", "A"), ("identity", "full_preact", "B"), ("identity", "bn_after_add", "C"),
         ("scale", "original", "A"), ("exclusive_gate", "original", "B"), ("highway", "full_preact", "C"),
         ("shortcut_gate", "relu_preact", "A"), ("conv1x1", "original", "A"),
         ("dropout", "full_preact", "A")]


@pytest.mark.parametrize("kind,unit,downsample", CASES,
                         ids=["-".join(c) for c in CASES])
def test_deleted_unit_is_its_shortcut_path(kind, unit, downsample):
    """Veit et al. 2016: deleting a unit leaves its shortcut, y = h(x) (scaled or gated as in
    He 2016b Table 1), computed here from each kind's formula with the unit's weights."""
    _, model = cifar_model(kind, unit, downsample)
    x = torch.randn(3, 2, 8, 8)
    with torch.no_grad():
        for i, u in enumerate(model.units):  # units 2 and 3 downsample (stride 2, wider)
            x_pre = u.shared_pre(x)
            fx = u.branch(x_pre)
            expected = u.post(shortcut_path(kind, u, downsample, x_pre, shortcut_scale=0.5))
            assert not torch.allclose(expected, u(x), atol=1e-4)  # the branch mattered
            original = u.branch
            with L.lesioned(model, [i]):
                assert isinstance(u.branch, L.ZeroBranch)
                assert u.branch(x_pre).shape == fx.shape
                got = u(x)
            assert u.branch is original  # restored
            torch.testing.assert_close(got, expected)
            x = u(x)


def test_plain_units_become_identity_where_shapes_match():
    s, model = cifar_model("none")
    trained = Trained(path=None, spec=s, model=model, data=None, device=torch.device("cpu"))
    rows = L.describe_units(trained)
    assert [r["deletable"] for r in rows] == [True, False, False]
    assert [r["downsampling"] for r in rows] == [False, True, True]
    assert [r["stage"] for r in rows] == [1, 2, 3]
    x = torch.randn(2, 3, 8, 8)
    with torch.no_grad(), L.lesioned(model, [0]):
        assert isinstance(model.units[0], torch.nn.Identity)
        with_identity = model(x)
    with torch.no_grad():
        h = model.stem(x)
        expected = model.fc(model.pool(model.head_act(model.units[2](model.units[1](h)))).flatten(1))
    torch.testing.assert_close(with_identity, expected)
    with pytest.raises(ValueError, match="cannot be deleted"), L.lesioned(model, [1]):
        pass
    assert not isinstance(model.units[0], torch.nn.Identity)  # restored


def test_lesion_cli_residual_vs_plain(runs, tmp_path):
    fig = tmp_path / "lesion.png"
    r = invoke("lesion", runs["residual8"], "--compare", runs["plain8"], "--draws", 3, "--max-k", 2, "--out", fig)
    assert r.exit_code == 0, r.stderr
    rows = json_lines(r)
    for label in ("ResNet-8", "plain-8"):
        mine = [x for x in rows if x.get("label") == label]
        base = [x for x in mine if x["event"] == "lesion_baseline"]
        units = [x for x in mine if x["event"] == "lesion_unit"]
        ks = [x for x in mine if x["event"] == "lesion_k"]
        run = runs["residual8" if label == "ResNet-8" else "plain8"]
        summary = json.loads((run / "summary.json").read_text())
        assert len(base) == 1 and base[0]["test_error"] == pytest.approx(summary["test_error"], abs=1e-9)
        assert [u["unit"] for u in units] == [1, 2, 3]
        assert all(u["deletable"] for u in units)
        assert {u["deletion"] for u in units} == {"branch->0" if label == "ResNet-8" else "unit->identity"}
        assert [k["k"] for k in ks] == [0, 1, 2]
        assert ks[0]["median"] == ks[0]["min"] == ks[0]["max"] == base[0]["test_error"]  # nothing deleted
        # k = 1 draws single units: every draw is one of the per-unit rows
        assert {ks[1]["min"], ks[1]["max"]} <= {u["test_error"] for u in units}
        assert all(k["min"] <= k["median"] <= k["max"] for k in ks)
        assert ks[1]["draws"] == 3 and ks[2]["draws"] == 3
    assert rows[-1] == {"event": "figure", "path": str(fig)}
    assert fig.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


@pytest.mark.parametrize("name", ["residual8", "plain8"])
def test_one_pass_errors_equal_evaluating_each_lesioned_net(name, runs):
    """errors() starts each lesioned forward from the intact net's activation at its first deleted
    unit; the reference is train.evaluate() on the lesioned net, which runs the whole forward."""
    from resnet_cli.analysis.trained import load_run, runtime_for
    from resnet_cli.training.trainer import evaluate

    trained = load_run(runs[name])
    rt = runtime_for(trained.device)
    picks = [(), (0,), (1,), (2,), (0, 2), (1, 2), (0, 1, 2), (2, 0)]
    got = L.errors(trained.model, trained.data, rt, picks, batch_size=128)  # several batches
    for pick, (loss, err) in zip(picks, got):
        with L.lesioned(trained.model, list(pick)):
            want_loss, want_err = evaluate(trained.model, trained.data, "test", rt, batch_size=128)
        assert err == want_err and loss == pytest.approx(want_loss, rel=1e-6), pick
    assert len({err for _, err in got}) > 1  # the picks are different nets


def bad_run_dir(kind, good, tmp_path):
    bad = tmp_path / "bad"
    if kind == "missing":
        return bad, "no such run directory"
    bad.mkdir()
    if kind == "no spec":
        return bad, "no spec.yaml"
    (bad / "spec.yaml").write_text((good / "spec.yaml").read_text())
    if kind == "no checkpoint":
        return bad, "no checkpoint.pt"
    (bad / "checkpoint.pt").write_bytes(b"PK\x03\x04 not really a checkpoint")
    return bad, "not a loadable checkpoint"


@pytest.mark.parametrize("kind", ["missing", "no spec", "no checkpoint", "corrupt checkpoint"])
def test_bad_run_dir_is_one_line(kind, runs, tmp_path):
    bad, needle = bad_run_dir(kind, runs["residual8"], tmp_path)
    r = invoke("lesion", runs["residual8"], "--compare", bad)
    assert r.exit_code == 2
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("resnet: error:") and needle in lines[0], r.stderr
    assert r.stdout == ""
