"""Matplotlib set-up in one place: a file backend (no display needed) and a consistent look."""

from __future__ import annotations

import os
from pathlib import Path

from . import writable
from .errors import UserError


def pyplot():
    """matplotlib.pyplot on the Agg backend, imported only when a figure is drawn."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    plt.rcParams.update({"figure.dpi": 110, "axes.grid": True, "grid.alpha": 0.3, "font.size": 9})
    return plt


# The papers draw plain nets dashed and residual nets solid (He 2016a Fig. 6); we keep that convention.
STYLE = {"plain": {"linestyle": "--"}, "residual": {"linestyle": "-"}}


def formats() -> list[str]:
    """The file extensions matplotlib can write (png, pdf, svg, ...)."""
    from matplotlib.backend_bases import FigureCanvasBase

    return sorted(FigureCanvasBase.get_supported_filetypes())


def target(given: str | Path | None, default: Path, flag: str = "--out") -> Path:
    """Where a figure goes, checked before any work is done. None: `default`. A directory (one that
    exists, or a path ending in /): the default file name inside it. Otherwise a file whose
    extension matplotlib writes and whose folder can be made. Every problem is one line naming it."""
    if given is None:
        return default
    text = str(given)
    path = Path(os.path.expanduser(text))
    if text.endswith(("/", os.sep)) or path.is_dir():
        path = path / default.name
    suffix = path.suffix.lower().lstrip(".")
    if suffix not in formats():
        what = f"unknown figure format '.{suffix}'" if suffix else "no file extension"
        raise UserError(f"{flag} {text}: {what}; give a file name ending in one of "
                        f"{', '.join('.' + f for f in formats())} (e.g. {path.with_suffix('.png').name})")
    return writable.check_file(path, flag)


def save(fig, path: str | Path) -> Path:
    import matplotlib.pyplot as plt

    path = Path(path)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fig.savefig(path, bbox_inches="tight")
    except (OSError, ValueError) as exc:  # a path that went bad since target() checked it
        raise UserError(f"{path}: cannot write the figure ({exc.__class__.__name__}: "
                        f"{str(exc).splitlines()[0] if str(exc) else 'no detail'})") from None
    finally:
        plt.close(fig)
    return path
