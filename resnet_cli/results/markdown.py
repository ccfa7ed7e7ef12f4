"""A study's results in Markdown: the table the docs print (ours beside the paper's figure, the
median's interval with its coverage) and the reading under it (the orders and Kendall's tau per
group, the declared claims after Holm, the exploratory pairs apart, the power line). It renders the
JSON records a study prints (table.records: rows, then the study) and computes nothing but the
order chains; `resnet ablate/report --format markdown` and the docs' generated blocks
(tools/docs_tables.py) both call it, so the two cannot drift apart.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from typing import Any

from ..sweep.family import Family
from . import evidence, power, verdicts

DASH = "-"


def md_table(header: Sequence[str], rows: Iterable[Sequence[Any]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    return "\n".join(lines) + "\n"


def fixed(x: float | None, digits: int = 2) -> str:
    if x is None or (isinstance(x, str)):
        return DASH if x is None else str(x)
    return f"{x:.{digits}f}"


def seeds_needed_str(need: dict[str, Any] | None) -> str:
    """'about 9 seeds (6-40 over the sd's uncertainty) would resolve it', or ''."""
    if not need:
        return ""
    if need["estimate"] is None:
        return f"more than {need['more_than']} seeds would be needed to resolve it with 80% power"
    lo, hi = (power.count_str(n) for n in need["range"])
    spread = f" ({lo}-{hi} over the sd's own uncertainty)" if hi != lo else ""
    return f"about {need['estimate']} seeds{spread} would resolve it with 80% power"


def paper_cell(value: Any) -> str:
    if value is None:
        return DASH
    return value if isinstance(value, str) else f"{value:.2f}"


def _interval(r: dict[str, Any]) -> str:
    """The median's interval with its coverage; recomputed from the per-seed errors for records
    older than the field (whose `ci95` was a bootstrap interval labelled 95% it did not hold)."""
    ev = r if "interval" in r else evidence.describe(r.get("test_errors") or [])
    return evidence.interval_str(ev["interval"], ev["coverage"])


def ablate_table(records: list[dict[str, Any]]) -> str:
    rows = []
    for r in records:
        if r.get("event") != "row":
            continue
        if not r["n"]:
            spread, interval = DASH, DASH
        else:
            interval = _interval(r)
            n = f"{r['n']}, {r['diverged']} diverged" if r.get("diverged") else f"{r['n']}"  # counted at chance
            if r["test_error_std"] is None:  # one seed: no spread to show
                spread = f"{fixed(r['test_error_mean'])} ({n})"
            else:
                spread = f"{fixed(r['test_error_mean'])} ± {fixed(r['test_error_std'])} ({n})"
        median = fixed(r["test_error_median"]) + (" **fail**" if r.get("fail") else "")
        rows.append((r["index"], r["row"], median, interval, spread,
                     fixed(r["train_loss"], 4), r["status"], paper_cell(r["paper"])))
    return md_table(["#", "row", "ours: median %", "interval of the median (coverage)", "mean ± std (n)", "train loss",
                     "status", "paper %"], rows)


def _values(r: dict[str, Any]) -> dict[Any, Any]:
    return dict(zip(r.get("seeds") or [], r.get("test_errors") or []))


def _at_n(pairs: list[dict[str, Any]]) -> str:
    return "n = " + "/".join(map(str, sorted({p["n"] for p in pairs})))


def _what(p: dict[str, Any]) -> str:
    metric = "" if p["metric"] in ("test_error", "val_error") else f" in {p['metric'].replace('_', ' ')}"
    # A claim carried to another net or recipe is the study's, never shown as the paper's finding.
    return f"{p['better']} < {p['worse']}{metric}" + (" (the study's hypothesis)" if p.get("hypothesis") else "")


def _difference(p: dict[str, Any]) -> str:
    """'difference +1.20 [+0.40, +2.10] 93.7%': worse minus better, paired by seed."""
    return f"difference {verdicts.shift_str(p)}"


def _open_pair(p: dict[str, Any]) -> str:
    if p["mean"] is None:
        return f"{_what(p)} (no seed in common)"
    if p["sd"] is None:
        return f"{_what(p)} ({_difference(p)}, one seed: no spread)"
    holm = f", Holm {p['p_holm']:.3g}" if p.get("p_holm") is not None else ""
    more = seeds_needed_str(p.get("seeds_needed"))
    return f"{_what(p)} ({_difference(p)}, p {p['p']:.3g}{holm}{'; ' + more if more else ''})"


def _study_record(records: list[dict[str, Any]]) -> dict[str, Any]:
    """The study's own summary as the command printed it; for hand-made rows without one (or a study
    record older than its claims), the same computed from the rows with every pair with a paper
    figure as the family. The reading names pairs by their labels, so the rows' indices stay out."""
    got = next((r for r in records if r.get("event") == "study" and "claims" in r), None)
    if got is not None:
        return got
    rows = [r for r in records if r.get("event") == "row"]
    return verdicts.compare([{"row": r["row"], "group": r.get("group"), "paper": r["paper"],
                              "median": r["test_error_median"], "fail": r.get("fail"),
                              "values": {"error": _values(r)}} for r in rows], Family(declared=False))


