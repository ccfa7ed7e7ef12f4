"""Markdown tables for `resnet ablate` and `resnet bench` (the long jobs of `make docs-studies`),
from the JSON records the commands print; the number formats are those of renderers.py.

Pure functions, as there: records in, markdown out, checked by tests/test_docs.py on hand-made records.
"""

from __future__ import annotations

import math
from typing import Any

from renderers import DASH, count, duration, fixed, md_table, seeds_needed_str

from resnet_cli.results import evidence  # the statistics, one place (torch-free)

# --- resnet ablate -----------------------------------------------------------------------------

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
    ns = sorted({p["n"] for p in pairs})
    return f"n = {ns[0]}" if len(ns) == 1 else "n = " + "/".join(map(str, ns))


def _open_pair(p: dict[str, Any]) -> str:
    what = f"{p['better']} < {p['worse']}"
    if p["mean"] is None:
        return f"{what} (no seed in common)"
    diff = f"paired difference {p['mean']:+.2f} points"
    if p["sd"] is None:
        return f"{what} ({diff}, one seed: no spread)"
    more = seeds_needed_str(p["seeds_needed"]) or "no gap to resolve"
    return f"{what} ({diff}, sd {p['sd']:.2f}, p {p['p']:.3g}, Holm {p['p_holm']:.3g}; {more})"


def _pairs_reading(pairs: list[dict[str, Any]], family: int) -> str:
    """The pairs' three counts and which pairs they are, each at the seeds it was measured on.
    `family`: how many pairs Holm ran over (the study's, across its groups)."""
    kept = [p for p in pairs if p["verdict"] == "in order"]
    open_ = [p for p in pairs if p["verdict"] == "unresolved"]
    back = [p for p in pairs if p["verdict"] == "reversed"]
    over = "" if family == len(pairs) else f" (Holm over the study's {family})"
    if not any(p["can_resolve"] for p in pairs):
        return (f"Of its {len(pairs)} pair{'' if len(pairs) == 1 else 's'}{over} (leaving out pairs that both fail here) "
                f"none can be resolved: {evidence.power_line(pairs, family)}. Gaps: "
                + "; ".join(_open_pair(p) for p in open_) + ".")
    over_them = "them" if family == len(pairs) else f"the study's {family}"
    out = (f"Of its {len(pairs)} pair{'' if len(pairs) == 1 else 's'} (leaving out pairs that both fail here), "
           f"by the sign-flip test with Holm's adjustment over {over_them}: {len(kept)} in the paper's order "
           f"and resolved, {len(open_)} not resolved, {len(back)} reversed and resolved.")
    if power := evidence.power_line(pairs, family):
        out += f" {power[0].upper()}{power[1:]}."
    if kept:
        out += f" In the paper's order (resolved at {_at_n(kept)}): " + ", ".join(
            f"{p['better']} < {p['worse']}" for p in kept) + "."
    if open_:
        out += f" Not resolved at {_at_n(open_)}: " + "; ".join(_open_pair(p) for p in open_) + "."
    if back:
        out += f" Reversed (resolved at {_at_n(back)}): " + ", ".join(
            f"{p['worse']} ahead of {p['better']} by {-p['mean']:.2f} points" for p in back) + "."
    return out


def ablate_order(records: list[dict[str, Any]]) -> str:
    """The reading under a study table, generated from its statistics (resnet_cli/results/
    evidence.py): per group of rows with a paper figure, both orders best first (a row with no
    figure of ours, diverged, goes last), Kendall's tau of our medians against the paper's figures
    with its permutation p-value, and the pairs counted three ways: in the paper's order and
    resolved (the sign-flip test's Holm-adjusted p at most 5%), not resolved (with the seeds that
    would resolve it), reversed and resolved; then the paper's "fail"s. Two rows failing here are
    not a pair. A row's `group` (the study's) compares rows only within their group, as He 2016b
    Table 2 compares the unit orderings of one net at a time."""
    rows = [r for r in records if r.get("event") == "row"]

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
    group_of = {r["row"]: r.get("group") or "" for r in numeric}
    # One family for Holm: every pair of the study, whichever group it is in.
    pairs = evidence.compare([{"index": r["index"], "row": r["row"], "paper": r["paper"], "median": r["test_error_median"],
                               "fail": r.get("fail"), "values": _values(r)} for r in numeric],
                             group_of.get if any(group_of.values()) else None)["pairs"]

    def order(members: list[dict[str, Any]], key: str) -> str:
        name = f"{key}: rows with a paper figure" if key else "Rows with a paper figure"
        theirs = chain(sorted(members, key=lambda r: r["paper"]), lambda r: r["paper"])
        ranked = [r for r in members if r["test_error_median"] is not None]
        got = evidence.kendall([r["test_error_median"] for r in ranked], [r["paper"] for r in ranked])
        how = "exact" if got.get("p_exact", True) else "Monte Carlo"
        tau = (f" Kendall's tau {got['kendall_tau']:.2f} (one-sided permutation p = {got['p_value']:.3f}, {how}, "
               f"{got['rows']} rows)." if got["kendall_tau"] is not None else "")
        return (f"{name}, best first: paper {theirs}; ours {chain(sorted(members, key=ours), ours)}.{tau} "
                + _pairs_reading([p for p in pairs if (p["group"] or "") == key], len(pairs)))

    groups: dict[str, list[dict[str, Any]]] = {}
    for r in numeric:
        groups.setdefault(group_of[r["row"]], []).append(r)
    parts = [order(members, key) for key, members in groups.items() if len(members) >= 2]
    paper_fails = [r for r in rows if r["paper"] == "fail"]
    if paper_fails:
        here = [str(r["index"]) for r in paper_fails if failed(r)]
        parts.append(f"The paper's \"fail\" rows failing here: {len(here)} of {len(paper_fails)}.")
    trained = [str(r["index"]) for r in numeric if failed(r)]
    if any(r.get("fail") for r in rows) or paper_fails:
        parts.append("Rows the paper trains that fail here: " + (", ".join(trained) if trained else "none") + ".")
    return " ".join(parts) + "\n" if parts else ""


