"""Training curves from run directories: error against iterations, training error thin and test
error bold, as He 2016a draws them (Fig. 1, 4, 6). Reads only spec.yaml, metrics.jsonl and
summary.json: a run still training, or one whose checkpoint was lost, can still be plotted.
"""

from __future__ import annotations

from pathlib import Path

from ..errors import UserError
from ..spec import is_plain
from ..runs.files import METRICS
from ..runs.reader import RunRecord
from ..analysis.trained import check_dir, load_spec, run_label


def read_run(path: str | Path) -> dict:
    p = check_dir(path)
    spec = load_spec(p)
    rd = RunRecord.read(p)
    epochs = [r for r in rd.metrics() if r.get("event", "epoch") == "epoch" and "iter" in r]
    if not epochs:
        raise UserError(f"{p}: no epoch records in {METRICS} yet (nothing to plot until the first epoch ends)")
    summary = rd.summary
    tested = [r for r in epochs if r.get("test_error") is not None]
    last = epochs[-1]
    return {
        "run": str(p), "label": run_label(spec), "residual": not is_plain(spec.model.shortcut.kind),
        "dataset": spec.data.dataset, "seed": spec.run.seed,
        # no summary.json: still training, or killed before it could write one
        "status": summary.get("status", "unknown") if summary else "unfinished",
        "epochs": last.get("epoch"), "iterations": last["iter"],
        "train_error": last.get("train_error"),
        # the last epoch's test error (never the best one: that would select on the test set)
        "test_error": tested[-1]["test_error"] if tested else None,
        "test_error_epoch": tested[-1].get("epoch") if tested else None,
        "curve": [{k: r.get(k) for k in ("epoch", "iter", "train_error", "test_error")} for r in epochs],
    }


def labels(runs: list[dict]) -> list[str]:
    """Run labels, made unique with the directory name where two runs share a net."""
    names = [r["label"] for r in runs]
    return [f"{n} ({Path(r['run']).name})" if names.count(n) > 1 else n for n, r in zip(names, runs)]


def figure(runs: list[dict], path: str | Path) -> Path:
    from .. import figures

    plt = figures.pyplot()
    fig, ax = plt.subplots(figsize=(6.5, 4.2))
    for i, (r, name) in enumerate(zip(runs, labels(runs))):
        style = figures.STYLE["residual" if r["residual"] else "plain"]
        pts = r["curve"]
        ax.plot([p["iter"] for p in pts], [p["train_error"] for p in pts], color=f"C{i}", lw=0.8, alpha=0.8,
                **style, label=f"{name} train")
        tested = [p for p in pts if p["test_error"] is not None]
        ax.plot([p["iter"] for p in tested], [p["test_error"] for p in tested], color=f"C{i}", lw=2.2, **style,
                label=f"{name} test")
    ax.set(xlabel="iterations", ylabel="error (%)",
           title="training error (thin) and test error (bold); plain dashed, residual solid")
    ax.set_ylim(bottom=0)
    ax.legend(fontsize=7)
    return figures.save(fig, path)
