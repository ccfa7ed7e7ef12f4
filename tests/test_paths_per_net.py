"""`resnet paths` on several nets at once: each net's table row comes from its own measurement.
docs/paths.md once showed three digits nets with the same window, share and mean length, which
is what a profile shared between nets (one result reused, or rows of one net under another's
label) would print; here two different nets must give two different per-length profiles, each
equal to what the same net gives when measured alone."""

import json

from typer.testing import CliRunner

from resnet_cli.cli import app


def _paths(*args) -> dict[tuple[str, str], dict]:
    r = CliRunner().invoke(app, ["paths", *map(str, args), "--samples", "2", "--batch-size", "8", "--json"])
    assert r.exit_code == 0, r.stderr
    nets: dict[tuple[str, str], dict] = {}
    for line in r.stdout.splitlines():
        rec = json.loads(line)
        if rec["event"] in ("paths_k", "paths_summary"):
            net = nets.setdefault((rec["run"], rec["state"]), {"k": [], "summary": None})
            if rec["event"] == "paths_k":
                net["k"].append(rec["grad_mean"])
            else:
                net["summary"] = rec
    return nets


def test_two_nets_have_two_profiles_each_as_measured_alone(residual8_run, tmp_path):
    fig = tmp_path / "p.png"
    both = _paths(residual8_run, "--with-init", "--out", fig)
    trained, init = both[(str(residual8_run), "trained")], both[(str(residual8_run), "init")]
    assert trained["k"] != init["k"]  # the per-length gradients of a trained and an untrained net differ
    assert trained["summary"]["full_grad"] != init["summary"]["full_grad"]
    alone = _paths(residual8_run, "--out", fig)[(str(residual8_run), "trained")]
    assert alone["k"] == trained["k"]  # measuring a second net beside it changes nothing of the first
    assert alone["summary"]["window"] == trained["summary"]["window"]
