"""A study's declared claims decided at each budget of `resnet ablate --budgets`: is a claim that does
not hold here short of budget, or does it not hold at all?

Each budget's table is decided with the same test and the same family as the plain study (the
family recorded with its runs): the sign-flip test paired by seed, Holm over all m declared claims.
At a budget where a claim's rows were not retrained (`--budget-rows`), the claim counts in Holm's m
with p = 1, so retraining only a few rows never makes the others' test easier. Beside each verdict
stand the two rows' median training losses at that budget, so "under-trained" is measured, not
asserted.

A claim's pattern over the budgets, in order:
- holds: in the paper's order at every budget it was decided at;
- holds with budget: not in order at the smallest budget (reversed or unresolved), in order at
  the largest one it was decided at;
- reversed at every budget;
- reversed with budget: not reversed at the smallest budget, reversed at the largest one (longer
  training makes the order the other way from the paper's, and clearer);
- unresolved: resolved at no budget;
- mixed: anything else (in order at one budget and not at a later one).
"""

from __future__ import annotations

import enum
from typing import Any

from rich.markup import escape
from rich.table import Table

from ..sweep.family import Family
from . import evidence, study
from .records import StudyTable

class Retrain(str, enum.Enum):
    """`--budget-rows`: which rows `--budgets` retrains beyond 1x."""
    ALL = "all"
    UNRESOLVED = "unresolved"  # the rows of the claims unresolved at 1x
    NOT_IN_ORDER = "not-in-order"  # ... unresolved or reversed at 1x


PATTERNS = ("holds", "holds with budget", "reversed at every budget", "reversed with budget", "unresolved", "mixed")


def _verdict(claim: dict[str, Any], p_holm: float | None) -> str:
    if claim["n"] == 0 or claim["p"] is None:
        return "not run"
    resolved = p_holm is not None and p_holm <= evidence.ALPHA and claim["mean"] != 0
    return "in order" if resolved and claim["mean"] > 0 else "reversed" if resolved else "unresolved"


def pattern(verdicts: list[str]) -> str:
    """The pattern word of one claim's verdicts, smallest budget first ("not run" left out)."""
    got = [v for v in verdicts if v != "not run"]
    if not got:
        return "unresolved"
    if all(v == "in order" for v in got):
        return "holds"
    if got[0] != "in order" and got[-1] == "in order":
        return "holds with budget"
    if all(v == "reversed" for v in got):
        return "reversed at every budget"
    if got[0] != "reversed" and got[-1] == "reversed" and "in order" not in got:
        return "reversed with budget"
    if all(v == "unresolved" for v in got):
        return "unresolved"
    return "mixed"


def decide(tables: list[StudyTable], family: Family) -> list[dict[str, Any]]:
    """One record per declared claim: its verdict, difference, Holm p, n and the two rows' median
    training losses at each budget of `tables` (one per budget, of one study and preset), and
    its pattern."""
    tables = sorted(tables, key=lambda t: t.budget)
    per_claim: list[dict[str, Any]] = [
        {"event": "budget_claim", "study": tables[0].study, "preset": tables[0].preset, "better": m.better,
         "worse": m.worse, "metric": m.metric, "source": m.source, "hypothesis": m.hypothesis,
         "budgets": [t.budget for t in tables], "at": {}} for m in family.members]
    for table in tables:
        table.family = family
        result = study.compute(table)
        losses = {r.row: r.train_loss for r in result.rows}
        claims = result.comparison["claims"]
        # Holm over the whole family at every budget: a claim not decided here counts with p = 1.
        holm = evidence.holm([1.0 if c["p"] is None else c["p"] for c in claims])
        for record, claim, p_holm in zip(per_claim, claims, holm):
            record["at"][f"{table.budget}x"] = {
                "verdict": _verdict(claim, p_holm), "n": claim["n"], "difference": claim.get("shift"),
                "mean": claim["mean"], "p": claim["p"], "p_holm": None if claim["p"] is None else p_holm,
                "train_loss_better": losses.get(claim["better"]), "train_loss_worse": losses.get(claim["worse"])}
    for record in per_claim:
        record["pattern"] = pattern([record["at"][f"{b}x"]["verdict"] for b in record["budgets"]])
    return per_claim


def rows_of_claims(result, which: str) -> set[str]:
    """The rows of the claims `which` asks to retrain, from a plain study's result: `unresolved`
    (unresolved at 1x) or `not-in-order` (unresolved or reversed at 1x)."""
    wanted = {"unresolved": {"unresolved"}, "not-in-order": {"unresolved", "reversed"}}[which]
    return {label for c in result.comparison["claims"] if c["verdict"] in wanted for label in (c["better"], c["worse"])}


_STYLE = {"holds": "green", "holds with budget": "yellow", "reversed at every budget": "red",
          "reversed with budget": "red", "unresolved": "yellow", "mixed": "yellow"}
_SHORT = {"in order": "in order", "reversed": "reversed", "unresolved": "unres.", "not run": "-"}