def ablate_times_table(studies: list[tuple[str, list[dict[str, Any]], dict[str, Any]]]) -> str:
    rows = []
    for name, records, meta in studies:
        got = [r for r in records if r.get("event") == "row"]
        seeds = max((len(r["seeds"]) for r in got), default=0)
        rows.append((f"`{name}`", f"{len(got)} rows x {seeds} seed{'s' if seeds != 1 else ''}", f"**{duration(meta['wall_s'])}**",
                     duration(meta["cpu_user_s"]), meta["load_1min"]))
    return md_table(["study", "runs", "wall time", "CPU time (user)", "1-minute load at the end"], rows)


# --- resnet bench ------------------------------------------------------------------------------

def _busy(r: dict[str, Any]) -> str:
    c = r.get("contention") or {}
    return fixed(c.get("other_cores"), 2) if c else DASH


def bench_train_table(nets: list[tuple[str, str, list[dict[str, Any]]]]) -> str:
    rows = []
    for label, command, records in nets:
        r = records[0]
        gflop = r["flops_per_image"] / 1e9 if r.get("flops_per_image") else None
        rows.append((label, f"`{command}`", count(round(r["images_per_s"])), count(round(r["baseline_images_per_s"])),
                     f"**{r['ratio']:.2f}x**", fixed(gflop, 3),
                     f"{r['achieved_gflop_s']:.0f} / {r['baseline_achieved_gflop_s']:.0f}",
                     f"{count(round(r['peak_memory_mb']))} / {count(round(r['baseline_peak_memory_mb']))}",
                     f"{r['projected_schedule_h']:.1f} h", _busy(r)))
    return md_table(["net", "command", "ours img/s", "baseline img/s", "ours / baseline", "GFLOP/img",
                     "achieved GFLOP/s ours / base", "peak RSS MB ours / base", "whole schedule, projected",
                     "cores used by others"], rows)


def bench_data_table(records: list[dict[str, Any]]) -> str:
    return md_table(["what", "batch", "ours img/s", "baseline img/s", "ours / baseline", "cores used by others"],
                    [(f"augmentation path, {r['spec']}", r["batch_size"], count(round(r["images_per_s"])),
                      count(round(r["baseline_images_per_s"])), f"**{r['ratio']:.1f}x**", _busy(r)) for r in records])


def bench_vary_table(records: list[dict[str, Any]]) -> str:
    return md_table(["variant", "img/s", "step ms", "CPU ms per image", "peak RSS MB", "cores used by others"],
                    [(r["label"], count(round(r["images_per_s"])), f"{1000 * r['step_time_s']:.0f}",
                      f"{1000 * r['cpu_s_per_image']:.2f}", count(round(r["peak_memory_mb"])), _busy(r))
                     for r in records])


def bench_stack_table(named: list[tuple[str, list[dict[str, Any]]]]) -> str:
    """`resnet bench --stack` for each net: images/s per seed, separate and stacked, per stack size."""
    return md_table(["net", "seeds stacked (k)", "separate: img/s per seed", "stacked: img/s per seed", "stacked / separate"],
                    [(name, str(r["members"]), count(round(r["separate_images_per_s_per_seed"])),
                      count(round(r["stacked_images_per_s_per_seed"])), f"**{r['ratio']:.2f}x**")
                     for name, records in named for r in records])


def bench_memory_table(records: list[dict[str, Any]]) -> str:
    r = records[0]
    return md_table(["", "no checkpointing", f"K = {r['segments']}", "ratio"], [
        ("peak memory", f"{count(round(r['baseline_peak_memory_mb']))} MB", f"{count(round(r['peak_memory_mb']))} MB",
         f"**{100 * r['memory_ratio']:.1f}%**"),
        ("step time", f"{r['baseline_step_time_s']:.2f} s", f"{r['step_time_s']:.2f} s",
         f"{r['step_time_s'] / r['baseline_step_time_s']:.1f}x"),
        ("first-step loss", f"{r['baseline_losses'][0]:.6f}", f"{r['losses'][0]:.6f}",
         f"difference {r['first_step_loss_diff']}"),
    ]) + (f"\n{r['units']} units, batch {r['batch_size']}, {r['steps']} steps on {r['device']}; after them the "
          f"largest weight difference is {r['param_max_diff']} and the largest BN-statistics difference "
          f"{r['bn_stats_max_diff']}.\n")
