"""Markdown tables for `resnet ablate` and `resnet bench` (the long jobs of `make docs-studies`),
from the JSON records the commands print; the number formats are those of renderers.py.

Pure functions, as there: records in, markdown out, checked by tests/test_docs.py on hand-made records.
"""

from __future__ import annotations

from typing import Any

from renderers import DASH, count, duration, fixed, md_table

from resnet_cli.results.markdown import ablate_order, ablate_table, claims_reading, paper_cell  # noqa: F401 (the docs' study blocks: the package's renderer)

# --- resnet ablate -----------------------------------------------------------------------------

TIMES = ["study", "runs", "wall time", "CPU time (user)", "1-minute load at the end"]


def _times_row(name: str, records: list[dict[str, Any]], meta: dict[str, Any], how: str = "") -> tuple:
    """One study's line of a wall-time table: its rows x seeds (and `how` they trained), its times, the load."""
    got = [r for r in records if r.get("event") == "row"]
    seeds = max((len(r["seeds"]) for r in got), default=0)
    return (f"`{name}`", f"{len(got)} rows x {seeds} seed{'s' if seeds != 1 else ''}{how}",
            f"**{duration(meta['wall_s'])}**", duration(meta["cpu_user_s"]), meta["load_1min"])


def ablate_times_table(studies: list[tuple[str, list[dict[str, Any]], dict[str, Any]]]) -> str:
    return md_table(TIMES, [_times_row(name, records, meta) for name, records, meta in studies])


def afford_table(study: str, sides: list[tuple[list[dict[str, Any]], dict[str, Any]]]) -> str:
    """One quick study at 8 seeds trained one run at a time, then at its sized n with each row's seeds
    stacked: ([records, meta] of each side, in that order). The ratio is of the two wall times."""
    rows = [(*_times_row(study, records, meta, ", each row's seeds stacked" if "--stack" in meta["command"]
                         else ", one run at a time"), fixed(meta.get("other_cores"), 2))
            for records, meta in sides]
    (_, before), (_, after) = sides
    return md_table([*TIMES, "other work beside it (cores)"], rows) + (
        f"\nThe sized study, stacked, took **{after['wall_s'] / before['wall_s']:.2f}x** the wall time of 8 seeds "
        "trained one run at a time, measured one after the other in one docs job.\n")


def _registered(entry: dict[str, Any]) -> dict[str, Any] | None:
    """The saved `claims`/`study` record whose claims are this entry's registered family (the same
    (better, worse, metric) members), or None: not run, or run before the family was registered."""
    for r in entry.get("records") or []:
        if r.get("event") in ("study", "claims") and (r.get("family") or {}).get("declared", True):
            got = sorted((c["better"], c["worse"], c.get("metric", "train_error")) for c in r.get("claims") or [])
            if got and got == sorted(map(tuple, entry["members"])):
                return r
    return None


