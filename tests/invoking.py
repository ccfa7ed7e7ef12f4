"""`resnet ARGS` in this process through Typer's CliRunner: the one wrapper the command tests share.
Arguments may be numbers or paths; `env` sets variables for the call only."""

from typer.testing import CliRunner

from resnet_cli.cli import app


def invoke(*args, env: dict | None = None):
    return CliRunner().invoke(app, [str(a) for a in args], env=env)
