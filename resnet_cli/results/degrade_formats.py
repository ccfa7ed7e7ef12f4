"""A degrade grid's results in researchers' formats, from the records `resnet degrade --json`
prints (runs, one summary per (net, depth), the claims object) or `resnet report --json` reads back
(summaries named rows): Markdown (the docs' tables: the grid, the pairs, the claims), CSV (one line
per (net, depth) with every metric's median, range, mean, sd and the median's interval; `--pairs`:
one line per claim and exploratory pair, in formats.PAIR_COLUMNS) and a booktabs LaTeX table.
Renders only: every figure here was computed in results/degrade.py.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ..output import duration
from . import evidence, verdicts
from .formats import PAIR_COLUMNS, latex_escape, partial_line, write_csv
from .markdown import DASH, fixed, md_table, seeds_needed_str

METRICS = ("train_loss", "train_acc", "test_acc", "grad_norm_first_layer")
STATS = ("median", "min", "max", "mean", "std", "interval_lo", "interval_hi", "coverage")
ROW_COLUMNS = ("study", "row", "net", "depth", "n", "diverged", "params", "seeds",
               *(f"{m}_{s}" for m in METRICS for s in STATS), "train_error_median", "test_error_median")


def _summaries(records: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    return [r for r in records if r.get("event") == "summary" or (r.get("event") == "row" and "net" in r)]


def _claims(records: Sequence[dict[str, Any]]) -> dict[str, Any] | None:
    return next((r for r in records if r.get("event") == "claims"), None)


def _med_range(s: dict[str, Any], metric: str, fmt) -> str:
    """`median (min–max)` over seeds, as `resnet degrade` summarises each (net, depth)."""
    med = s.get(f"{metric}_median")
    if med is None:
        return DASH
    if s.get("n", 1) > 1:
        return f"{fmt(med)} ({fmt(s[f'{metric}_min'])}–{fmt(s[f'{metric}_max'])})"
    return fmt(med)


def table(records: list[dict[str, Any]], findings: list[dict[str, Any]] | None = None) -> str:
    """The summaries of `resnet degrade --json` (or the rows of `resnet report --json` on its
    directory); then the article's figures beside ours (degrade.json's `findings`)."""
    summaries = _summaries(records)
    three = lambda x: fixed(x, 3)  # noqa: E731
    two = lambda x: fixed(x, 2)  # noqa: E731
    def ci(s: dict[str, Any], metric: str) -> str:
        if f"{metric}_interval" not in s:  # a record older than the field (a bootstrap interval): not shown
            return DASH
        c = s[f"{metric}_interval"]
        return "n < 3: no interval" if c is None else evidence.interval_str(c, s[f"{metric}_coverage"], 3)

    text = md_table(
        ["net", "depth", "n", "params", "train loss", "train acc", "train acc: interval of the median (coverage)",
         "test acc", "test acc: interval (coverage)", "grad norm, first conv, step 1"],
        [(s["net"], s["depth"], f"{s['n']}" + (f" ({s['diverged']} diverged)" if s.get("diverged") else ""),
          f"{s['params']:,}", _med_range(s, "train_loss", three), _med_range(s, "train_acc", three),
          ci(s, "train_acc"), _med_range(s, "test_acc", three), ci(s, "test_acc"),
          _med_range(s, "grad_norm_first_layer", two)) for s in summaries])
    seeds = sorted({seed for s in summaries for seed in s.get("seeds", [])})
    if seeds:
        run = seeds == list(range(seeds[0], seeds[-1] + 1))
        text += f"\nMedian (min–max) over seeds {f'{seeds[0]}..{seeds[-1]}' if run else ', '.join(map(str, seeds))}.\n"
    reading = pairs_text(summaries)
    if reading:
        text += "\n" + reading
    if findings:
        def within(f: dict[str, Any]) -> bool:  # records older than `in_range` carry the numbers it is made of
            lo, hi = f["article_range"]
            return f["in_range"] if "in_range" in f else f["ours"] is not None and lo <= f["ours"] <= hi
        text += "\n" + md_table(
            ["the article's finding", "measure", "ours", "article (10 seeds)", "ours within its 10-seed range"],
            [(f["finding"], f["measure"], fixed(f["ours"], 2),
              (f"{fixed(f['article'], 2)}, " if f.get("article") is not None else "")
              + f"{f['article_range'][0]:g}–{f['article_range'][1]:g}", "yes" if within(f) else "**no**")
             for f in findings])
    return text


def pairs_text(summaries: list[dict[str, Any]]) -> str:
    """Per depth, residual minus plain accuracy (points), paired by seed: the sign-flip test's p
    after Holm over the grid's pairs, and the Hodges-Lehmann interval of the difference
    (resnet_cli/results/evidence.py): "resolved at n = k" where the adjusted p is at most 5%,
    else "not resolved" with the seeds that would resolve it. Records older than these fields
    (a bootstrap interval) are not read."""
    out, can = [], []
    for s in summaries:
        for metric, name in (("train_acc", "training"), ("test_acc", "test")):
            p = (s.get("paired") or {}).get(metric)
            if not p or p["mean"] is None or "p_holm" not in p:
                continue
            can.append(p["can_resolve"])
            gap = f"ResNet-{s['depth']} minus plain-{s['depth']}, {name} accuracy: {100 * p['mean']:+.1f} points"
            t = p.get("interval")
            ti = (f" [{100 * t[0]:+.1f}, {100 * t[1]:+.1f}] {evidence.coverage_label(p['coverage'])}" if t else "")
            if p.get("p_holm") is None:  # exploratory: not one of He 2016a's claims, never called resolved
                out.append(f"{gap}{ti} (p {p['p']:.3g}, exploratory) at n = {p['n']}.")
                continue
            test = f"p {p['p']:.3g}, Holm {p['p_holm']:.3g}"
            if p["resolved"]:
                out.append(f"{gap}{ti} ({test}), resolved at n = {p['n']}.")
            else:
                more = seeds_needed_str(p.get("seeds_needed"))
                out.append(f"{gap}{ti} ({test}), not resolved at n = {p['n']}{'; ' + more if more else ''}.")
    if not out:
        return ""
    head = ("Paired by seed (sign-flip test; at every depth but the shallowest both pairs are He 2016a's claims, "
            "Holm over the grid's claims; the shallowest twins, 'comparably accurate' in He 2016a, are exploratory, "
            "raw p only; the mean difference, and the Hodges-Lehmann interval with the coverage it has)")
    if not any(can):
        head += f"; {min(p['n'] for s in summaries for p in (s.get('paired') or {}).values())} seeds cannot resolve a pair at 5%"
    return head + ": " + " ".join(out) + "\n"


# A claim's error; an output from before the grid's test-error claims has no `metric`: all were training error.
_ERROR_WORDS = {"train_error": "training", "test_error": "test"}


def claims_table(records: list[dict[str, Any]], train_wall_s: float | None = None) -> str:
    """He 2016a's claims about the grid, from the `claims` object of `resnet degrade --json`: each
    claim's paired difference in its error (training or test) with its interval, n, Holm p and
    verdict; then the runs' own training time. Outputs older than the claims show none."""
    claims = _claims(records)
    text = ""
    if claims and claims["claims"]:
        text = "\n" + md_table(
            ["He 2016a's claim", "error %", "source", "difference (worse minus better)", "n", "Holm p", "verdict"],
            [(f"{c['better']} < {c['worse']}", _ERROR_WORDS[c.get("metric", "train_error")], c["source"].split(":")[0],
              verdicts.shift_str(c), c["n"],
              DASH if c["p_holm"] is None else f"{c['p_holm']:.3g}",
              c["verdict"] if c["verdict"] != "reversed" else "**reversed**") for c in claims["claims"]])
        text += f"\n{claims['power']}.\n"
    if train_wall_s is not None:
        text += f"\nTraining time, every run's own wall time summed: {duration(train_wall_s)}.\n"
    return text


