"""Rendering, one place: tables for people, JSON lines for pipes, diagnostics on stderr.

stdout carries results only (a rich table on a terminal, JSON lines otherwise); progress bars,
live tables and messages go to a stderr console. A command returns its results as records (one
dict per JSON line) and says how people see them (`View`s); `render` does the rest. The format is
chosen from `--json` or from `sys.stdout.isatty()`, never from rich's terminal detection, which
FORCE_COLOR=1 (set by many CI systems) fools.
"""

from __future__ import annotations

import enum
import json
import math
import os
import re
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterable, Sequence

from rich import box
from rich.console import Console
from rich.table import Table

from . import errors
from .errors import PipeClosed, UserError


class Format(enum.Enum):
    TABLE = "table"
    JSON = "json"
    CSV = "csv"  # for pandas and R (results/formats.py)
    MARKDOWN = "markdown"  # the docs' tables (results/markdown.py)
    LATEX = "latex"  # booktabs, for a paper (results/formats.py)


TEXT_FORMATS = (Format.CSV, Format.MARKDOWN, Format.LATEX)


def choose(json_flag: bool, asked: Format | None = None) -> Format:
    """`--format` where given (with `--json`, only json); else JSON lines when piped or asked, the
    table on a terminal."""
    if asked is not None:
        if json_flag and asked is not Format.JSON:
            from .errors import UserError

            raise UserError(f"--json and --format {asked.value} ask for two formats: give one")
        return asked
    return Format.JSON if json_flag or not sys.stdout.isatty() else Format.TABLE


def check_file(path: str) -> None:
    """A path --output can write a document to, or one line saying why not (before any work starts)."""
    p = Path(path)
    if p.is_dir():
        raise UserError(f"--output {path}: is a directory; give a file name, such as {p / 'results.csv'}")
    parent = p.parent
    if not parent.is_dir():
        raise UserError(f"--output {path}: no directory {parent} to write it in")
    if not os.access(parent, os.W_OK) or (p.exists() and not os.access(p, os.W_OK)):
        raise UserError(f"--output {path}: not writable here")


def _first_line(text: str) -> str:
    return text.split("\n", 1)[0]


def _never_over_whole(text: str, path: Path) -> None:
    """A document that says it is partial (results/formats.py: its first line) never replaces one
    that does not: a whole table, hours of runs, is not overwritten by a part of one."""
    if "partial:" not in _first_line(text) or not path.is_file():
        return
    try:
        with path.open(encoding="utf-8", errors="replace") as f:
            old = f.readline()
    except OSError:
        return
    if "partial:" not in old:
        from .errors import UserError

        raise UserError(f"{path} not written: this table is {_first_line(text).lstrip('%*> ').rstrip('*')}, and "
                        f"{path} holds a table that is not partial; give another --output")


def write(text: str, path: str | None = None) -> None:
    """A rendered document (csv, markdown, LaTeX) on stdout as it is, or into `path`: a temporary file
    beside it, then a rename, so a reader never sees half a file and an old one survives a failure."""
    if path is not None:
        check_file(path)
        _never_over_whole(text, Path(path))
        errors.write_atomically(Path(path), text)
        stderr().print(f"wrote {path}")
        return
    try:
        sys.stdout.write(text)
        sys.stdout.flush()
    except BrokenPipeError:
        raise PipeClosed() from None


def stderr() -> Console:
    return Console(stderr=True, highlight=False, soft_wrap=True)  # log lines are never re-wrapped


def stdout() -> Console:
    return Console(highlight=False)


