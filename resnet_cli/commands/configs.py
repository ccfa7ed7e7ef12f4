"""`resnet configs`: the bundled specs and studies, with the paper line each reproduces."""

from __future__ import annotations

from ..cli import command
from . import common


@command()
def configs(json_: common.Json = False) -> None:
    """List the bundled specs (use a name as SPEC: `resnet train preact/resnet164-cifar10`)."""
    from .. import output
    from ..spec import configs_dir

    root = configs_dir()
    rows = []
    for path in sorted(root.rglob("*.yaml")):
        first = path.read_text(encoding="utf-8").splitlines()[:1]
        about = first[0].lstrip("# ").strip() if first and first[0].startswith("#") else ""
        rows.append({"name": str(path.relative_to(root).with_suffix("")), "path": str(path), "about": about})
    if output.choose(json_) is output.Format.JSON:
        for row in rows:
            output.emit(row)
        return
    output.stdout().print(output.table("bundled configs", ["name", "about"], [(r["name"], r["about"]) for r in rows],
                                       justify_right=[False, False]))
