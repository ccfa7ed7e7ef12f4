"""A study's results where researchers put them: CSV for pandas or R, LaTeX for a paper (Markdown:
markdown.py). Each renders the JSON records a study prints (table.records: its rows, then the study
object), so every format says what the table and `--json` say and computes nothing.

- CSV, one line per row of the study table: stable snake_case columns (ROW_COLUMNS), numbers
  unrounded, empty where there is none. `--pairs`: one line per comparison instead (PAIR_COLUMNS):
  the declared claims, then the exploratory pairs.
- LaTeX: a booktabs table (\\toprule, \\midrule, \\bottomrule, no vertical rules), the median with
  its interval and coverage beside the paper's figure, and a caption naming the study, the preset,
  n and the test; a row marked \\dag\\ is the worse side of a declared claim resolved in the paper's
  order, and the caption lists those claims.
- One row per run (`resnet report --runs`): RUN_COLUMNS, from the run directories alone.
"""

from __future__ import annotations

import csv
import io
import re
from collections.abc import Iterable, Sequence
from typing import Any

from .evidence import coverage_label

ROW_COLUMNS = ("study", "preset", "index", "row", "group", "n", "runs", "diverged", "median", "interval_lo",
               "interval_hi", "coverage", "mean", "std", "train_loss", "status", "fail", "fail_above", "paper",
               "paper_metric", "dataset")
PAIR_COLUMNS = ("study", "preset", "kind", "better", "worse", "metric", "group", "n", "difference", "difference_lo",
                "difference_hi", "coverage", "mean", "p", "p_exact", "p_holm", "verdict", "source", "hypothesis")
RUN_COLUMNS = ("study", "preset", "row", "group", "seed", "status", "test_error", "counted_error", "train_loss", "train_error",
               "epochs", "iterations", "wall_s", "params", "device", "threads", "torch", "git_commit", "run_dir")


def _cell(value: Any) -> Any:
    """Empty where there is none; booleans as true/false (pandas reads them as bool); numbers as repr."""
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    return value


def write_csv(columns: Sequence[str], rows: Iterable[dict[str, Any]]) -> str:
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(columns)
    for row in rows:
        writer.writerow([_cell(row.get(c)) for c in columns])
    return out.getvalue()


