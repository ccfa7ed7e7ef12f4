"""The `resnet` command. Each subcommand lives in commands/<name>.py: it parses flags, calls one
plain function, and renders the result. A command's module is imported when that command runs
(Click's lazily loading group), so `resnet --help` imports no torch and each command module keeps
its imports at its top."""

from __future__ import annotations

import difflib
import re
import functools
import importlib
import os
import sys
from importlib.metadata import PackageNotFoundError, version
from typing import Any, Callable

import typer
from typer.core import TyperCommand, TyperGroup
from typer._click.exceptions import UsageError as _ClickUsageError  # the Click that typer vendors

from . import errors
from .training import process_globals, testhook
from .training.launch import child_error
from .training.signals import Interrupted, exit_stopped, install_early
from .errors import PipeClosed, UserError

# Every command: its module in commands/ and the help line `resnet --help` lists (the first sentence
# of the command's docstring, which is all Click shows there; a test keeps the two equal). A new
# command is one new file and one line here.
COMMANDS: dict[str, tuple[str, str]] = {
    "ablate": ("ablate", "Run a study: rows x seeds, each a resumable run directory; finished runs are skipped."),
    "bench": ("bench", "Images/s, step time, peak memory, FLOPs of ours and of the textbook baseline, and their "
                       "ratio."),
    "configs": ("configs", "List the bundled specs (use a name as SPEC: `resnet train preact/resnet164-cifar10`), "
                           "studies and experiments."),
    "degrade": ("degrade", "Train plain and residual twins at several depths over several seeds; report the last "
                           "epoch's training loss/accuracy, test accuracy and the first layer's gradient norm at "
                           "step 1 (median and min-max over seeds, n shown), and draw training error against "
                           "iteration."),
    "eval": ("eval", "Error, loss, per-class error and confusion matrix of trained runs on a split (BN in eval "
                     "mode, single view)."),
    "export": ("export", "Write a trained net for other tools (with its spec, class names and preprocessing) and "
                         "check its logits."),
    "gradnorm": ("gradnorm", "Gradient norm of every weight layer and of each unit's input, side by side for "
                             "several nets; the Jacobian gain of plain vs residual stacks; layer responses of "
                             "trained runs."),
    "landscape": ("landscape", "Training loss and accuracy on a grid around the trained weights; BN in eval mode "
                               "(running stats)."),
    "lesion": ("lesion", "Delete each unit in turn (branch -> 0, shortcut kept), then k random units; test error "
                         "each time."),
    "paths": ("paths", "Gradient carried by paths of each length: backward through k units' branches, the other "
                       "units' shortcuts."),
    "plot": ("plot", "Error against iterations: training error thin, test error bold (He 2016a Fig. 1, 4, 6)."),
    "report": ("report", "One table per study (row, test error median with its interval and coverage, mean ± std "
                         "over seeds, n, training loss, status, the paper's figure; Kendall's tau against the "
                         "paper's order), read only from study.json, spec.yaml, summary.json, metrics.jsonl."),
    "train": ("train", "Train one net."),
}


# Options whose value may be left out, which Click cannot declare: a bare `--stack` (not followed by
# a number) is read as `--stack=all` (commands/common.py, Stack). `resnet bench --stack 1,4,8`
# always has its value, which starts with a digit.
BARE_VALUES = {"--stack": "all"}


def with_bare_values(args: list[str]) -> list[str]:
    out = []
    for i, arg in enumerate(args):
        following = args[i + 1] if i + 1 < len(args) else ""
        out.append(f"{arg}={BARE_VALUES[arg]}" if arg in BARE_VALUES and not following[:1].isdigit() else arg)
    return out