def claims_reading(study: dict[str, Any]) -> str:
    """The family's three counts and which claims they are, each at the seeds it was measured on,
    then the exploratory pairs apart, then the power line."""
    claims, family = study["claims"], study["family"]
    m = family["size"]
    one = m == 1
    kind = (("declared claim" if one else "declared claims") if family["declared"] else
            f"pair{'' if one else 's'} with a paper figure (no claims declared: the family)")
    if not claims:
        out = "No declared claim has both its rows here." if family["declared"] else ""
    else:
        kept = [p for p in claims if p["verdict"] == "in order"]
        open_ = [p for p in claims if p["verdict"] == "unresolved"]
        back = [p for p in claims if p["verdict"] == "reversed"]
        out = (f"{'Its' if not one else 'The'} {m} {kind}, by the sign-flip test of the differences paired by seed with Holm's adjustment "
               f"over them: {len(kept)} in the paper's order and resolved, {len(open_)} unresolved, {len(back)} "
               f"reversed and resolved.")
        if kept:
            out += f" In the paper's order (resolved at {_at_n(kept)}): " + "; ".join(
                f"{_what(p)} ({_difference(p)}, Holm p {p['p_holm']:.3g})" for p in kept) + "."
        if open_:
            out += f" Unresolved at {_at_n(open_)}: " + "; ".join(_open_pair(p) for p in open_) + "."
        if back:
            out += f" Reversed (resolved at {_at_n(back)}): " + "; ".join(
                f"{_what(p)} ({_difference(p)}, Holm p {p['p_holm']:.3g})" for p in back) + "."
    if study["exploratory"]:
        out += (f" Exploratory pairs ({len(study['exploratory'])}: raw p, not adjusted, never called resolved): "
                + "; ".join(_open_pair(p) for p in study["exploratory"]) + ".")
    if study.get("power"):
        out += f" {study['power'][0].upper()}{study['power'][1:]}."
    return out.strip()


def ablate_order(records: list[dict[str, Any]]) -> str:
    """The reading under a study table, from the study's own summary (resnet_cli/results/
    verdicts.py): per group of rows with a paper figure, both orders best first (a row with no
    figure of ours, diverged, goes last) and Kendall's tau of our medians against the paper's
    figures, failing rows left out; then the declared claims counted three ways (in the paper's
    order and resolved, unresolved with the seeds that would resolve them, reversed and resolved),
    each with its paired difference and interval; the exploratory pairs apart; the power line; then
    the paper's "fail"s."""
    rows = [r for r in records if r.get("event") == "row"]
    study = _study_record(records)

    def ours(r: dict[str, Any]) -> float:
        return math.inf if r["test_error_median"] is None else r["test_error_median"]

    def failed(r: dict[str, Any]) -> bool:
        return bool(r.get("fail")) or r["test_error_median"] is None

    def chain(ranked: list[dict[str, Any]], key) -> str:
        out = str(ranked[0]["index"])
        for prev, r in zip(ranked, ranked[1:]):
            out += (" = " if key(prev) == key(r) else " < ") + str(r["index"])
        return out

    numeric = [r for r in rows if isinstance(r["paper"], (int, float))]
    orders = {o["group"] or "": o for o in study["orders"]}
    groups: dict[str, list[dict[str, Any]]] = {}
    for r in numeric:
        groups.setdefault(r.get("group") or "", []).append(r)
    parts = []
    for key, members in groups.items():
        if len(members) < 2:
            continue
        name = f"{key}: rows with a paper figure" if key else "Rows with a paper figure"
        theirs = chain(sorted(members, key=lambda r: r["paper"]), lambda r: r["paper"])
        got = orders.get(key) or {}
        left = (f", {got['left_out']} failing row{'s' if got['left_out'] != 1 else ''} left out"
                if got.get("left_out") else "")
        how = "exact" if got.get("p_exact", True) else "Monte Carlo"
        tau = (f" Kendall's tau {got['kendall_tau']:.2f} (one-sided permutation p = {got['p_value']:.3f}, {how}, "
               f"{got['rows']} rows{left})." if got.get("kendall_tau") is not None else "")
        parts.append(f"{name}, best first: paper {theirs}; ours {chain(sorted(members, key=ours), ours)}.{tau}")
    if reading := claims_reading(study):
        parts.append(reading)
    paper_fails = [r for r in rows if r["paper"] == "fail"]
    if paper_fails:
        here = sum(1 for r in paper_fails if failed(r))
        parts.append(f"The paper's \"fail\" rows failing here: {here} of {len(paper_fails)}.")
    trained = [str(r["index"]) for r in numeric if failed(r)]
    if any(r.get("fail") for r in rows) or paper_fails:
        parts.append("Rows the paper trains that fail here: " + (", ".join(trained) if trained else "none") + ".")
    return " ".join(parts) + "\n" if parts else ""


def study(records: list[dict[str, Any]]) -> str:
    """A study's table, then its reading (the docs' generated block)."""
    return ablate_table(records) + "\n" + ablate_order(records)
