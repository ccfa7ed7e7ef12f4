"""The `resnet` command. Each subcommand lives in commands/<name>.py: it parses flags, calls one
plain function, and renders the result. Heavy imports (torch) happen inside the commands, so
`resnet --help` stays fast."""

from __future__ import annotations

import functools
import os
import sys
from typing import Any, Callable

import typer
from typer._click.exceptions import UsageError as _ClickUsageError  # the Click that typer vendors

from . import errors
from .training import testhook
from .errors import PipeClosed, UserError

app = typer.Typer(
    name="resnet",
    help="Reproduce and extend the ResNet papers (He et al. 2016a, 2016b): train, ablate, degrade, gradnorm.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
)


def _one_line_usage_error(self, file=None) -> None:
    """Click's usage errors (an out-of-range or unknown flag) in our one-line form, exit code 2
    kept: `resnet: error: train: Invalid value for '--threads': ...`, where Click prints the usage,
    a hint and the error on four lines. `resnet` alone still prints the help (its own class)."""
    names, ctx = [], self.ctx
    while ctx is not None and ctx.parent is not None:
        names.insert(0, ctx.info_name)
        ctx = ctx.parent
    where = f"{' '.join(names)}: " if names else ""
    print(f"resnet: error: {where}{self.format_message()} (see resnet {' '.join([*names, '--help'])})",
          file=file or sys.stderr)


# Typer's vendored Click has no setting for this; its UsageError.show is the one place all usage
# errors are rendered (BadParameter, NoSuchOption, MissingParameter are subclasses).
_ClickUsageError.show = _one_line_usage_error


def _version(value: bool) -> None:
    if value:
        from importlib.metadata import PackageNotFoundError, version

        try:
            v = version("resnet-cli")
        except PackageNotFoundError:  # run from a checkout that was never installed
            from . import __version__ as v
        print(f"resnet {v}")
        raise typer.Exit(errors.OK)


@app.callback()
def root(
    version: bool = typer.Option(False, "--version", is_eager=True, callback=_version, help="Print the version and exit."),
) -> None:
    """Keeps subcommands stable however many are registered (with one command registered, Typer would collapse the group into it)."""


def command(*args: Any, **kwargs: Any) -> Callable:
    """`@app.command()` plus the error contract: a UserError becomes one line on stderr and its
    exit code, a closed stdout pipe a quiet exit 141. Being inside the command, this also holds
    under typer's CliRunner, so tests see exactly what users see."""

    def register(fn: Callable) -> Callable:
        @functools.wraps(fn)
        def wrapper(*a: Any, **kw: Any) -> Any:
            try:
                testhook.phase("command")
                return fn(*a, **kw)
            except UserError as exc:
                _say(exc)
                raise typer.Exit(exc.code) from None
            except PipeClosed:
                _quiet_stdout()
                print("resnet: output pipe closed; stopped", file=sys.stderr)
                raise typer.Exit(errors.BROKEN_PIPE) from None

        return app.command(*args, **kwargs)(wrapper)

    return register


def _say(exc: UserError) -> None:
    """One line on stderr; in a process of `resnet train --nproc N`, handed to the launcher, which
    says it once for all ranks."""
    from .training.launch import child_error

    if not child_error(exc):
        print(f"resnet: error: {exc.message}", file=sys.stderr)


def _quiet_stdout() -> None:
    # The Python docs' recipe: point stdout at devnull so the interpreter's final flush is quiet.
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError, AttributeError):  # CliRunner's stdout has no file descriptor
        pass


def _register() -> None:
    """Import every module in commands/: each registers its own subcommands on `app`, so a new
    command is one new file. (These modules import torch lazily, inside their functions.)"""
    import importlib
    import pkgutil

    from . import commands

    for mod in sorted(m.name for m in pkgutil.iter_modules(commands.__path__)):
        if mod != "common":
            importlib.import_module(f"{commands.__name__}.{mod}")


_register()


def main() -> None:
    from .training.signals import Interrupted, exit_stopped, install_early

    install_early()  # done already by __main__.run, before this module was imported; again for other callers
    try:
        app()
    except Interrupted as exc:  # a signal before a command's own handler was in place, or after it
        exit_stopped(exc)
    except UserError as exc:
        _say(exc)
        sys.exit(exc.code)
    except PipeClosed:
        _quiet_stdout()
        print("resnet: output pipe closed; stopped", file=sys.stderr)
        sys.exit(errors.BROKEN_PIPE)
    except KeyboardInterrupt:
        print("resnet: interrupted", file=sys.stderr)
        sys.exit(errors.INTERRUPTED_INT)
