"""`resnet ablate STUDY --claims`: the family a preset will test, said before anything runs.

One record per declared claim (better < worse, the metric, the paper's gap where its figures give
one, whether it is the paper's or the study's hypothesis, the source), then one per statement the
rule lists but does not test (with the reason), then the power line for this n. This is the
registration a user can paste into a preregistration or an appendix; the same family is written
into the results directory (claims.json) when the runs start, and decides their verdicts.
"""

from __future__ import annotations

import math
from typing import Any

from rich.markup import escape
from rich.table import Table

from . import power

METRIC_WORDS = {"test_error": "test error", "val_error": "held-out error", "train_loss": "training loss",
                "train_error": "training error"}


def _number(x: Any) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)


def paper_gap(better: Any, worse: Any) -> float | str | None:
    """Worse minus better in the paper's own figures, in points; "fail" where the worse row is the
    paper's "fail" and the better one trains; None where the paper gives no pair of figures."""
    if _number(better) and _number(worse):
        return round(worse - better, 4)
    if _number(better) and worse == "fail":
        return "fail"
    return None


def records(plan) -> list[dict[str, Any]]:
    """The registration of `plan`'s family (sweep/plan.py): claim, listed and power records."""
    paper = {row.label: row.paper for row in plan.rows}
    head = {"study": plan.name, "preset": plan.preset}
    out: list[dict[str, Any]] = []
    for i, m in enumerate(plan.family.members, start=1):
        # The paper column holds the study's metric: a claim in another metric has no figure there.
        better, worse = (paper.get(m.better), paper.get(m.worse)) if m.metric == plan.metric else (None, None)
        out.append({"event": "claim", **head, "index": i, "better": m.better, "worse": m.worse,
                    "metric": m.metric, "paper_better": better, "paper_worse": worse,
                    "paper_gap": paper_gap(better, worse), "hypothesis": m.hypothesis, "source": m.source})
    for note in plan.family.listed:
        out.append({"event": "listed", **head, "rows": list(note.rows), "says": note.says, "reason": note.reason})
    m, what = plan.family_size()
    out.append({"event": "power", **head, "claims": m, "declared": plan.family.declared, "n": len(plan.seeds),
                "seeds": list(plan.seeds), "effect": plan.family.effect,
                "line": power.plan_line(len(plan.seeds), m, plan.family.effect, what)})
    return out


def _gap_str(r: dict[str, Any]) -> str:
    gap = r["paper_gap"]
    if gap is None:
        return "-"
    return "fail" if gap == "fail" else f"{gap:.2f}"


def render(recs: list[dict[str, Any]], title: str, width: int | None = None) -> Table:
    """The registration for people: a table of the claims, the listed statements under it, and the
    power line as its caption."""
    claims = [r for r in recs if r["event"] == "claim"]
    listed = [r for r in recs if r["event"] == "listed"]
    (pw,) = [r for r in recs if r["event"] == "power"]
    what = "declared claims" if pw["declared"] else "pairs with a paper figure (no claims declared)"
    t = Table(title=escape(f"{title} [preset {pw['preset']}]: {len(claims)} {what}, one Holm family at 5%"),
              show_lines=False, width=width, title_justify="left")
    for name, right in (("#", True), ("claim (better < worse)", False), ("metric", False), ("paper gap", True),
                        ("source", False)):
        t.add_column(name, justify="right" if right else "left", overflow="fold")
    for r in claims:
        label = f"{r['better']} < {r['worse']}" + (" (hypothesis)" if r["hypothesis"] else "")
        t.add_row(str(r["index"]), escape(label), METRIC_WORDS.get(r["metric"], r["metric"]), _gap_str(r),
                  escape(r["source"]))
    lines = [f"listed, not tested ({len(listed)}):" if listed else "listed, not tested: none"]
    lines += [f"  - {' / '.join(r['rows'])}: {r['says']} ({r['reason']})" for r in listed]
    lines.append(f"power: {pw['line']}")
    t.caption = escape("\n".join(lines))
    t.caption_justify = "left"
    return t
