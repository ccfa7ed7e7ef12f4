"""`resnet configs`: the bundled specs and experiments, with the paper line each reproduces."""

from __future__ import annotations

from ..cli import command
from . import common


@command()
def configs(json_: common.Json = False) -> None:
    """List the bundled specs (use a name as SPEC: `resnet train preact/resnet164-cifar10`), studies and experiments."""
    from .. import output
    from ..spec import EXPERIMENT_DIRS, configs_dir

    root = configs_dir()
    rows = []
    for path in sorted(root.rglob("*.yaml")):
        first = path.read_text(encoding="utf-8").splitlines()[:1]
        about = first[0].lstrip("# ").strip() if first and first[0].startswith("#") else ""
        rel = path.relative_to(root).with_suffix("")
        folder = rel.parts[0]
        use = EXPERIMENT_DIRS.get(folder, "resnet train NAME").replace("NAME", rel.name if folder == "studies" else str(rel))
        rows.append({"name": str(rel), "kind": {"studies": "study", "degrade": "degrade"}.get(folder, "spec"),
                     "use": use, "path": str(path), "about": about})
    if output.choose(json_) is output.Format.JSON:
        for row in rows:
            output.emit(row)
        return
    output.stdout().print(output.table("bundled configs", ["name", "kind", "run with", "about"],
                                       [(r["name"], r["kind"], r["use"], r["about"]) for r in rows],
                                       justify_right=[False] * 4))
