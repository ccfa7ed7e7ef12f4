"""A study against its paper: the declared claims decided as one Holm family, every other pair of
rows exploratory, and the paper's order per group by Kendall's tau.

- Claims (sweep/family.py): each a (better, worse, metric) pair of rows, its difference worse minus
  better paired by seed, so a positive difference is the paper's order. The sign-flip p of every
  claim is Holm-adjusted over the claims alone; a claim is "in order" or "reversed" only where its
  adjusted p is at most 5%, else "unresolved". Each claim carries the seeds that would resolve its
  measured gap with 80% power in this family (power.py).
- Exploratory pairs: every other pair of rows with different paper figures in one group (leaving
  out pairs that both fail here: two nets at chance have no order). Printed with the raw p and the
  difference's interval; never Holm-adjusted, never called resolved, never counted.
- A study that declares no claims (a user's own) takes those pairs as its family instead.
- Kendall's tau of our medians against the paper's figures, per group (He 2016b Table 2 orders one
  net's units at a time), never pooled across groups; rows that fail here (the paper's rule, or no
  median) are left out of the order test, and each group says how many were.
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence
from typing import Any

from ..sweep.family import Family, Member
from . import evidence, power

ERROR = ("test_error", "val_error")  # the study's reported error: a row's `values["error"]`


def _number(x: Any) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool)


def _failed(r: Mapping[str, Any]) -> bool:
    return bool(r.get("fail")) or r.get("median") is None


def _measured(r: Mapping[str, Any]) -> bool:
    return bool(evidence.finite_values(list(r["values"]["error"].values())))


def paper_pairs(rows: Sequence[Mapping[str, Any]], metric: str = "test_error") -> list[Member]:
    """Every pair of rows with numeric, different paper figures within one group, better (lower in
    the paper) first, leaving out pairs that both fail here and rows with no value."""
    numeric = [r for r in rows if _number(r.get("paper"))]
    out = []
    for k, a in enumerate(numeric):
        for b in numeric[k + 1:]:
            if (a.get("group") != b.get("group") or a["paper"] == b["paper"] or (_failed(a) and _failed(b))
                    or not (_measured(a) and _measured(b))):
                continue
            better, worse = (a, b) if a["paper"] < b["paper"] else (b, a)
            out.append(Member(better["row"], worse["row"], metric, "the paper's figures"))
    return out


def _pair(member: Member, by_label: Mapping[str, Mapping[str, Any]], family: int,
          seeds: frozenset | None = None) -> dict[str, Any]:
    """One pair, worse minus better paired by seed; `seeds`: only these (the family's recorded ones)."""
    key = "error" if member.metric in ERROR else member.metric
    a, b = by_label.get(member.better), by_label.get(member.worse)

    def values(row):
        got = (row or {}).get("values", {}).get(key, {})
        return got if seeds is None else {s: v for s, v in got.items() if s in seeds}

    got = evidence.paired(values(a), values(b), family)
    return {"better": member.better, "worse": member.worse, "metric": member.metric, "source": member.source,
            "hypothesis": member.hypothesis, "better_index": (a or {}).get("index"), "worse_index": (b or {}).get("index"),
            "group": (a or {}).get("group"), **got}


def _orders(rows: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    groups: dict[str | None, list[Mapping[str, Any]]] = {}
    for r in rows:
        if _number(r.get("paper")):
            groups.setdefault(r.get("group"), []).append(r)
    out = []
    for name, members in groups.items():
        ranked = [r for r in members if not _failed(r)]
        tau = evidence.kendall([r["median"] for r in ranked], [r["paper"] for r in ranked])
        out.append({"group": name, **tau, "left_out": len(members) - len(ranked),
                    "left_out_rows": [r["row"] for r in members if _failed(r)]})
    return out


def compare(rows: Sequence[Mapping[str, Any]], family: Family) -> dict[str, Any]:
    """`rows`: dicts with `index`, `row` (label), `group`, `paper`, `median`, `fail` and `values`
    ({"error": {seed: value}, "train_loss": ..., "train_error": ...}, as counted). See the module."""
    by_label = {r["row"]: r for r in rows}
    members = list(family.members) if family.declared else paper_pairs(rows)
    m = len(members)
    # Registered seeds decide (family.py): seeds added after the recording cannot move a verdict.
    seeds = frozenset(family.seeds) if family.recorded and family.seeds is not None else None
    claims = evidence.adjust([_pair(member, by_label, m, seeds) for member in members])
    for c in claims:
        c["verdict"] = ("in order" if c["resolved"] and c["mean"] > 0 else
                        "reversed" if c["resolved"] and c["mean"] < 0 else "unresolved")
        c["seeds_needed"] = power.seeds_needed(c["diffs"], m)
    declared = {(mb.better, mb.worse) for mb in members} | {(mb.worse, mb.better) for mb in members}
    exploratory = []
    if family.declared:
        for member in paper_pairs(rows):
            if (member.better, member.worse) in declared:
                continue
            pair = _pair(member, by_label, 1)
            pair.update(p_holm=None, resolved=False, verdict="exploratory")
            exploratory.append(pair)
    orders = _orders(rows)
    one = orders[0] if len(orders) == 1 else None
    return {
        "family": {"declared": family.declared, "size": m, "effect": family.effect,
                   "recorded": family.recorded, "file_sha256": family.file_sha256, "note": family.note,
                   "seeds": None if family.seeds is None else list(family.seeds),
                   "listed": [{"rows": list(n.rows), "says": n.says, "reason": n.reason} for n in family.listed]},
        "claims_in_order": sum(c["verdict"] == "in order" for c in claims),
        "claims_unresolved": sum(c["verdict"] == "unresolved" for c in claims),
        "claims_reversed": sum(c["verdict"] == "reversed" for c in claims),
        "claims": claims, "exploratory": exploratory, "orders": orders,
        # One group: its tau at the top level too (a study with groups has one per group, never pooled).
        **{k: (one or {}).get(k) for k in ("kendall_tau", "p_value", "rows", "p_exact", "reason")},
        "power": power_line(claims, m, family.effect, "claims" if family.declared else "pairs with a paper figure"),
        "difference": evidence.SHIFT_METHOD,
    }


def power_line(claims: Sequence[Mapping[str, Any]], m: int, effect: float, what: str) -> str:
    """Under a table: what its n can resolve in this family (power.plan_line), and the gap in
    points that n resolves with 80% power at the claims' median sd of differences."""
    measured = [c for c in claims if c["n"]]
    if not measured:
        return ""
    n = min(c["n"] for c in measured)
    line = power.plan_line(n, m, effect, what)
    sds = [c["sd"] for c in measured if c.get("sd")]
    gap = power.gap_at(n, m)
    if sds and gap is not None:
        line += (f"; at the median sd of the differences ({statistics.median(sds):.2g} points) {n} seeds resolve "
                 f"a gap of {gap * statistics.median(sds):.2g} points with {power.POWER:.0%} power")
    return line


def shift_str(pair: Mapping[str, Any], digits: int = 2) -> str:
    """'+1.23 [0.40, 2.10] 93.7%': the difference (worse minus better) with its interval and coverage."""
    if pair.get("shift") is None:
        return "-"
    text = f"{pair['shift']:+.{digits}f}"
    if pair.get("interval") is None:
        return text
    lo, hi = pair["interval"]
    return f"{text} [{lo:+.{digits}f}, {hi:+.{digits}f}] {evidence.coverage_label(pair['coverage'])}"
