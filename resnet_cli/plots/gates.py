"""`resnet report DIR --gates FILE.png`: the mean gate g = sigmoid(W_g x + b_g) per unit over the
epochs of every gated run below DIR (He 2016b Table 1's exclusive and shortcut-only gating), one
panel per run, one line per unit coloured by depth. Read only from the runs' metrics.jsonl
(`gate_mean` in the epoch records, resnet_cli/training/gates.py) and study.json; nothing is recomputed."""

from __future__ import annotations

from pathlib import Path

from ..errors import UserError
from ..runs.reader import RunRecord, find


def gated_runs(root: str | Path) -> list[dict]:
    """Per run directory with gate records: its label, and (epoch, [mean gate per unit]) rows."""
    runs = []
    for path in find(root):
        run = RunRecord.read(path)
        rows = [(r["epoch"], r["gate_mean"]) for r in run.metrics()
                if r.get("event") == "epoch" and r.get("gate_mean")]
        if not rows:
            continue
        study = run.study or {}
        label = f"{study['row']}, seed {study.get('seed')}" if "row" in study else path.name
        runs.append({"run": str(path), "label": label, "index": study.get("index", 0), "epochs": rows})
    return sorted(runs, key=lambda r: (r["index"], r["label"]))


def figure(root: str | Path, path: str | Path) -> Path:
    from matplotlib.ticker import MaxNLocator

    from .. import figures

    runs = gated_runs(root)
    if not runs:
        raise UserError(f"{root}: no run below it logged gate means (only gated shortcuts do: "
                        "exclusive_gate, shortcut_gate, highway)")
    plt = figures.pyplot()
    cols = min(3, len(runs))
    rows = -(-len(runs) // cols)
    fig, axes = plt.subplots(rows, cols, figsize=(4.2 * cols, 3.2 * rows), squeeze=False, sharey=True)
    cmap = plt.get_cmap("viridis")
    for ax, run in zip(axes.flat, runs):
        epochs = [e for e, _ in run["epochs"]]
        units = len(run["epochs"][0][1])
        for u in range(units):
            ax.plot(epochs, [g[u] for _, g in run["epochs"]], color=cmap(u / max(units - 1, 1)), lw=0.8,
                    marker="o" if len(epochs) == 1 else None, ms=3)
        ax.set_yscale("log")  # sigmoid(-6) = 0.0025 and sigmoid(0) = 0.5 on one axis
        ax.set(title=run["label"], xlabel="epoch", ylabel="mean gate g")
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    for ax in list(axes.flat)[len(runs):]:
        ax.set_visible(False)
    sm = plt.cm.ScalarMappable(cmap=cmap, norm=plt.Normalize(1, max(units, 2)))
    bar = fig.colorbar(sm, ax=axes.ravel().tolist(), fraction=0.03, label="unit (input side = 1)")
    bar.locator = MaxNLocator(integer=True)
    bar.update_ticks()
    return figures.save(fig, path)