# -- CSV -----------------------------------------------------------------------------------------

def rows_csv(records: Sequence[dict[str, Any]]) -> str:
    """One line per (net, depth): every metric's statistics, unrounded; seeds joined by spaces."""
    def flat(s: dict[str, Any]) -> dict[str, Any]:
        out = {**s, "seeds": " ".join(map(str, s.get("seeds") or []))}
        for m in METRICS:
            lo, hi = s.get(f"{m}_interval") or (None, None)
            out[f"{m}_interval_lo"], out[f"{m}_interval_hi"] = lo, hi
        return out
    return write_csv(ROW_COLUMNS, (flat(s) for s in _summaries(records)))


def pairs_csv(records: Sequence[dict[str, Any]]) -> str:
    """One line per comparison: He 2016a's claims (training or test error %, kind `claim`), then each
    residual-minus-plain pair that is no claim (the shallowest depth's: kind `exploratory`, raw p),
    all as worse minus better in error points."""
    # residual minus plain in accuracy is plain minus residual in error: x 100 for points.
    pct = lambda x: None if x is None else 100.0 * x  # noqa: E731
    out = []
    for c in (_claims(records) or {}).get("claims") or []:
        lo, hi = c["interval"] or (None, None)
        out.append({"study": "degrade", "kind": "claim", **c, "difference": c["shift"], "difference_lo": lo,
                    "difference_hi": hi})
    for s in _summaries(records):
        for metric, error in (("train_acc", "train_error"), ("test_acc", "test_error")):
            p = (s.get("paired") or {}).get(metric)
            if not p or p.get("p_holm") is not None:  # a claim: listed above
                continue
            lo, hi = p["interval"] or (None, None)
            out.append({"study": "degrade", "kind": "exploratory", "better": f"residual-{s['depth']}",
                        "worse": f"plain-{s['depth']}", "metric": error, "n": p["n"], "difference": pct(p["shift"]),
                        "difference_lo": pct(lo), "difference_hi": pct(hi), "coverage": p["coverage"],
                        "mean": pct(p["mean"]), "p": p["p"], "p_exact": p.get("p_exact"), "p_holm": None,
                        "verdict": "exploratory", "hypothesis": False})
    return write_csv(PAIR_COLUMNS, out)


