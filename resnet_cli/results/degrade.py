"""A degrade grid's results, computed once from its runs' records (runs/degrade_records.py): per
(net, depth) the summary over seeds (median, min-max, mean ± std, the median's interval with its
coverage, residual minus plain paired by seed with Holm over the grid) and the training-error
curve's band. The table, the JSON lines, degrade.json and the figure render these.
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping
from typing import Any

from ..sweep.degrade_plan import NETS
from ..sweep.family import Family, Member, Note
from . import evidence, verdicts


def _stats(values: list[float | None]) -> dict[str, float | None]:
    vals = [v for v in values if v is not None]
    if not vals:
        return {"median": None, "min": None, "max": None}
    return {"median": statistics.median(vals), "min": min(vals), "max": max(vals)}


PAIRED = ("train_acc", "test_acc")

# He 2016a's claims about a plain/residual grid, in its words (sec. 4.1, Fig. 1, 4 and 6), as the Holm
# family its verdicts come from: every ordering it states between two of the grid's rows, by the
# rule in docs/ablate.md ("Writing a study"); a trend it names ("deeper") is every pair along it.
DEEP_PLAIN_WORSE = ("He 2016a sec. 4.1, Fig. 1 and 4: the deeper plain net has higher training error than the "
                    "shallower one (the degradation problem)")
DEEP_PLAIN_WORSE_TEST = ("He 2016a sec. 4.1, Table 2 and Fig. 1: the deeper plain net has higher test error than "
                         "the shallower one (28.54 vs 27.94)")
RESIDUAL_BELOW_PLAIN = ("He 2016a sec. 4.1, Fig. 4 and 6: the deeper residual net reaches lower training error than "
                        "its plain twin")
RESIDUAL_BELOW_PLAIN_TEST = ("He 2016a sec. 4.1, Table 2: the deeper residual net has lower test error than its "
                             "plain twin (by 3.5 points at 34 layers)")
# The paper's words are "better" (sec. 4.1: "the 34-layer ResNet exhibits considerably lower training
# error" than the 18-layer one), so that is the claim tested; "no worse" would need a margin it never gives.
DEEP_RESIDUAL_BETTER = ("He 2016a sec. 4.1, Fig. 4 right: the deeper residual net has lower training error than the "
                        "shallower one (depth helps once the net is residual)")


def label(net: str, depth: int) -> str:
    return f"{net}-{depth}"


def he2016a_claims(depths: list[int]) -> Family:
    """The grid's declared claims. Training error: each deeper plain net above each shallower one;
    each deeper residual net below each shallower one and below its plain twin. Test error: each
    deeper plain net above each shallower one; each deeper residual net below its plain twin. The
    shallowest pair is listed, not tested: He 2016a calls the 18-layer plain and residual nets
    "comparably accurate"; "the 18-layer ResNet converges faster" is early training."""
    depths = sorted(set(depths))
    pairs = [(a, b) for i, a in enumerate(depths) for b in depths[i + 1:]]  # (shallower, deeper)
    deeper = depths[1:]
    members = [Member(label("plain", a), label("plain", b), "train_error", DEEP_PLAIN_WORSE) for a, b in pairs]
    members += [Member(label("residual", d), label("plain", d), "train_error", RESIDUAL_BELOW_PLAIN) for d in deeper]
    members += [Member(label("residual", b), label("residual", a), "train_error", DEEP_RESIDUAL_BETTER)
                for a, b in pairs]
    members += [Member(label("plain", a), label("plain", b), "test_error", DEEP_PLAIN_WORSE_TEST) for a, b in pairs]
    members += [Member(label("residual", d), label("plain", d), "test_error", RESIDUAL_BELOW_PLAIN_TEST)
                for d in deeper]
    listed = ()
    if depths:
        low = depths[0]
        rows = (label("residual", low), label("plain", low))
        listed = (Note(rows, "the shallow plain and residual nets are 'comparably accurate' (He 2016a sec. 4.1)",
                       "a pair the paper calls comparable: not an order"),
                  Note(rows, "the shallow residual net 'converges faster' (He 2016a sec. 4.1)",
                       "early training: the grid's claims read the last epoch"))
    return Family(declared=True, members=tuple(members), listed=listed)


def _error_pct(acc: Any) -> float | None:
    return None if acc is None else 100.0 * (1.0 - acc)


def claims(records: list[dict[str, Any]], family: Family | None = None) -> dict[str, Any]:
    """The grid's claims decided as one Holm family (verdicts.py's rule): each claim's difference,
    worse minus better in its error % (training or test) paired by seed, with its interval, p, Holm p, verdict and
    the seeds that would resolve it; the counts; the power line."""
    family = family or he2016a_claims([r["depth"] for r in records])
    values: dict[str, dict[str, dict[Any, float | None]]] = {}
    for r in records:
        row = values.setdefault(label(r["net"], r["depth"]), {"train_error": {}, "error": {}})
        row["train_error"][r["seed"]] = _error_pct(r["train_acc"])
        row["error"][r["seed"]] = _error_pct(r["test_acc"])  # test_error: a row's reported error
    # A declared family reads only each row's label and its seeds' values (verdicts.compare): a
    # grid's rows have no number, paper figure or fail rule of their own.
    rows = [{"row": name, "values": vals} for name, vals in values.items()]
    present = tuple(m for m in family.members if m.better in values and m.worse in values)  # --nets may drop a twin
    got = verdicts.compare(rows, Family(declared=True, members=present, listed=family.listed))
    return {"event": "claims", **{k: got[k] for k in ("family", "claims", "claims_in_order", "claims_unresolved",
                                                      "claims_reversed", "power", "difference")}}


def summarise(records: list[dict[str, Any]], reference: Mapping[tuple, dict[str, Any]],
              decided: dict[str, Any] | None = None) -> list[dict[str, Any]]:
    """Median and min-max over seeds per (net, depth), with mean, std and the median's
    order-statistic interval with its coverage (evidence.py; none below 3 seeds); n counts runs,
    diverged ones included in n and named (a diverged run counts as a failed run at chance,
    degrade_records.py, in the medians, the intervals and the pairs alike). The residual row of a depth also carries `paired`: residual minus plain per
    metric, paired by seed (the twins share every seed), with the sign-flip p, the Hodges-Lehmann
    difference with its interval and coverage; at every depth but the shallowest both pairs are
    declared claims (`claims`), Holm-adjusted over the claims; the shallowest's are exploratory (raw p only). `reference`: the published
    figures by (dataset, net, depth), carried beside ours; `decided`: the grid's `claims` where the
    caller has them already (computed here otherwise)."""
    groups: dict[tuple[str, int], list[dict[str, Any]]] = {}
    for r in records:
        groups.setdefault((r["net"], r["depth"]), []).append(r)
    out = []
    for (net, depth), runs in sorted(groups.items(), key=lambda kv: (kv[0][1], NETS.index(kv[0][0]))):
        # "study" and "row" name it as every study's row does, so `resnet report`'s readers take it as one.
        row: dict[str, Any] = {"event": "summary", "study": "degrade", "row": label(net, depth),
                               "net": net, "depth": depth, "n": len(runs),
                               "diverged": sum(bool(r.get("diverged", r["status"] == "diverged")) for r in runs),
                               "params": runs[0]["params"], "seeds": [r["seed"] for r in runs]}
        for metric in ("train_loss", "train_acc", "test_acc", "grad_norm_first_layer"):
            values = [r[metric] for r in runs]
            for stat, value in _stats(values).items():
                row[f"{metric}_{stat}"] = value
            ev = evidence.describe(values)
            row[f"{metric}_mean"], row[f"{metric}_std"] = ev["mean"], ev["std"]
            row[f"{metric}_interval"], row[f"{metric}_coverage"] = ev["interval"], ev["coverage"]
        # The error % a study row reports, from the accuracy medians (the median commutes with 100(1 - x);
        # the lowest error is the highest accuracy's).
        for acc, error in (("train_acc", "train_error"), ("test_acc", "test_error")):
            row[f"{error}_median"] = _error_pct(row[f"{acc}_median"])
            row[f"{error}_min"], row[f"{error}_max"] = _error_pct(row[f"{acc}_max"]), _error_pct(row[f"{acc}_min"])
        twin_runs = groups.get(("plain", depth)) if net == "residual" else None
        if twin_runs:
            row["paired"] = {m: evidence.paired({r["seed"]: r[m] for r in twin_runs}, {r["seed"]: r[m] for r in runs})
                             for m in PAIRED}
        # The published figures are for conv nets; a vit grid on the same data has none.
        ref = reference.get((runs[0]["dataset"], net, depth)) if runs[0].get("family") != "vit" else None
        if ref:
            row["reference"] = ref
        out.append(row)
    # A deeper depth's residual-minus-plain pairs are its claims (lower training and test error than the
    # plain twin): Holm over the declared claims decides them. The shallowest depth's are listed, not
    # tested (He 2016a: "comparably accurate"): exploratory, raw p only.
    by_pair = {(c["better"], c["worse"], c["metric"]): c for c in (decided or claims(records))["claims"]}
    for row in out:
        for metric, pair in (row.get("paired") or {}).items():
            error = "train_error" if metric == "train_acc" else "test_error"
            claim = by_pair.get((label("residual", row["depth"]), label("plain", row["depth"]), error))
            if claim is None:
                pair.update(p_holm=None, resolved=False, verdict="exploratory", seeds_needed=None)
            else:
                pair.update(p_holm=claim["p_holm"], resolved=claim["resolved"], verdict=claim["verdict"],
                            seeds_needed=claim["seeds_needed"])
    return out


def curve_bands(records: list[dict[str, Any]]) -> dict[tuple[str, int], dict[str, Any]]:
    """(net, depth) -> the pointwise median, min and max of its runs' training-error curves over the
    iterations they all share (He 2016a Fig. 6's curves, one band per net and depth)."""
    groups: dict[tuple[str, int], list[dict[str, Any]]] = {}
    for r in records:
        if r["curve"]:
            groups.setdefault((r["net"], r["depth"]), []).append(r)
    out = {}
    for key, runs in groups.items():
        iters, median, lo, hi = _band(runs)
        out[key] = {"iters": iters, "median": median, "lo": lo, "hi": hi, "runs": len(runs)}
    return out


def _band(runs: list[dict[str, Any]]) -> tuple[list[float], list[float], list[float], list[float]]:
    """Pointwise median/min/max of the runs' error curves over the iterations they all share."""
    length = min(len(r["curve"]) for r in runs)
    iters = [runs[0]["curve"][i][0] for i in range(length)]
    cols = [[r["curve"][i][2] for r in runs] for i in range(length)]
    return iters, [statistics.median(c) for c in cols], [min(c) for c in cols], [max(c) for c in cols]
