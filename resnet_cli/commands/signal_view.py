"""`resnet gradnorm --signal`: signal-propagation plots at initialisation (Brock, De and Smith 2021),
for the nets given as SPECs or, by default, for the five nets of experiments/gradnorm/signal.py."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from .. import output


def signal(fmt: output.Format, specs: list[str], overrides: list[tuple[str, Any]], sets: list[str],
           out: str | None) -> None:
    from .. import data as data_mod
    from .. import figures
    from .. import spec as spec_mod
    from ..experiments.gradnorm import signal as sig

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
    records = sig.rows(results)
    if fmt is output.Format.JSON:
        for row in records:
            output.emit(row)
    else:
        last = {r.name: r.units[-1] for r in results}
        output.stdout().print(output.table(
            "signal propagation at initialisation, at the last residual unit",
            ["spec", "units", "sq. mean", "variance", "branch var."],
            [(n, str(u["unit"]), f"{u['sq_mean']:.3g}", f"{u['var']:.3g}", f"{u['branch_var']:.3g}")
             for n, u in last.items()],
            caption="per unit, over one batch: the average channel squared mean and variance of the unit's output "
                    "and the variance of what its branch adds (--json: every unit)"))
    output.stderr().print(f"figure: {fig_path}")
