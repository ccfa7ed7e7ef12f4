"""Markdown tables for `resnet ablate` and `resnet bench` (the long jobs of `make docs-studies`),
from the JSON records the commands print; the number formats are those of renderers.py.

Pure functions, as there: records in, markdown out, checked by tests/test_docs.py on hand-made records.
"""

from __future__ import annotations

import math
from typing import Any, Callable

from renderers import DASH, count, duration, fixed, md_table

# --- resnet ablate -----------------------------------------------------------------------------

def paper_cell(value: Any) -> str:
    if value is None:
        return DASH
    return value if isinstance(value, str) else f"{value:.2f}"


def ablate_table(records: list[dict[str, Any]]) -> str:
    rows = []
    for r in records:
        if r.get("event") != "row":
            continue
        if not r["n"]:
            spread = DASH
        elif r["test_error_std"] is None:  # one seed: no spread to show
            spread = f"{fixed(r['test_error_mean'])} ({r['n']})"
        else:
            spread = f"{fixed(r['test_error_mean'])} ± {fixed(r['test_error_std'])} ({r['n']})"
        median = fixed(r["test_error_median"]) + (" **fail**" if r.get("fail") else "")
        rows.append((r["index"], r["row"], median, spread,
                     fixed(r["train_loss"], 4), r["status"], paper_cell(r["paper"])))
    return md_table(["#", "row", "ours: median %", "mean ± std (n)", "train loss", "status", "paper %"], rows)


def ablate_order(records: list[dict[str, Any]], group: Callable[[str], str] | None = None) -> str:
    """The rows' order against the paper's, for the reading under a study table: the rows the paper
    gives a figure for, best first, both ways (a row with no figure of ours, diverged, goes last);
    how many pairs keep the paper's order (a tie of ours counts against, two rows failing here are
    not a pair); and the paper's "fail"s. `group` (row label -> group name) compares rows only
    within their group, as He 2016b Table 2 compares the unit orderings of one net at a time."""
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

    def order(numeric: list[dict[str, Any]], name: str) -> str:
        # Two rows that both fail here sit at chance: their order is noise, so the pair is left out.
        pairs = [(a, b) for i, a in enumerate(numeric) for b in numeric[i + 1:]
                 if a["paper"] != b["paper"] and not (failed(a) and failed(b))]
        kept = sum((ours(a) < ours(b)) == (a["paper"] < b["paper"]) and ours(a) != ours(b) for a, b in pairs)
        theirs = chain(sorted(numeric, key=lambda r: r["paper"]), lambda r: r["paper"])
        return (f"{name}, best first: paper {theirs}; ours {chain(sorted(numeric, key=ours), ours)}. "
                f"Pairs in the paper's order (leaving out pairs that both fail here): {kept} of {len(pairs)}.")

    numeric = [r for r in rows if isinstance(r["paper"], (int, float))]
    groups: dict[str, list[dict[str, Any]]] = {}
    for r in numeric:
        groups.setdefault(group(r["row"]) if group else "", []).append(r)
    parts = [order(members, f"{key}: rows with a paper figure" if key else "Rows with a paper figure")
             for key, members in groups.items() if len(members) >= 2]
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