def _loss(x: float | None) -> str:
    return "-" if x is None else f"{x:.3g}"


def _cell(at: dict[str, Any]) -> str:
    """'in order +1.20 (p 0.004)\\nloss 0.012 / 0.340': verdict, difference, Holm p, both rows' training loss."""
    if at["verdict"] == "not run":
        return "-"
    diff = "" if at["difference"] is None else f" {at['difference']:+.2f}"
    holm = "" if at["p_holm"] is None else f" (Holm {at['p_holm']:.2g})"
    return (f"{_SHORT[at['verdict']]}{diff}{holm}\nloss {_loss(at['train_loss_better'])} / "
            f"{_loss(at['train_loss_worse'])}")


def render(records: list[dict[str, Any]], title: str):
    """The claims across budgets for people: one line per claim, a cell per budget, the pattern."""
    budgets = records[0]["budgets"]
    t = Table(title=escape(f"{title}: the declared claims at each budget"), header_style="bold",
              caption=escape("each cell: verdict, difference worse minus better (points) and Holm p over the whole "
                             "family at that budget; then the median training loss of the better / worse row. "
                             "-: the claim's rows were not retrained at that budget (they count with p = 1)"))
    t.add_column("claim (better < worse)", overflow="fold", min_width=12)
    for b in budgets:
        t.add_column(f"{b}x", no_wrap=False)
    t.add_column("pattern")
    for r in records:
        metric = "" if r["metric"] in ("test_error", "val_error") else f" [{r['metric'].replace('_', ' ')}]"
        style = _STYLE[r["pattern"]]
        t.add_row(escape(f"{r['better']} < {r['worse']}{metric}" + (" (hypothesis)" if r["hypothesis"] else "")),
                  *(escape(_cell(r["at"][f"{b}x"])) for b in budgets), f"[{style}]{r['pattern']}[/]")
    return t


CSV_COLUMNS = ("study", "preset", "better", "worse", "metric", "hypothesis", "budget", "verdict", "n", "difference",
               "mean", "p", "p_holm", "train_loss_better", "train_loss_worse", "pattern", "source")


def flat(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One record per (claim, budget): the long form pandas groups by claim or by budget."""
    return [{**{k: r[k] for k in ("study", "preset", "better", "worse", "metric", "hypothesis", "pattern",
                                  "source")}, "budget": b, **r["at"][f"{b}x"]}
            for r in records for b in r["budgets"]]


def markdown(records: list[dict[str, Any]]) -> str:
    """The claims across budgets as the docs print them: one line per claim, a cell per budget."""
    from .markdown import md_table

    budgets = records[0]["budgets"]
    rows = []
    for r in records:
        metric = "" if r["metric"] in ("test_error", "val_error") else f" ({r['metric'].replace('_', ' ')})"
        cells = [_cell(r["at"][f"{b}x"]).replace("\n", "; ") for b in budgets]
        rows.append((f"{r['better']} < {r['worse']}{metric}" + (" (hypothesis)" if r["hypothesis"] else ""),
                     *cells, f"**{r['pattern']}**"))
    return md_table(["claim (better < worse)", *(f"{b}x" for b in budgets), "pattern"], rows)


def show(btable, tables: list[StudyTable], family: Family | None, fmt, save: str | None = None) -> None:
    """`--budgets`' output in any format: each row's verdict (sweep/budgets.py), then, where the
    study declares claims, each claim at each budget with its pattern. JSON: `budget_row` then
    `budget_claim` records; csv: the claims in long form (one line per claim and budget), or the
    rows where there are no claims; markdown: both tables."""
    from .. import output
    from ..sweep import budgets as budgets_mod
    from .formats import write_csv
    from .markdown import md_table

    rows = [budgets_mod.row_json(btable, row) for row in btable.rows]
    claims = decide(tables, family) if family is not None and family.members else []
    if fmt is output.Format.CSV:
        if claims:
            output.write(write_csv(CSV_COLUMNS, flat(claims)), save)
        else:
            cols = ("study", "preset", "index", "row", *(f"{b}x" for b in btable.budgets), "threshold",
                    "iters_to_threshold", "budget_to_threshold", "verdict")
            output.write(write_csv(cols, ({**r, **r["test_error_median"]} for r in rows)), save)
        return
    if fmt is output.Format.MARKDOWN:
        text = md_table(["#", "row", *(f"{b}x: test error %" for b in btable.budgets), "slow or fails"],
                        [(r["index"], r["row"], *(output.fmt(r["test_error_median"][f"{b}x"]) for b in btable.budgets),
                          r["verdict"]) for r in rows])
        output.write(text + ("\n" + markdown(claims) if claims else ""), save)
        return
    views = [output.View(draw=lambda width: budgets_mod.render(btable))]
    if claims:
        views.append(output.View(draw=lambda width: render(claims, f"{btable.title} [preset {btable.preset}]")))
    output.render(rows + claims, fmt, views)
