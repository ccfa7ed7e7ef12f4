"""Matplotlib set-up in one place: a file backend (no display needed) and a consistent look."""

from __future__ import annotations

from pathlib import Path


def pyplot():
    """matplotlib.pyplot on the Agg backend, imported only when a figure is drawn."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    plt.rcParams.update({"figure.dpi": 110, "axes.grid": True, "grid.alpha": 0.3, "font.size": 9})
    return plt


# The papers draw plain nets dashed and residual nets solid (He 2016a Fig. 6); we keep that convention.
STYLE = {"plain": {"linestyle": "--"}, "residual": {"linestyle": "-"}}


def save(fig, path: str | Path) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, bbox_inches="tight")
    import matplotlib.pyplot as plt

    plt.close(fig)
    return path
