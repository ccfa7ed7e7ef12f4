"""`resnet report`: rebuild study tables from run directories gathered from anywhere."""

from __future__ import annotations

from typing import Annotated, Optional

import typer

from ..cli import command
from . import common


@command()
def report(
    directory: Annotated[str, typer.Argument(help="A directory holding run directories (searched recursively).")],
    figure: Annotated[Optional[str], typer.Option("--figure", help="Also draw the bar chart here (PNG); with several "
                                                                   "studies, one file each: NAME-STUDY.png.")] = None,
    json_: common.Json = False,
) -> None:
    """One table per study (row, test error median and mean ± std over seeds, n, training loss,
    status, the paper's figure), read only from study.json, spec.yaml, summary.json, metrics.jsonl."""
    from pathlib import Path

    from .. import figures, output
    from ..errors import UserError
    from ..experiments import report as report_mod

    root = Path(directory)
    if not root.is_dir():
        raise UserError(f"{directory}: no such directory")
    target = figures.target(figure, Path("report.png"), "--figure") if figure else None
    tables = report_mod.aggregate(report_mod.collect(root))
    if not tables:
        raise UserError(f"{directory}: no run directories (spec.yaml or study.json) below it")
    fmt = output.choose(json_)
    for table in tables:
        if fmt is output.Format.JSON:
            for row in table.rows:
                output.emit(report_mod.row_json(table, row))
        else:
            output.stdout().print(report_mod.render(table))
    if target is not None:
        for table in tables:
            suffix = target.suffix or ".png"
            path = target if len(tables) == 1 else target.with_name(f"{target.stem}-{table.study}{suffix}")
            output.info(f"figure: {report_mod.figure(table, path)}")
