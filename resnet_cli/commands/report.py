"""`resnet report`: rebuild study tables from run directories gathered from anywhere."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from .. import figures, output
from ..cli import command
from ..errors import UserError
from ..sweep import budgets
from ..results import report as report_mod
from ..plots import gates as gates_plot, study_bars
from ..results import budget_claims, degrade_grid, degrade_view, formats, study, table as study_table
from ..runs.files import SPEC, STUDY
from . import common


@command()
def report(
    directory: Annotated[str, typer.Argument(help="A directory holding run directories (searched recursively).")],
    figure: Annotated[Optional[str], typer.Option("--figure", help="Also draw the bar chart here (PNG); with several "
                                                                   "studies, one file each: NAME-STUDY.png.")] = None,
    threshold: Annotated[Optional[float], typer.Option(
        "--threshold", help="For runs of `resnet ablate --budgets`: the test error % a row must reach "
                            "(default: the study's fail_above).")] = None,
    gates: Annotated[Optional[str], typer.Option("--gates", help="Also plot the mean gate per unit over epochs of "
                                                                 "the gated runs here (PNG).")] = None,
    json_: common.Json = False,
    format_: common.StudyFormat = None,
    pairs: common.Pairs = False,
    output_file: common.OutputFile = None,
    runs: Annotated[bool, typer.Option("--runs", help="One line per run directory instead of per study row: study, "
                                                      "row, seed, status, errors, length, wall time, where and with "
                                                      "what it ran (with --format csv: pandas.read_csv reads it "
                                                      "as is).")] = False,
    all_seeds: Annotated[bool, typer.Option("--all-seeds", help="Decide the claims at every seed found, not only "
                                                                "at the seeds recorded with them in claims.json "
                                                                "(seeds added later are otherwise left out of "
                                                                "the claims).")] = False,
) -> None:
    """One table per study (row, test error median with its interval and coverage, mean ± std over
    seeds, n, training loss, status, the paper's figure; Kendall's tau against the paper's order),
    read only from study.json, spec.yaml, summary.json, metrics.jsonl. The same spec and seed found
    twice counts once."""
    fmt = output.choose(json_, format_)
    common.text_options(fmt, pairs, output_file)
    if runs and fmt in (output.Format.LATEX, output.Format.MARKDOWN):
        raise UserError(f"--runs lists run directories as table, json or csv, not {fmt.value}")
    root = Path(directory)
    if not root.is_dir():
        raise UserError(f"{directory}: no such directory")
    target = figures.target(figure, Path("report.png"), "--figure") if figure else None
    gates_target = figures.target(gates, Path("gates.png"), "--gates") if gates else None
    duplicates: list[Path] = []
    found = report_mod.collect(root, duplicates)
    for why in report_mod.damaged(root):  # such a run reads as unfinished: say which file and why
        output.info(f"counted as unfinished: {why}")
    pending = report_mod.missing(found)  # a study's rows and seeds not run yet (or not gathered here)
    if pending:
        shown = "not listed: --runs lists run directories" if runs else "shown as pending"
        output.info(f"{len(pending)} run(s) asked for have no run directory below {directory} yet: {shown}")
    if runs:
        return _runs(found, fmt, directory, output_file)
    grid = degrade_grid.from_directory(root)
    if grid is not None:  # `resnet degrade`'s output directory: degrade's own metrics and claims
        return degrade_view.render(grid, fmt, output.stderr(), summary="row", pairs=pairs, save=output_file)
    tables = report_mod.aggregate(found + pending)
    if duplicates:  # the same spec and seed found again: one seed, not two
        shown = ", ".join(str(p) for p in duplicates[:3]) + (", ..." if len(duplicates) > 3 else "")
        output.info(f"{len(duplicates)} duplicate run(s) ignored (same spec and seed as another): {shown}")
    if not tables:
        raise UserError(f"{directory}: no run directories ({SPEC} or {STUDY}) below it")
    if any(t.budget != 1 for t in tables):  # runs of `resnet ablate --budgets`: one table over the budgets
        if fmt is output.Format.LATEX:
            raise UserError("runs of `resnet ablate --budgets` print as table, json, csv or markdown, not latex")
        for btable in budgets.build(tables, threshold):
            group = [t for t in tables if (t.study, t.preset) == (btable.study, btable.preset)]
            plain = next((t for t in group if t.budget == 1), group[0])
            family = report_mod.family_of(plain, root)
            budget_claims.show(btable, group, family if family is not None and family.declared else None, fmt,
                               output_file)
        return
    recipes = []
    for table in tables:
        table.family = report_mod.family_of(table, root, all_seeds=all_seeds)
        if table.family is not None and table.family.note:
            output.info(f"{table.study} (preset {table.preset}): {table.family.note}")
        recipes.append(report_mod.recipe_words(found, table.study, table.preset) if table.study != "runs" else "")
        if recipes[-1]:  # the recipe actually run, where it is not the preset as shipped
            output.info(f"{table.study} (preset {table.preset}): run with {recipes[-1]}")
    results = [study.compute(table) for table in tables]  # every statistic once; the views compute nothing
    if fmt in output.TEXT_FORMATS:
        output.write(formats.studies_text([study_table.records(r, exact=True) for r in results], fmt.value, pairs,
                                          recipe=recipes), output_file)
    else:
        for result in results:
            output.render(study_table.records(result), fmt,
                          output.View(draw=lambda width, r=result: study_table.render_all(r, width=width)))
    if target is not None:
        for table in results:
            suffix = target.suffix or ".png"
            path = target if len(tables) == 1 else target.with_name(f"{target.stem}-{table.study}{suffix}")
            output.info(f"figure: {study_bars.figure(table, path)}")
    if gates_target is not None:
        output.info(f"gates: {gates_plot.figure(root, gates_target)}")


def _runs(found, fmt, directory: str, save: str | None = None) -> None:
    """`--runs`: one record per run directory (results/report.py run_rows)."""
    rows = report_mod.run_rows(found)
    if not rows:
        raise UserError(f"{directory}: no run directories below it")
    if fmt is output.Format.CSV:  # one type per column: a study without groups is group `all`, as the row csv
        output.write(formats.write_csv(formats.RUN_COLUMNS, [{**r, "group": r["group"] or formats.UNGROUPED}
                                                             for r in rows]), save)
        return
    shown = ("study", "row", "seed", "status", "test_error", "train_loss", "epochs", "wall_s", "run_dir")
    output.render(rows, fmt, output.View(title=f"runs below {directory}", columns=shown,
                                         row=lambda r: [output.fmt(r[c]) if isinstance(r[c], float) else
                                                        ("-" if r[c] is None else r[c]) for c in shown]))

