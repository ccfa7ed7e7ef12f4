"""Text from a study file that becomes part of a path: one check, before anything is written.

A study's grid values and axis names are substituted into its `run_dir` template, and its name and
preset name into the default results directory. Each such value must be one plain path component:
a value "../../tmp/x" would otherwise put a run directory outside --out, where `report --runs`
never looks. Refusing (rather than rewriting) keeps a run directory's name what the study says.
"""

from __future__ import annotations

import os
from pathlib import Path

from ..errors import UserError

# NUL ends a path in the C calls under open(); a backslash is a separator on Windows.
_FORBIDDEN = ("/", "\\", "\0")


def component(value: str, what: str, source: str) -> str:
    """`value` when it is one path component (not empty, no separator, not `.` or `..`); else one
    line naming the study, what the value is, and what would be valid."""
    if value in ("", ".", "..") or any(c in value for c in _FORBIDDEN) or os.path.isabs(value):
        raise UserError(f"{source}: {what} {value!r} becomes part of a run directory's path; valid: a name "
                        "without '/', '\\\\' or NUL that is not '.' or '..'")
    return value


def inside(results: Path, path: Path, source: str) -> Path:
    """`path` when it lies under `results` (compared as written, '..' resolved lexically); else one
    line. The last guard, for a template whose parts were each safe but whose whole is not."""
    root = os.path.normpath(os.path.abspath(results))
    here = os.path.normpath(os.path.abspath(path))
    if os.path.commonpath([root, here]) != root or here == root:
        raise UserError(f"{source}: run directory {path} is not inside the results directory {results}; "
                        "a study's run_dir and grid values name a folder below --out")
    return path