def _clean(value: Any) -> Any:
    """JSON has no NaN/Inf: write them as strings so every line parses with any JSON reader."""
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    if isinstance(value, dict):
        return {k: _clean(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_clean(v) for v in value]
    return value


def emit(obj: dict[str, Any]) -> None:
    """One JSON object per line on stdout, flushed so pipelines see it at once."""
    try:
        sys.stdout.write(json.dumps(_clean(obj), allow_nan=False) + "\n")
        sys.stdout.flush()
    except BrokenPipeError:
        raise PipeClosed() from None


@dataclass(frozen=True)
class View:
    """One table for people: which records it shows (`keep`), how a record becomes a row (`row`),
    the title, columns and caption; `notes`: lines printed under it on stdout (the paper's figures
    beside ours); `log`: lines for stderr after it (where a figure went). `show=False`: notes and
    log only, no table. In JSON mode only the records are written: they carry all of this."""

    title: str = ""
    columns: Sequence[str] = ()
    row: Callable[[dict[str, Any]], Sequence[Any]] = lambda r: ()
    keep: Callable[[dict[str, Any]], bool] = lambda r: True
    caption: str | None = None
    justify_right: Sequence[bool] | None = None
    compact: bool = False
    notes: Sequence[str] = ()
    log: Sequence[str] = ()
    show: bool = True
    rows: Callable[[list[dict[str, Any]]], Iterable[Sequence[Any]]] | None = None  # all kept records -> rows, where
    # a row is not one record (one record listing three files)
    no_wrap_first: bool = False  # the first column never folds (a row label such as "textbook baseline")
    # A table its own module draws (a study's table: several lines per cell, its own layout), given
    # the console's width; it replaces title, columns and rows.
    draw: Callable[[int], Any] | None = None

    def table(self, records: Sequence[dict[str, Any]]) -> Table:
        """This view's rich table of `records`."""
        kept = [r for r in records if self.keep(r)]
        t = table(self.title, self.columns, self.rows(kept) if self.rows else [self.row(r) for r in kept],
                  self.justify_right, caption=self.caption, compact=self.compact)
        if self.no_wrap_first:
            t.columns[0].no_wrap = True
        return t


def render(records: Iterable[dict[str, Any]], fmt: Format, view: View | Sequence[View]) -> None:
    """JSON: each record as one line on stdout (never rich there). TABLE: each view in turn."""
    records = list(records)
    if fmt is Format.JSON:
        for r in records:
            emit(r)
        return
    con = stdout()
    for v in [view] if isinstance(view, View) else view:
        if v.draw is not None:
            con.print(v.draw(con.width))
        elif v.show:
            con.print(v.table(records))
        for line in v.notes:
            con.print(line)
        for line in v.log:
            info(line)


def info(message: str) -> None:
    stderr().print(message)


def duration(seconds: float) -> str:
    """A wall time as people say it, the one form for the terminal and the docs: 45 s, 2.5 min, 1 h 14 min."""
    if seconds < 120:
        return f"{seconds:.0f} s"
    if seconds < 3600:
        return f"{seconds / 60:.1f} min"
    return f"{int(seconds // 3600)} h {round(seconds % 3600 / 60)} min"


def fmt(value: Any, digits: int = 2) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        if not math.isfinite(value):
            return str(value)
        return f"{value:.{digits}f}"
    if isinstance(value, int) and value >= 10_000:
        return f"{value:,}"
    return str(value)


def params_str(n: int) -> str:
    return f"{n / 1e6:.2f}M" if n >= 100_000 else f"{n / 1e3:.1f}k"


def table(title: str, columns: Sequence[str], rows: Iterable[Sequence[Any]], justify_right: Sequence[bool] | None = None,
          caption: str | None = None, compact: bool = False) -> Table:
    """A rich table whose numbers are never cut: right-justified (number) columns do not wrap, so at 80
    columns rich narrows the text columns, which fold (never "..."). `compact` drops the vertical rules
    for tables with many number columns (a cell may still hold several lines: median, range, paper)."""
    t = Table(title=title, caption=caption, header_style="bold", box=box.SIMPLE_HEAD if compact else box.HEAVY_HEAD,
              pad_edge=not compact, collapse_padding=compact)
    for i, col in enumerate(columns):
        right = justify_right[i] if justify_right else i > 0
        # A text column keeps room for a short word (or path part) per line, however many numbers there are.
        t.add_column(col, justify="right" if right else "left", no_wrap=right, overflow="fold",
                     min_width=None if right else 8)
    for row in rows:
        t.add_row(*(fmt(v) if not isinstance(v, str) else v for v in row))
    return t


def fold(name: str, width: int = 10) -> str:
    """A long name (a spec, a run) as lines of at most `width` characters, broken after / : + _ where it
    can: a column headed by it stays as narrow as its numbers."""
    lines, line = [], ""
    for part in re.split(r"(?<=[/:+_])", name):
        while len(part) > width:
            if line:
                lines.append(line)
                line = ""
            lines.append(part[:width])
            part = part[width:]
        if len(line) + len(part) > width:
            lines.append(line)
            line = ""
        line += part
    return "\n".join([*lines, line] if line else lines)


def short_paths(paths: Sequence[str]) -> tuple[str | None, list[str]]:
    """(the directory all paths share, each path below it): a table shows the short names and says
    the shared directory once. (None, paths) when they share nothing but the root."""
    if not paths:
        return None, []
    parents = [os.path.dirname(os.path.normpath(p)) for p in paths]
    try:
        base = os.path.commonpath(parents) if all(parents) else ""
    except ValueError:  # absolute and relative paths mixed
        base = ""
    if base in ("", os.sep):
        return None, list(paths)
    return base, [os.path.relpath(os.path.normpath(p), base) for p in paths]
