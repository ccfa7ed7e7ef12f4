"""Markdown tables from the JSON records the `resnet` commands print (used by tools/docs_tables.py).

Pure functions: records in, markdown out, so tests/test_docs.py can check each on a few hand-made
records without training anything. Number formats follow the figures' precision: error rates in
percent to 2 decimals (one digits test image is 0.28 points), gradient norms in scientific
notation (their exponent is the point), accuracies as fractions to 3 decimals.
"""

from __future__ import annotations

import math
import statistics
from typing import Any

from resnet_cli.results.markdown import DASH, fixed, md_table, seeds_needed_str  # noqa: F401 (shared with the package)
# A degrade grid's tables are the package's: resnet degrade --format markdown prints the same.
from resnet_cli.results.degrade_formats import claims_table as degrade_claims_table  # noqa: F401
from resnet_cli.results.degrade_formats import pairs_text as degrade_pairs  # noqa: F401
from resnet_cli.results.degrade_formats import table as degrade_table  # noqa: F401
from resnet_cli.output import duration  # wall times in one form, here and on the terminal


def sci(x: float | None) -> str:
    """8.8e+05: two significant digits and the exponent, which is what a gradient norm is read for."""
    if x is None or isinstance(x, str):
        return DASH if x is None else str(x)
    return f"{x:.1e}"


def short(x: float) -> str:
    """Three significant digits below 1000, else 2.6e3 (landscape losses span nine decades)."""
    if x is None or isinstance(x, str):
        return DASH if x is None else str(x)
    if abs(x) >= 1000:
        mant, exp = f"{x:.1e}".split("e")
        return f"{mant}e{int(exp)}"
    return f"{x:.3g}"


def count(n: int) -> str:
    return f"{n:,}"


# --- resnet train ------------------------------------------------------------------------------

def train_table(rows: list[dict[str, Any]]) -> str:
    """One row per run: the `summary` object of `resnet train --json`, with a `label` added."""
    return md_table(
        ["net", "seed", "params", "iterations", "train loss", "train error %", "test error %", "wall s"],
        [(r["label"], r["seed"], count(r["params"]), r["iterations"], fixed(r["train_loss"], 3),
          fixed(r["train_error"]), fixed(r["test_error"]), f"{r['wall_time_s']:.0f}") for r in rows])


# --- resnet degrade ----------------------------------------------------------------------------

def budget_table(budgets: list[tuple[str, list[dict[str, Any]]]], paper: tuple[float, float],
                 lo: int = 20, hi: int = 56) -> str:
    """He 2016a Fig. 6's third comparison at several budgets: per budget and seed, the training and
    test error (%) of ResNet-lo and ResNet-hi from `resnet degrade --json` run records, how far the
    deeper net is behind, and each run's own wall time (a rerun that reuses finished runs takes
    seconds); then the paper's CIFAR-10 test errors (Table 6) at its 64k iterations (sec. 4.2)."""
    def err(acc: float | None) -> float | None:
        return None if acc is None else 100.0 * (1.0 - acc)

    rows = []
    for label, records in budgets:
        runs = {(r["depth"], r["seed"]): r for r in records if r.get("event") == "run" and r["net"] == "residual"}
        for seed in sorted({s for (d, s) in runs if (lo, s) in runs and (hi, s) in runs}):
            a, b = runs[(lo, seed)], runs[(hi, seed)]
            gap = None if a["train_acc"] is None or b["train_acc"] is None else 100.0 * (a["train_acc"] - b["train_acc"])
            rows.append((label, seed, count(b["iterations"]), fixed(err(a["train_acc"])), fixed(err(b["train_acc"])),
                         fixed(gap), fixed(err(a["test_acc"])), fixed(err(b["test_acc"])),
                         f"{duration(a['wall_s'])} / {duration(b['wall_s'])}"))
    rows.append(("He 2016a, CIFAR-10 (Fig. 6, Table 6)", DASH, "64,000", DASH, DASH, "none: ahead (Fig. 6)",
                 fixed(paper[0]), fixed(paper[1]), DASH))
    return md_table(["budget", "seed", "iterations", f"ResNet-{lo} training error %", f"ResNet-{hi} training error %",
                     f"ResNet-{hi} behind by (points)", f"ResNet-{lo} test error %", f"ResNet-{hi} test error %",
                     "each run's own wall time"], rows)


