"""Can an output path be written? Checked before any work starts, so a file in the way, a folder
that cannot be made or a read-only place is one line naming the path, not a traceback (or a run
lost) after the work. Nothing here creates anything."""

from __future__ import annotations

import os
from pathlib import Path

from .errors import UserError


def _nearest_existing(path: Path) -> Path:
    while not path.exists() and path != path.parent:
        path = path.parent
    return path


def check_dir(path: str | Path, flag: str = "--out") -> Path:
    """A directory that exists, or one `mkdir -p` can make: no file at the path or above it, and
    the nearest folder that exists writable."""
    path = Path(os.path.expanduser(str(path)))
    if path.exists() and not path.is_dir():
        raise UserError(f"{flag} {path}: is a file, not a directory; give a directory path")
    _check_place(_nearest_existing(path), flag, path, "a directory path")
    return path


def check_file(path: str | Path, flag: str = "--out") -> Path:
    """A file that can be written: not a directory, its folder one that exists or can be made."""
    path = Path(os.path.expanduser(str(path)))
    if path.is_dir():
        raise UserError(f"{flag} {path}: is a directory; give a file path")
    _check_place(_nearest_existing(path.parent), flag, path, "a path in a folder")
    return path


def _check_place(existing: Path, flag: str, given: Path, valid: str) -> None:
    if not existing.is_dir():
        raise UserError(f"{flag} {given}: {existing} is a file, not a folder; give {valid}")
    if not os.access(existing, os.W_OK | os.X_OK):
        raise UserError(f"{flag} {given}: cannot write in {existing} (permission denied); give another path")
