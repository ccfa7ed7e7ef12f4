"""`resnet gradnorm --signal`: signal-propagation plots at initialisation (Brock, De and Smith 2021),
for the nets given as SPECs or, by default, for the five nets of experiments/gradnorm/signal.py."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from .. import data as data_mod
from .. import figures, output
from .. import spec as spec_mod
from ..experiments.gradnorm import signal as sig


def signal(fmt: output.Format, specs: list[str], overrides: list[tuple[str, Any]], sets: list[str],
           out: str | None) -> None:
    fig_path = figures.target(out, Path("signal.png"))
    if specs:
        named = [(Path(p).stem if Path(p).suffix else p, spec_mod.load(p, overrides, sets)) for p in specs]
    else:
        base = spec_mod.merge(sig.BASE, {"optim": {"batch_size": sig.BATCH}})
        named = [(name, spec_mod.load(base, [*net.items(), *overrides], sets, name=f"--signal {name}"))
                 for name, net in sig.NETS.items()]
    cache: dict[str, Any] = {}
    results = []
    for name, s in named:
        key = repr(s.data)
        if key not in cache:
            cache[key] = data_mod.load(s.data)
        results.append(sig.measure_spec(name, s, cache[key]))
    sig.figure(results, fig_path)
    last = {(r.name, len(r.units)) for r in results}
    output.render(sig.rows(results), fmt, output.View(
        "signal propagation at initialisation, at the last residual unit",
        ["spec", "units", "sq. mean", "variance", "branch var."],
        row=lambda r: (r["spec"], str(r["unit"]), f"{r['sq_mean']:.3g}", f"{r['var']:.3g}", f"{r['branch_var']:.3g}"),
        keep=lambda r: (r["spec"], r["unit"]) in last,
        caption="per unit, over one batch: the average channel squared mean and variance of the unit's output "
                "and the variance of what its branch adds (--json: every unit)",
        log=[f"figure: {fig_path}"]))
