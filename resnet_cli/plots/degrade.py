"""A degrade grid as He 2016a Fig. 6 draws it: training error against iteration per net and depth,
and the final accuracies against depth. Drawn from the grid's summaries and curve bands
(results/degrade.py); nothing is computed here."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ..results.degrade import NETS


def figure(summaries: list[dict[str, Any]], bands: dict[tuple[str, int], dict[str, Any]], path: Path) -> Path:
    """Left: training error (%) against iteration, median over seeds, one colour per depth, plain
    dashed and residual solid (He 2016a Fig. 6). Right: final training and test accuracy against
    depth, median with min-max bars."""
    from .. import figures

    plt = figures.pyplot()
    fig, (ax_c, ax_d) = plt.subplots(1, 2, figsize=(11, 4.2), gridspec_kw={"width_ratios": [1.6, 1]})
    depths = sorted({s["depth"] for s in summaries})
    by = {(s["net"], s["depth"]): s for s in summaries}
    for net in NETS:
        for j, depth in enumerate(depths):
            band = bands.get((net, depth))
            if band is None:
                continue
            colour = f"C{j % 10}"
            ax_c.plot(band["iters"], band["median"], color=colour, label=f"{net}-{depth}", lw=1.4, **figures.STYLE[net])
            if band["runs"] > 1:
                ax_c.fill_between(band["iters"], band["lo"], band["hi"], color=colour, alpha=0.08, lw=0)
    ax_c.set(xlabel="iteration", ylabel="training error (%)", ylim=(0, None),
             title="training error (median over seeds; band: min-max)")
    ax_c.legend(fontsize=7, ncol=2)
    for net in NETS:
        for metric, marker in (("train_acc", "o"), ("test_acc", "s")):
            xs, med, err_lo, err_hi = [], [], [], []
            for depth in depths:
                s = by.get((net, depth))
                if s is not None and (m := s[f"{metric}_median"]) is not None:
                    xs.append(depth), med.append(m)
                    err_lo.append(m - s[f"{metric}_min"]), err_hi.append(s[f"{metric}_max"] - m)
            if xs:
                ax_d.errorbar(xs, med, yerr=[err_lo, err_hi], marker=marker, capsize=3, lw=1.2,
                              color="C3" if net == "plain" else "C0", label=f"{net} {metric.replace('_', ' ')}",
                              **figures.STYLE[net])
    ax_d.set(xlabel="depth (weight layers)", ylabel="accuracy", xticks=depths,
             title="final accuracy (median, min-max)")
    ax_d.legend(fontsize=7)
    return figures.save(fig, path)
