"""The commands that read trained runs open them in one place (analysis/trained.py `open_runs`):
each answers a spoilt run directory with the same one line and exit code 2, and every directory is
checked before any run's weights or data are loaded."""

from __future__ import annotations

import shutil

import pytest
import torch
from typer.testing import CliRunner

from resnet_cli.cli import app
from resnet_cli.errors import UserError
from resnet_cli.analysis import trained as trained_mod

# Each command that opens runs, with the flags that keep it short.
COMMANDS = {
    "lesion": ["lesion", "--max-k", "1", "--draws", "1"],
    "landscape": ["landscape", "--points", "3", "--samples", "20"],
    "paths": ["paths", "--samples", "1"],
    "eval": ["eval"],
    "export": ["export", "--force"],
    "gradnorm --responses": ["gradnorm", "--responses"],
}


@pytest.fixture(scope="module")
def spoilt(residual8_run, tmp_path_factory):
    """A run directory spoilt in each way a user meets, with the words its one line must hold."""
    root = tmp_path_factory.mktemp("spoilt")
    (root / "empty").mkdir()
    no_ckpt = shutil.copytree(residual8_run, root / "no-checkpoint")
    (no_ckpt / "checkpoint.pt").unlink()
    cut = shutil.copytree(residual8_run, root / "cut")
    (cut / "checkpoint.pt").write_bytes((residual8_run / "checkpoint.pt").read_bytes()[:300])  # cut by a kill
    return {"missing": (root / "nowhere", "nowhere: no such run directory"),
            "no spec": (root / "empty", "empty: not a run directory (no spec.yaml"),
            "no checkpoint": (no_ckpt, "no-checkpoint: no checkpoint.pt"),
            "corrupt checkpoint": (cut, "not a loadable checkpoint")}


@pytest.mark.parametrize("kind", ["missing", "no spec", "no checkpoint", "corrupt checkpoint"])
@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_every_command_says_the_same_one_line(command, kind, spoilt, tmp_path):
    bad, says = spoilt[kind]
    args = COMMANDS[command] + [str(bad)] + ([] if command == "eval" else ["--out", str(tmp_path / "o.png")])
    if command == "export":
        args[-1] = str(tmp_path / "o.pt")
    r = CliRunner().invoke(app, args)
    assert r.exit_code == 2, (command, r.stdout, r.stderr)
    assert r.stderr.startswith("resnet: error: ") and r.stderr.count("\n") == 1, r.stderr
    assert says in r.stderr and r.stdout == ""


def test_every_directory_is_checked_before_any_run_loads(residual8_run, tmp_path, monkeypatch):
    loaded, asked = [], []
    monkeypatch.setattr(trained_mod, "load_run", lambda *a, **k: loaded.append(a))
    with pytest.raises(UserError, match="nowhere: no such run directory"):
        trained_mod.open_runs([residual8_run, tmp_path / "nowhere"], "cpu", before=asked.append)
    assert loaded == [] and asked == []


def test_threads_are_the_runs_unless_given(residual8_run):
    trained_mod.open_runs([residual8_run], "cpu", threads=2)
    assert torch.get_num_threads() == 2
    run_threads = trained_mod.load_spec(residual8_run).run.threads
    trained_mod.open_runs([residual8_run], "cpu")
    assert run_threads != 2 and torch.get_num_threads() == run_threads
    torch.set_num_threads(3)
    trained_mod.open_runs([residual8_run], "cpu", threads=0)  # 0: torch's default, left alone
    assert torch.get_num_threads() == 3


def test_the_opened_run_is_the_trained_net(residual8_run):
    (t,) = trained_mod.open_runs([residual8_run], "cpu")
    saved = torch.load(residual8_run / "checkpoint.pt", weights_only=True)["model"]
    assert t.label == "ResNet-8" and not t.model.training
    assert all(torch.equal(v, saved[k]) for k, v in t.model.state_dict().items())
