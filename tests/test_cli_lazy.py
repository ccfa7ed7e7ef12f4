"""Commands load on dispatch: `resnet --help` imports no command module and no torch, lists every
command with its own help line, and a command imports only its own module."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import typer

from resnet_cli import cli

COMMANDS_DIR = Path(cli.__file__).parent / "commands"

# The child prints the modules it has loaded as it exits (after Typer's sys.exit).
_PROBE = """\
import atexit, sys
atexit.register(lambda: print("LOADED " + " ".join(sorted(m for m in sys.modules
    if m.split(".")[0] in ("torch", "numpy", "pydantic") or m.startswith("resnet_cli.commands."))), file=sys.stderr))
sys.argv = ["resnet", *sys.argv[1:]]
from resnet_cli.__main__ import run
run()
"""


def _loaded(*args: str) -> tuple[subprocess.CompletedProcess, set[str]]:
    res = subprocess.run([sys.executable, "-c", _PROBE, *args], capture_output=True, text=True, timeout=120)
    line = next(ln for ln in res.stderr.splitlines() if ln.startswith("LOADED"))
    return res, set(line.split()[1:])


def test_help_imports_no_command_and_no_torch():
    res, loaded = _loaded("--help")
    assert res.returncode == 0, res.stderr
    assert not {m for m in loaded if m.split(".")[0] == "torch"}, "resnet --help imported torch"
    assert not {m for m in loaded if m.startswith("resnet_cli.commands.")}, loaded
    listed = res.stdout.split("Commands:")[1].split()
    assert all(name in listed for name in cli.COMMANDS)


def test_a_command_imports_its_own_module_only():
    res, loaded = _loaded("configs", "--json")
    assert res.returncode == 0, res.stderr
    assert "resnet_cli.commands.configs" in loaded
    assert not {m for m in loaded if m.startswith("resnet_cli.commands.") and m.rsplit(".", 1)[1]
                not in ("configs", "common")}, loaded


def test_every_command_module_is_in_the_table():
    # A module that registers a command (`@command()`) must be in the table, or `resnet` never loads
    # it; shared helpers beside them (common's flags, the SLURM launcher's) register none.
    files = {p.stem for p in COMMANDS_DIR.glob("*.py") if "@command(" in p.read_text(encoding="utf-8")}
    assert files == {module for module, _ in cli.COMMANDS.values()}


@pytest.fixture(scope="module")
def group():
    g = typer.main.get_command(cli.app)
    ctx = g.make_context("resnet", [], resilient_parsing=True)
    return g, ctx


@pytest.mark.parametrize("name", sorted(cli.COMMANDS))
def test_table_help_is_the_commands_own_at_every_width(group, name):
    """The listing's line is cut from the table; the command's own docstring would give the same."""
    g, ctx = group
    real = g.get_command(ctx, name)
    assert real is not None and real.name == name
    stub = typer.core.TyperCommand(name=name, help=cli.COMMANDS[name][1])
    for limit in range(20, 400, 7):
        assert stub.get_short_help_str(limit) == real.get_short_help_str(limit), (name, limit)


def test_a_mistyped_command_is_answered_with_the_closest_name():
    from typer.testing import CliRunner

    res = CliRunner().invoke(cli.app, ["trian"])
    assert res.exit_code == 2
    assert "No such command 'trian'. Did you mean 'train'?" in res.output


@pytest.mark.parametrize("name", ["ablate", "configs", "eval", "export", "landscape", "lesion", "report", "train"])
def test_a_commands_help_loads_no_torch(name):
    # `resnet train --help` and `resnet eval --help`, the two a new user reads first, took 3 s
    # (torch loading); a help text needs no tensor library. (bench, degrade, gradnorm, paths and
    # plot still load it with their modules.)
    res, loaded = _loaded(name, "--help")
    assert res.returncode == 0, res.stderr
    assert not {m for m in loaded if m.split(".")[0] == "torch"}, f"resnet {name} --help imported torch"
