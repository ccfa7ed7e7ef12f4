"""`resnet configs`: the bundled specs and experiments, with the paper line each reproduces."""

from __future__ import annotations

import re

from .. import output
from ..cli import command
from ..spec import EXPERIMENT_DIRS, bundled
from . import common


@command()
def configs(json_: common.Json = False) -> None:
    """List the bundled specs (use a name as SPEC: `resnet train preact/resnet164-cifar10`), studies and experiments."""
    root = bundled.configs_dir()
    rows = []
    for path in sorted(root.rglob("*.yaml")):
        about = about_text(path.read_text(encoding="utf-8"))
        rel = path.relative_to(root).with_suffix("")
        folder = rel.parts[0]
        use = EXPERIMENT_DIRS.get(folder, "resnet train NAME").replace("NAME", rel.name if folder == "studies" else str(rel))
        rows.append({"event": "config", "name": str(rel), "kind": {"studies": "study", "degrade": "degrade"}.get(folder, "spec"),
                     "use": use, "path": str(path), "about": about})
    # Two columns keep the sentences readable at 80 columns; how to run each kind is one caption line
    # (and each row's exact command is in the JSON output's "use").
    output.render(rows, output.choose(json_), output.View(
        "bundled configs", ["name", "about"], lambda r: (r["name"], r["about"]), justify_right=[False] * 2,
        caption="run a spec with `resnet train NAME`, a study with `resnet ablate NAME` (without studies/), "
                "a degrade config with `resnet degrade NAME`"))


# A sentence ends at . ! or ? before a capital (or a quote) or at the end: "sec. 4.2" and "Fig. 6" do not.
_SENTENCE_END = re.compile(r"""[.!?](?=\s+[A-Z"'`]|$)""")


def about_text(text: str) -> str:
    """What a config is about: its leading comment from the start up to the first sentence that ends on
    or after the first line (a first line that breaks mid-sentence continues onto the next ones)."""
    lines = []
    for line in text.splitlines():
        if not line.startswith("#"):
            break
        lines.append(line.lstrip("#").strip())
    joined = " ".join(part for part in lines if part)
    first = len(lines[0]) if lines else 0
    for m in _SENTENCE_END.finditer(joined):
        head = joined[:m.end()]
        if m.end() >= first and head.count("(") == head.count(")"):
            return head
    return joined