def claims_summary_table(entries: list[dict[str, Any]]) -> str:
    """Every shipped study and the degrade grid, one line each: the registered family's size (how many
    are the study's hypotheses), its sized n, and, where its saved output tested that family, the
    verdicts after Holm within the study. Each entry: name, members ((better, worse, metric) in the
    study's order), keys (one per member: the same key where two studies' claims compare the same
    runs), hypotheses, sized, records (the saved --json output, or None) and meta. Under it the totals
    over distinct claims (a claim two studies share counted once) and Holm across all of them at once."""
    from resnet_cli.results import evidence

    rows, seen, distinct, measured = [], set(), [], 0
    for e in entries:
        size = len(e["members"]) if not e["hypotheses"] else f"{len(e['members'])} ({e['hypotheses']} hypotheses)"
        got = _registered(e)
        if got is None:
            rows.append((f"`{e['name']}`", size, f"({e['sized']})", DASH, DASH, DASH,
                         "registered; not yet run on its registered seeds"))
            continue
        measured += 1
        ns = sorted({c["n"] for c in got["claims"] if c.get("n")})
        n = str(ns[0]) if len(ns) == 1 else f"{ns[0]}-{ns[-1]}" if ns else "0"
        when = f"{e['meta']['finished'][:10]}, {duration(e['meta']['wall_s'])}" if e.get("meta") else DASH
        verdicts = [c["verdict"] for c in got["claims"]]
        rows.append((f"`{e['name']}`", size, n, verdicts.count("in order"), verdicts.count("reversed"),
                     verdicts.count("unresolved"), when))
        by_member = {(c["better"], c["worse"], c.get("metric", "train_error")): c for c in got["claims"]}
        for member, key in zip(map(tuple, e["members"]), e["keys"]):
            if key not in seen:
                seen.add(key)
                distinct.append(by_member[member])
    text = md_table(["study", "registered claims", "n (seeds)", "in the paper's order", "reversed", "unresolved",
                     "generated, wall time"], rows)
    text += (f"\n{measured} of {len(entries)} studies run on their registered family and seeds. Each study's claims "
             "are one Holm family, adjusted within that study: each row keeps its own 5%. A `-` row has not been "
             "rerun since its family was registered; the n in brackets is the one its quick preset runs.")
    if distinct:
        verdict = [c["verdict"] for c in distinct]
        pooled = [dict(p=c["p"], mean=c["mean"]) for c in distinct]
        evidence.adjust(pooled)
        across = ["in order" if q["resolved"] and q["mean"] > 0 else "reversed" if q["resolved"] else "unresolved"
                  for q in pooled]
        text += (f" Over the {len(distinct)} distinct claims of the studies run (a claim that two studies test on "
                 f"the same runs counted once): {verdict.count('in order')} in the paper's order, "
                 f"{verdict.count('reversed')} reversed, {verdict.count('unresolved')} unresolved, each within its "
                 f"study's family; with Holm across all {len(distinct)} at once: {across.count('in order')} in the "
                 f"paper's order, {across.count('reversed')} reversed, {across.count('unresolved')} unresolved.")
    return text + "\n"


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


def bench_threads_table(named: list[tuple[str, list[dict[str, Any]]]]) -> str:
    """`resnet bench --busy --vary run.threads=auto,0,1` for each net: each setting quiet and with
    every core busy, and auto's rate over each (the targets are read from that column)."""
    rows = []
    for name, records in named:
        for r in records:
            auto = next(a for a in records if a["load"] == r["load"] and a["variant"].get("run.threads") == "auto")
            setting = r["variant"].get("run.threads")
            rows.append((name, "quiet" if r["load"] == "quiet" else "every core kept busy",
                         f"`{setting}`" + (" (every core)" if setting == 0 else ""),
                         (r.get("runtime") or {}).get("threads", DASH), count(round(r["images_per_s"])),
                         DASH if r is auto else f"**{auto['images_per_s'] / r['images_per_s']:.2f}x**", _busy(r)))
    return md_table(["net", "machine", "run.threads", "threads used", "img/s", "auto / this", "cores used by others"],
                    rows)


def bench_stack_table(named: list[tuple[str, list[dict[str, Any]]]]) -> str:
    """`resnet bench --stack` for each net: images/s per seed, separate and stacked, per stack size."""
    return md_table(["net", "seeds stacked (k)", "separate: img/s per seed", "stacked: img/s per seed", "stacked / separate"],
                    [(name, str(r["members"]), count(round(r["separate_images_per_s_per_seed"])),
                      count(round(r["stacked_images_per_s_per_seed"])), f"**{r['ratio']:.2f}x**")
                     for name, records in named for r in records])


def bench_stack_compile_table(records: list[dict[str, Any]]) -> str:
    """`resnet bench --stack K --set train.compile=true`: separate, stacked eager and stacked compiled
    per seed, side by side, and the compiled stack's first step (compiling)."""
    return md_table(["seeds stacked (k)", "separate: img/s per seed", "stacked: img/s per seed", "stacked / separate",
                     "stacked, compiled: img/s per seed", "compiled / eager stacked", "first step, compiling"],
                    [(str(r["members"]), count(round(r["separate_images_per_s_per_seed"])),
                      count(round(r["stacked_images_per_s_per_seed"])), f"{r['ratio']:.2f}x",
                      count(round(r["stacked_images_per_s_per_seed"] * r["compiled_over_eager"])),
                      f"**{r['compiled_over_eager']:.2f}x**", f"{r['compiled_first_step_s']:.0f} s")
                     for r in records if r.get("event") == "stack"])


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
