"""A module's figure as matplotlib drew it: the Figure its `figures.save` call received, so a test
reads the artists back (points, styles, labels) rather than trusting that a PNG appeared."""

from pathlib import Path

from resnet_cli import figures


def drawn_figure(monkeypatch, draw, path: Path):
    """`draw(path)` (a module's `figure(results, path)`, bound to its results): the Figure it saved.
    Asserts it returned the path and wrote a PNG there."""
    seen, real = {}, figures.save

    def save(fig, to):
        seen["fig"] = fig
        return real(fig, to)

    monkeypatch.setattr(figures, "save", save)
    assert draw(path) == path
    assert path.read_bytes()[:4] == b"\x89PNG"
    return seen["fig"]