def _rows(records: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    return [r for r in records if r.get("event") == "row"]


def _study(records: Sequence[dict[str, Any]]) -> dict[str, Any]:
    return next((r for r in records if r.get("event") == "study"), {})


def row_csv(records: Sequence[dict[str, Any]]) -> str:
    """One line per row of the study table (ROW_COLUMNS)."""
    def flat(r: dict[str, Any]) -> dict[str, Any]:
        lo, hi = r["interval"] if r.get("interval") else (None, None)
        return {**r, "interval_lo": lo, "interval_hi": hi}
    return write_csv(ROW_COLUMNS, (flat(r) for r in _rows(records)))


def pairs_of(records: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """The study's comparisons as flat records: the claims (kind `claim`), then the exploratory pairs."""
    study = _study(records)
    out = []
    for kind, pairs in (("claim", study.get("claims") or []), ("exploratory", study.get("exploratory") or [])):
        for p in pairs:
            lo, hi = p["interval"] if p.get("interval") else (None, None)
            out.append({"study": study.get("study"), "preset": study.get("preset"), "kind": kind, **p,
                        "difference": p.get("shift"), "difference_lo": lo, "difference_hi": hi})
    return out


# -- LaTeX ---------------------------------------------------------------------------------------

_SPECIAL = {"\\": r"\textbackslash{}", "&": r"\&", "%": r"\%", "$": r"\$", "#": r"\#", "_": r"\_",
            "{": r"\{", "}": r"\}", "~": r"\textasciitilde{}", "^": r"\textasciicircum{}"}


def latex_escape(text: str) -> str:
    """A label as LaTeX text: the paper's b_g as math ($b_g$), every other special character escaped."""
    parts = re.split(r"\bb_g\b", str(text))
    escaped = ["".join(_SPECIAL.get(ch, ch) for ch in part) for part in parts]
    return "$b_g$".join(escaped)


def _num(x: float | None, digits: int = 2) -> str:
    return "--" if x is None else f"{x:.{digits}f}"


def _coverage(c: float | None) -> str:
    return latex_escape(coverage_label(c))


def study_latex(records: Sequence[dict[str, Any]]) -> str:
    """A booktabs table of the study (see the module's note)."""
    rows, study = _rows(records), _study(records)
    claims = study.get("claims") or []
    family = study.get("family") or {}
    kept = [c for c in claims if c.get("verdict") == "in order"]
    marked = {c["worse"] for c in kept}
    ns = sorted({r["n"] for r in rows if r.get("n")})
    n_text = "no finished seed" if not ns else (f"n = {ns[0]}" if len(ns) == 1 else f"n = {ns[0]}--{ns[-1]}")
    first = rows[0] if rows else {}
    # records without a study object (rows alone) are named by their first row
    name, preset = study.get("study", first.get("study", "")), study.get("preset", first.get("preset", ""))
    lines = [r"\begin{table}[t]", r"\centering", r"\begin{tabular}{lrlr}", r"\toprule",
             r"Row & Ours: median (\%) & Interval (coverage) & Paper \\", r"\midrule"]
    for r in rows:
        label = latex_escape(r["row"]) + (r"$^{\dag}$" if r["row"] in marked else "")
        interval = (f"[{_num(r['interval'][0])}, {_num(r['interval'][1])}] {_coverage(r['coverage'])}"
                    if r.get("interval") else "--")
        fail = r" (fail)" if r.get("fail") else ""
        paper = r["paper"] if isinstance(r.get("paper"), str) else _num(r.get("paper"))
        lines.append(f"{label} & {_num(r.get('median'))}{fail} & {interval} & {latex_escape(paper)} \\\\")
    lines += [r"\bottomrule", r"\end{tabular}"]
    what = ("the declared claims" if family.get("declared") else "every pair of rows with a paper figure")
    caption = (f"{latex_escape(name)} (preset {latex_escape(preset)}, {n_text} seeds a row): our "
               f"{latex_escape(first.get('dataset') or '')} test error, the median over seeds at the last epoch "
               "with the order-statistic interval of the median at the coverage it has, beside the paper's figure "
               f"({latex_escape(first.get('paper_metric') or '')}). Rows are compared by the exact sign-flip test "
               f"of the differences paired by seed, with Holm's adjustment over {what} "
               f"({family.get('size', len(claims))}).")
    if kept:
        caption += (r" $^{\dag}$: the worse row of a claim resolved in the paper's order (Holm-adjusted "
                    r"$p \le 0.05$): " + "; ".join(f"{latex_escape(c['better'])} $<$ {latex_escape(c['worse'])}"
                                                   for c in kept) + ".")
    else:
        caption += " No claim is resolved in the paper's order at this n."
    label = re.sub(r"[^A-Za-z0-9]+", "-", f"{name or 'study'}-{preset}").strip("-")
    lines += [rf"\caption{{{caption}}}", rf"\label{{tab:{label}}}", r"\end{table}"]
    return "\n".join(lines) + "\n"


def studies_text(studies: Sequence[Sequence[dict[str, Any]]], fmt: str, pairs: bool = False) -> str:
    """Several studies' records in one document: csv (one header; the `study` column tells them
    apart), markdown (each study's block) or latex (each study's table)."""
    from . import markdown

    if fmt == "csv":
        if pairs:
            return write_csv(PAIR_COLUMNS, [p for records in studies for p in pairs_of(records)])
        return row_csv([r for records in studies for r in records])
    if fmt == "markdown":
        return "\n".join(markdown.study(list(records)) for records in studies)
    if fmt == "latex":
        return "\n".join(study_latex(records) for records in studies)
    raise ValueError(fmt)