# -- LaTeX ---------------------------------------------------------------------------------------

def latex(records: Sequence[dict[str, Any]], partial: tuple[int, int] | None = None) -> str:
    """A booktabs table: per (net, depth) the median training and test error (%) with min-max and the
    step-1 gradient norm; the caption states the test, and lists the claims resolved in order (the
    worse row of each marked \\dag) and those reversed."""
    summaries, claims = _summaries(records), _claims(records) or {}
    kept = [c for c in claims.get("claims") or [] if c["verdict"] == "in order"]
    reversed_ = [c for c in claims.get("claims") or [] if c["verdict"] == "reversed"]
    marked = {c["worse"] for c in kept}

    def num(x: float | None, digits: int = 2) -> str:
        return "--" if x is None else f"{x:.{digits}f}"

    def with_range(s: dict[str, Any], error: str) -> str:  # no finished seed: no range either
        med = s[f"{error}_median"]
        return num(med) if med is None else f"{num(med)} ({num(s[f'{error}_min'])}--{num(s[f'{error}_max'])})"

    lines = [f"% {partial_line(partial)}"] if partial else []
    lines += [r"\begin{table}[t]", r"\centering", r"\begin{tabular}{lrrrrr}", r"\toprule",
             r"Net & Depth & $n$ & Train error (\%) & Test error (\%) & $\|\partial E/\partial W_1\|$ \\",
             r"\midrule"]
    for s in summaries:
        name = f"{s['net']}-{s['depth']}"
        dag = r"$^{\dag}$" if name in marked else ""
        lines.append(f"{latex_escape(s['net'])}{dag} & {s['depth']} & {s['n']} & {with_range(s, 'train_error')} & "
                     f"{with_range(s, 'test_error')} & "
                     f"{num(s['grad_norm_first_layer_median'])} \\\\")
    lines += [r"\bottomrule", r"\end{tabular}"]
    size = (claims.get("family") or {}).get("size", 0)
    caption = ("Plain and residual twins (He et al., 2016a): the median over seeds of the last epoch's errors, "
               "min--max in parentheses, and the first convolution's gradient norm at step 1. He 2016a's claims "
               f"({size}) are tested on training and test error paired by seed, by the exact sign-flip test with Holm's "
               "adjustment over them.")
    if kept:
        caption += (r" $^{\dag}$: the worse net of a claim resolved in the paper's order: "
                    + "; ".join(f"{c['better']} $<$ {c['worse']}" for c in kept) + ".")
    if reversed_:
        caption += " Resolved the other way: " + "; ".join(f"{c['better']} $>$ {c['worse']}" for c in reversed_) + "."
    if not kept and not reversed_:
        caption += " No claim is resolved at this $n$."
    if partial:
        caption = f"Partial: {partial[0]} of {partial[1]} runs finished. " + caption
    lines += [rf"\caption{{{caption}}}", r"\label{tab:degrade}", r"\end{table}"]
    return "\n".join(lines) + "\n"


def text(records: Sequence[dict[str, Any]], fmt: str, pairs: bool = False,
         findings: list[dict[str, Any]] | None = None, partial: tuple[int, int] | None = None) -> str:
    """The grid in one of the text formats: csv (rows, or pairs), markdown (the grid, the claims) or
    latex. `partial`: (runs finished, runs asked for) of a grid not every run of which has finished:
    the Markdown and LaTeX say so on their first line (csv: each row's n says it)."""
    if fmt == "csv":
        return pairs_csv(records) if pairs else rows_csv(records)
    if fmt == "markdown":
        head = f"**{partial_line(partial)}**\n\n" if partial else ""
        return head + table(records, findings) + claims_table(records)
    if fmt == "latex":
        return latex(records, partial)
    raise ValueError(fmt)