class LazyGroup(TyperGroup):
    """Click's lazily loading group (click.palletsprojects.com, "Lazily Loading Subcommands"):
    `list_commands` and the help listing come from COMMANDS; `get_command` imports the one module
    asked for. Importing it registers its function on `app` (`@command()`), which is then made into
    a Click command as Typer makes every other one."""

    def list_commands(self, ctx) -> list[str]:
        return list(COMMANDS)

    def parse_args(self, ctx, args: list[str]) -> list[str]:
        return super().parse_args(ctx, with_bare_values(args))

    def get_command(self, ctx, cmd_name: str):
        if cmd_name not in self.commands and cmd_name in COMMANDS:
            importlib.import_module(f"{__package__}.commands.{COMMANDS[cmd_name][0]}")
            for info in app.registered_commands:
                if (info.name or typer.main.get_command_name(info.callback.__name__)) == cmd_name:
                    # typer.main.get_command_from_info: how Typer itself builds each command of a group.
                    self.add_command(typer.main.get_command_from_info(
                        info, pretty_exceptions_short=app.pretty_exceptions_short,
                        rich_markup_mode=app.rich_markup_mode))
        return self.commands.get(cmd_name)

    def format_commands(self, ctx, formatter) -> None:
        """The listing of `resnet --help` from COMMANDS, without importing a command: each line is
        cut to the terminal's width as Click cuts a command's own help."""
        listed = {name: TyperCommand(name=name, help=help_) for name, (_, help_) in COMMANDS.items()}
        self.commands, loaded = {**listed, **self.commands}, self.commands
        try:
            super().format_commands(ctx, formatter)
        finally:
            self.commands = loaded

    def resolve_command(self, ctx, args):
        """A mistyped command is answered with the closest names from COMMANDS (Typer suggests from
        the commands loaded so far, which here are none)."""
        try:
            return super().resolve_command(ctx, args)
        except _ClickUsageError as exc:
            close = difflib.get_close_matches(args[0], list(COMMANDS)) if args else []
            if close and "Did you mean" not in exc.message:
                exc.message = f"{exc.message.rstrip('.')}. Did you mean {', '.join(map(repr, close))}?"
            raise


app = typer.Typer(
    name="resnet",
    cls=LazyGroup,
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
    message = self.format_message()
    # An Enum flag (--format xlsx) reaches Click through pydantic's words ("Value error, 'xlsx' is not
    # one of 'table', ..."): said as every other bad value is, the choices listed.
    bad = re.search(r"Value error, (.*) is not one of (.*?)\.?$", message)
    if bad:
        message = f"{message[:bad.start()]}{bad.group(1)}; valid: {bad.group(2).replace(chr(39), '')}"
    print(f"resnet: error: {where}{message} (see resnet {' '.join([*names, '--help'])})",
          file=file or sys.stderr)


# Typer's vendored Click has no setting for this; its UsageError.show is the one place all usage
# errors are rendered (BadParameter, NoSuchOption, MissingParameter are subclasses).
_ClickUsageError.show = _one_line_usage_error


def _version(value: bool) -> None:
    if value:
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
                with process_globals.kept():  # the generators and thread count, for in-process callers
                    return fn(*a, **kw)
            except UserError as exc:
                _say(exc)
                raise typer.Exit(exc.code) from None
            except PipeClosed:
                _quiet_stdout()
                print("resnet: output pipe closed; stopped", file=sys.stderr)
                raise typer.Exit(errors.BROKEN_PIPE) from None
            except (OSError, MemoryError, RuntimeError, ImportError) as exc:
                refused = _machine_refused(exc)
                _say(refused)
                raise typer.Exit(refused.code) from None

        return app.command(*args, **kwargs)(wrapper)

    return register


def _machine_refused(exc: BaseException) -> UserError:
    """A full disk, a read-only place, too little memory (errors.resource_error) met where no
    writer named its file: one line all the same. Anything else is a bug and keeps its traceback."""
    refused = errors.resource_error(exc)
    if refused is None:
        raise exc
    return refused


def _say(exc: UserError) -> None:
    """One line on stderr; in a process of `resnet train --nproc N`, handed to the launcher, which
    says it once for all ranks."""
    if not child_error(exc):
        print(f"resnet: error: {exc.message}", file=sys.stderr)


def _quiet_stdout() -> None:
    # The Python docs' recipe: point stdout at devnull so the interpreter's final flush is quiet.
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError, AttributeError):  # CliRunner's stdout has no file descriptor
        pass


def main() -> None:
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
    except (OSError, MemoryError, RuntimeError, ImportError) as exc:  # importing a command (torch) included
        refused = _machine_refused(exc)
        _say(refused)
        sys.exit(refused.code)
