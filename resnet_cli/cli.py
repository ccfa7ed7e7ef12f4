"""The `resnet` command. Each subcommand lives in commands/<name>.py: it parses flags, calls one
plain function, and renders the result. Heavy imports (torch) happen inside the commands, so
`resnet --help` stays fast."""

from __future__ import annotations

import os
import sys

import typer

from . import errors
from .errors import PipeClosed, UserError

app = typer.Typer(
    name="resnet",
    help="Reproduce and extend the ResNet papers (He et al. 2016a, 2016b): train, ablate, degrade, gradnorm.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
)


@app.callback()
def root() -> None:
    """Keeps subcommands stable however many are registered (PITFALLS: Typer collapses a lone one)."""


def _register() -> None:
    from .commands import configs, train  # noqa: F401  (each module registers its commands on `app`)


_register()


def main() -> None:
    try:
        app()
    except UserError as exc:
        print(f"resnet: error: {exc.message}", file=sys.stderr)
        sys.exit(exc.code)
    except PipeClosed:
        # The Python docs' recipe: point stdout at devnull so the interpreter's final flush is quiet.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        print("resnet: output pipe closed; stopped", file=sys.stderr)
        sys.exit(errors.BROKEN_PIPE)
    except KeyboardInterrupt:
        print("resnet: interrupted", file=sys.stderr)
        sys.exit(errors.INTERRUPTED_INT)