# --- resnet gradnorm ---------------------------------------------------------------------------

def _measured(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """gradnorm's rows without the `figure` line it ends with (older output has none)."""
    return [r for r in records if r.get("event") != "figure"]


def gradnorm_table(records: list[dict[str, Any]]) -> str:
    """Per spec: ||dE/dW|| of the first conv, over all weight layers, of the fc layer; dx_0 / dx_L."""
    records = _measured(records)
    specs = list(dict.fromkeys(r["spec"] for r in records))
    rows = []
    for spec in specs:
        layers = [r for r in records if r["spec"] == spec and r["path"] != "input"]
        inputs = sorted((r for r in records if r["spec"] == spec and r["path"] == "input"), key=lambda r: r["index"])
        norms = [r["grad_norm"] for r in layers]
        fc = [r["grad_norm"] for r in layers if r["kind"] == "Linear"]
        first = min(layers, key=lambda r: r["index"])["grad_norm"]
        x0 = inputs[0] if inputs else {}
        rows.append((spec, len(layers), sci(first),
                     f"{sci(statistics.median(norms))} ({sci(min(norms))} – {sci(max(norms))})",
                     sci(fc[-1]) if fc else DASH, sci(x0.get("relative")),
                     sci(x0["direct_term"]) if x0.get("direct_term") is not None else DASH))
    return md_table(["spec", "weight layers", "dW, first conv", "dW, median (min – max) over the layers", "dW, fc",
                     "dx_0 / dx_L", "direct term lambda^L"], rows)


def _per_block(records: list[dict[str, Any]], spec: str, suffix: str) -> list[float]:
    found = [r for r in records if r["spec"] == spec and r.get("label", "").endswith(suffix)]
    return [r["grad_norm"] for r in sorted(found, key=lambda r: r["index"])]


def vit_gradnorm_table(runs: list[tuple[str, list[dict[str, Any]]]]) -> str:
    """Xiong et al. 2020 Fig. 3 as numbers, per (init, spec): ||dE/dW|| of the MLP's output layer
    (fc2) in the first, middle and last block, last over first; the attention output projection's too."""
    rows = []
    for init, records in runs:
        records = _measured(records)
        for spec in dict.fromkeys(r["spec"] for r in records):
            fc2, proj = _per_block(records, spec, ".mlp.fc2"), _per_block(records, spec, ".attn.proj")
            rows.append((spec, init, len(fc2), sci(fc2[0]), sci(fc2[len(fc2) // 2 - 1]), sci(fc2[-1]),
                         f"{fc2[-1] / fc2[0]:.2f}", sci(proj[0]), sci(proj[-1]), f"{proj[-1] / proj[0]:.2f}"))
    return md_table(["spec", "init", "blocks", "fc2, block 1", "fc2, middle block", "fc2, last block",
                     "fc2 last / first", "attn proj, block 1", "attn proj, last block", "proj last / first"], rows)


def _gain(x: float) -> str:
    return sci(x) if x < 0.01 else f"{x:.3g}"


def jacobian_table(records: list[dict[str, Any]]) -> str:
    stds = list(dict.fromkeys(r["kernel_std"] for r in records))
    rows = []
    for std in stds:
        by_net = {r["net"]: r for r in records if r["kernel_std"] == std}
        plain, res = by_net.get("plain"), by_net.get("residual")
        blocks = (plain or res)["blocks"]
        ref = DASH
        if plain and res and plain.get("seed_gain") is not None and res.get("seed_gain") is not None:
            ref = f"{_gain(plain['seed_gain'])} / {_gain(res['seed_gain'])}"
        rows.append((f"{std:g}", blocks, _gain(plain["gain"]) if plain else DASH, _gain(res["gain"]) if res else DASH,
                     ref))
    return md_table(["kernel std", "blocks", "plain gain", "residual gain", "article: plain / residual (its own draws)"],
                    rows)


def jacobian_seeds_table(records: list[dict[str, Any]]) -> str:
    keys = list(dict.fromkeys((r["net"], r["kernel_std"], r["blocks"]) for r in records))
    rows = []
    for net, std, blocks in keys:
        gains = [r["gain"] for r in records if (r["net"], r["kernel_std"], r["blocks"]) == (net, std, blocks)]
        seeds = sorted({r["seed"] for r in records if (r["net"], r["kernel_std"]) == (net, std)})
        rows.append((net, f"{std:g}", blocks, len(seeds), _gain(min(gains)), _gain(max(gains))))
    return md_table(["net", "kernel std", "blocks", "seeds", "min gain", "max gain"], rows)


def responses_table(records: list[dict[str, Any]]) -> str:
    records = _measured(records)
    runs = list(dict.fromkeys((r["spec"], r["run"]) for r in records))
    rows = []
    for spec, run in runs:
        stds = [r["std"] for r in records if (r["spec"], r["run"]) == (spec, run)]
        rows.append((spec, len(stds), fixed(statistics.fmean(stds), 3), fixed(statistics.median(stds), 3),
                     fixed(min(stds), 3), fixed(max(stds), 3)))
    return md_table(["run", "layers", "mean std", "median", "min", "max"], rows)


# --- resnet plot / lesion / landscape ----------------------------------------------------------

def plot_table(records: list[dict[str, Any]]) -> str:
    return md_table(["net", "dataset", "seed", "status", "epochs", "iterations", "train error %", "test error %"],
                    [(r["label"], r["dataset"], r["seed"], r["status"], r["epochs"], r["iterations"],
                      fixed(r["train_error"]), fixed(r["test_error"])) for r in records if r.get("event") == "run"])


def _by_run(records: list[dict[str, Any]], event: str) -> dict[str, list[dict[str, Any]]]:
    out: dict[str, list[dict[str, Any]]] = {}
    for r in records:
        if r.get("event") == event:
            out.setdefault(r["label"], []).append(r)
    return out


def lesion_units_table(records: list[dict[str, Any]]) -> str:
    """One row per unit, one column per net: test error with that unit deleted (change from none)."""
    base = {r["label"]: r for r in records if r.get("event") == "lesion_baseline"}
    units = _by_run(records, "lesion_unit")
    labels = list(base)
    n = max(len(u) for u in units.values())
    rows = [["none", *(fixed(base[lab]["test_error"]) for lab in labels)]]
    for i in range(n):
        row = []
        for lab in labels:
            u = units[lab][i] if i < len(units[lab]) else None
            if u is None:
                row.append(DASH)
            elif not u["deletable"]:
                row.append("cannot (shape changes)")
            else:
                row.append(f"{fixed(u['test_error'])} ({u['delta']:+.2f})")
        mark = " (downsampling)" if any(units[lab][i]["downsampling"] for lab in labels if i < len(units[lab])) else ""
        rows.append([f"{i + 1}{mark}", *row])
    return md_table(["unit deleted", *(f"{lab} test error % (change)" for lab in labels)], rows)


def lesion_k_table(records: list[dict[str, Any]]) -> str:
    ks = _by_run(records, "lesion_k")
    labels = list(ks)
    first = ks[labels[0]]
    rows = []
    for i, row in enumerate(first):
        cells = []
        for lab in labels:
            k = ks[lab][i]
            cells.append(fixed(k["median"]) if k["draws"] == 1 else
                         f"{fixed(k['median'])} [{fixed(k['min'])}, {fixed(k['max'])}]")
        rows.append([row["k"], row["draws"], *cells])
    return md_table(["k units deleted at random", "draws", *(f"{lab} median [min, max]" for lab in labels)], rows)


def lesion_summary_table(per_seed: list[tuple[int, list[dict[str, Any]]]], early: int = 3) -> str:
    """Per seed and net: nothing deleted; the median over single deletions of the first `early`
    units and of the rest; the medians at k = 2 and 4 (where they were drawn)."""
    rows = []
    header = ["seed", "net", "units", "nothing deleted", f"one of units 1-{early} (median)",
              "one of the later units (median)", "largest change, later units", "k = 2 (median)", "k = 4 (median)"]
    for seed, records in per_seed:
        base = {r["label"]: r["test_error"] for r in records if r.get("event") == "lesion_baseline"}
        units, ks = _by_run(records, "lesion_unit"), _by_run(records, "lesion_k")
        for lab in base:
            done = [u for u in units.get(lab, []) if u["deletable"]]
            head = [u["test_error"] for u in done if u["unit"] <= early]
            tail = [u for u in done if u["unit"] > early]
            kmed = {k["k"]: k["median"] for k in ks.get(lab, [])}
            rows.append((seed, lab, len(units.get(lab, [])), fixed(base[lab]),
                         fixed(statistics.median(head)) if head else DASH,
                         fixed(statistics.median([u["test_error"] for u in tail])) if tail else DASH,
                         f"{max((u['delta'] for u in tail), key=abs):+.2f}" if tail else DASH,
                         fixed(kmed.get(2)), fixed(kmed.get(4))))
    return md_table(header, rows)


def landscape_table(records: list[dict[str, Any]]) -> str:
    rows = []
    for r in records:
        if r.get("event") != "landscape_summary":
            continue
        side = round(math.sqrt(r["points"])) if r["dims"] == 2 else r["points"]
        grid = f"1-D, {side}" if r["dims"] == 1 else f"2-D, {side}x{side}"
        rows.append((r["label"], grid, short(r["loss_center"]), fixed(r["accuracy_center"], 1), short(r["loss_max"]),
                     r["local_minima"], fixed(r["tv_ratio"]), f"{100 * r['nonconvex_fraction']:.0f}"))
    return md_table(["net", "grid", "loss at theta*", "train acc % at theta*", "max loss on grid", "minima", "TV/range",
                     "nonconvex %"], rows)


def format_blocks(outputs: list[tuple[str, str]], lines: int = 6) -> str:
    """Each command's output as a code block, its first `lines` lines (a long one says how many more;
    a LaTeX table is shown whole)."""
    out = []
    for command, text in outputs:
        kept = text.rstrip("\n").splitlines()
        more = 0 if "latex" in command else len(kept) - lines
        body = "\n".join(kept[:len(kept) - max(more, 0)]) + (
            f"\n... ({more} more line{'s' if more != 1 else ''})" if more > 0 else "")
        out.append(f"`{command}`:\n\n```text\n{body}\n```\n")
    return "\n".join(out)


def usage_block(text: str) -> str:
    """`resnet CMD --help` as a code block; run as `python -m resnet_cli`, Click names it so."""
    return "```text\n" + text.replace("python -m resnet_cli", "resnet").rstrip() + "\n```\n"


def export_table(records: list[dict[str, Any]], sizes: dict[str, int]) -> str:
    """One row per exported file: the read-back check against the live net's logits (each batch
    it was run at) and the file's size in kB (`sizes`: file name -> bytes)."""
    rows = []
    for r in records:
        if r.get("event") != "export":
            continue
        batches = ", ".join(f"{c['max_abs_diff']:.3g} at batch {c['batch']}" for c in r["check"]["against"])
        rows.append((f"`{r['format']}`", f"{r['check']['max_abs_diff']:.3g}", batches,
                     f"{r['check']['tolerance']:.3g}", f"{sizes[r['file']] / 1000:.0f} kB"))
    return md_table(["format", "max \\|logit difference\\|", "per batch", "allowed", "file size"], rows)


def _span(window: dict[str, Any]) -> str:
    """A window of path lengths as "5-17", or "5" when it holds one length."""
    first, last = window["first"], window["last"]
    return str(first) if first == last else f"{first}-{last}"


def paths_table(records: list[dict[str, Any]]) -> str:
    """Veit et al. 2016 sec. 5 per net: the shortest window of path lengths carrying the share of
    the input gradient asked for, what it carries, its share of all paths, the peak and the
    gradient-weighted mean length, n/2 (the binomial's mean), the window at the first unit, and the
    full gradient's norm; then Veit et al.'s own ResNet-110 row."""
    rows = []
    for r in records:
        if r.get("event") != "paths_summary":
            continue
        w, uw, n = r["window"], r["unit_window"], r["routable"]
        rows.append((r["label"], r["state"], f"{r['units']}" if n else f"{r['units']} (no shortcut)", _span(w),
                     f"{100 * w['carried']:.0f}%", f"{100 * w['paths_fraction']:.3g}%" if n else "100% (one path)",
                     w["peak"], f"{w['mean_length']:.3g}", f"{n / 2:g}" if n else DASH, _span(uw), short(r["full_grad"])))
    rows.append(("Veit et al. 2016, ResNet-110, CIFAR-10", "trained", 54, "5-17", '"almost all"', "0.45%", "", "",
                 27, "", ""))
    mass = next((r["mass"] for r in records if r.get("event") == "paths_summary"), 0.9)
    return md_table(["net", "weights", "units n", f"{100 * mass:.0f}% window (lengths)", "carried",
                     "share of all paths", "peak", "mean length", "n/2", "window at 1st unit", "full gradient"], rows)
