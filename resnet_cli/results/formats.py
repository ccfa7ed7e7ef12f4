"""A study's results where researchers put them: CSV for pandas or R, LaTeX for a paper (Markdown:
markdown.py). Each renders the JSON records a study prints (table.records: its rows, then the study
object), so every format says what the table and `--json` say and computes nothing.

- CSV, one line per row of the study table: stable snake_case columns (ROW_COLUMNS), numbers
  unrounded, empty where there is none, one type per column so pandas reads each as one dtype:
  `paper` is the paper's number (empty where it has none), `paper_fail` says the paper's "fail";
  `fail` is always true or false; `metric` names the error the numbers are; `group` is `all` in a
  study without groups (so a groupby over study, group and row keeps every row). `--pairs`: one
  line per comparison instead (PAIR_COLUMNS): the declared claims, then the exploratory pairs.
- LaTeX: a booktabs table (\\toprule, \\midrule, \\bottomrule, no vertical rules), the median with
  its interval and coverage, n and the status per row beside the paper's figure, and a caption
  naming the study, the preset, n and the test (each only where there is one); a row marked \\dag\\ is the worse side of a declared claim resolved in the paper's
  order, and the caption lists those claims.
- One row per run (`resnet report --runs`): RUN_COLUMNS, from the run directories alone, with the
  row's `index` (the paper's order) and the same `group`.

A table of a study not every run of which has finished is never passed off as whole: the LaTeX and
Markdown documents say "partial: k of N runs finished" on their first line (and in the caption).
"""

from __future__ import annotations

import csv
import io
import re
from collections.abc import Iterable, Sequence
from typing import Any

from .evidence import coverage_label

ROW_COLUMNS = ("study", "preset", "index", "row", "group", "metric", "n", "runs", "diverged", "median",
               "interval_lo", "interval_hi", "coverage", "mean", "std", "train_loss", "status", "fail", "fail_above",
               "paper", "paper_fail", "paper_metric", "dataset")
PAIR_COLUMNS = ("study", "preset", "kind", "better", "worse", "metric", "group", "n", "difference", "difference_lo",
                "difference_hi", "coverage", "mean", "p", "p_exact", "p_holm", "verdict", "source", "hypothesis")
RUN_COLUMNS = ("study", "preset", "index", "row", "group", "seed", "status", "test_error", "counted_error", "train_loss", "train_error",
               "epochs", "iterations", "wall_s", "params", "device", "threads", "torch", "git_commit", "run_dir")


# A study without groups: its rows' `group` in csv (pandas' groupby drops rows whose key is empty).
UNGROUPED = "all"
PARTIAL = "partial:"  # how a document of an incomplete study begins (and how one is recognised)


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
        paper = r.get("paper")
        return {**r, "interval_lo": lo, "interval_hi": hi, "group": r.get("group") or UNGROUPED,
                "fail": bool(r.get("fail")), "paper": None if isinstance(paper, str) else paper,
                "paper_fail": paper == "fail"}
    return write_csv(ROW_COLUMNS, (flat(r) for r in _rows(records)))


def partial(records: Sequence[dict[str, Any]]) -> tuple[int, int] | None:
    """(runs finished, runs planned) of a study table some of whose runs have not finished; None
    when every planned run has (a diverged run has finished: it counts at chance error)."""
    rows = _rows(records)
    done, planned = sum(r.get("n") or 0 for r in rows), sum(r.get("runs") or 0 for r in rows)
    return (done, planned) if done < planned else None


def partial_line(counts: tuple[int, int]) -> str:
    return f"{PARTIAL} {counts[0]} of {counts[1]} runs finished"


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
    """A label as LaTeX text: the paper's b_g as math ($b_g$), a negative number's sign as a minus
    ($-$6, not the hyphen of "-6"), every other special character escaped."""
    parts = re.split(r"\bb_g\b", str(text))
    escaped = ["".join(_SPECIAL.get(ch, ch) for ch in part) for part in parts]
    # A hyphen that starts a number (after a space, a bracket or the start) is a minus sign; "ResNet-110"
    # and "1-6" keep theirs.
    return re.sub(r"(?<![\w.$])-(?=\d)", "$-$", "$b_g$".join(escaped))


def _num(x: float | None, digits: int = 2) -> str:
    return "--" if x is None else f"{x:.{digits}f}"


def _coverage(c: float | None) -> str:
    return latex_escape(coverage_label(c))


def _n_text(rows: Sequence[dict[str, Any]]) -> str:
    """n as the rows have it: one n where every row has the same, else per row (the table's n column)."""
    ns = [r.get("n") or 0 for r in rows]
    if not ns or not any(ns):
        return "no finished seed"
    if len(set(ns)) == 1:
        return f"n = {ns[0]} seed{'' if ns[0] == 1 else 's'} a row"
    empty = sum(1 for n in ns if not n)
    return "n per row as the table gives it" + (f"; {empty} of {len(ns)} rows have no finished seed" if empty else "")


def study_latex(records: Sequence[dict[str, Any]], recipe: str = "") -> str:
    """A booktabs table of the study (see the module's note). `recipe`: how the runs differ from the
    preset as shipped (`--set ...`), said in the caption."""
    rows, study = _rows(records), _study(records)
    claims = study.get("claims") or []
    family = study.get("family") or {}
    kept = [c for c in claims if c.get("verdict") == "in order"]
    marked = {c["worse"] for c in kept}
    first = rows[0] if rows else {}
    # records without a study object (rows alone) are named by their first row
    name, preset = study.get("study", first.get("study", "")), study.get("preset", first.get("preset", ""))
    has_paper = any(r.get("paper") is not None for r in rows)
    counts = partial(records)
    lines = [f"% {partial_line(counts)}"] if counts else []
    lines += [r"\begin{table}[t]", r"\centering", r"\begin{tabular}{lrlrl" + ("r" if has_paper else "") + "}",
              r"\toprule", r"Row & Ours: median (\%) & Interval (coverage) & $n$ & Status"
              + (r" & Paper \\" if has_paper else r" \\"), r"\midrule"]
    for r in rows:
        label = latex_escape(r["row"]) + (r"$^{\dag}$" if r["row"] in marked else "")
        interval = (f"[{_num(r['interval'][0])}, {_num(r['interval'][1])}] {_coverage(r['coverage'])}"
                    if r.get("interval") else "--")
        fail = r" (fail)" if r.get("fail") else ""
        paper = r["paper"] if isinstance(r.get("paper"), str) else _num(r.get("paper"))
        n = f"{r.get('n') or 0}" + (f"/{r['runs']}" if r.get("runs") and r["runs"] != r.get("n") else "")
        lines.append(f"{label} & {_num(r.get('median'))}{fail} & {interval} & {n} & {latex_escape(r.get('status') or '')}"
                     + (f" & {latex_escape(paper)}" if has_paper else "") + r" \\")
    lines += [r"\bottomrule", r"\end{tabular}"]
    what = ("the declared claims" if family.get("declared") else "every pair of rows with a paper figure")
    size = family.get("size", len(claims))
    metric = "validation error" if first.get("metric") == "val_error" else "test error"
    # plain `resnet train` runs have no preset ("-"): none is named
    about = [f"preset {latex_escape(preset)}"] if preset != "-" else []
    about += [f"run with {latex_escape(recipe)}"] if recipe else []
    caption = (f"{latex_escape(name)} ({', '.join([*about, _n_text(rows)])}): our "
               f"{latex_escape(first.get('dataset') or '')} {metric}, the median over seeds at the last epoch "
               "with the order-statistic interval of the median at the coverage it has")
    caption += (f", beside the paper's figure ({latex_escape(first.get('paper_metric') or '')})." if has_paper
                else ".")
    if counts:
        caption = f"Partial: {counts[0]} of {counts[1]} runs finished. " + caption
    if size:  # no comparison at all (plain train runs): no sentence about one
        caption += (" Rows are compared by the exact sign-flip test of the differences paired by seed, with "
                    f"Holm's adjustment over {what} ({size}).")
        if kept:
            caption += (r" $^{\dag}$: the worse row of a claim resolved in the paper's order (Holm-adjusted "
                        r"$p \le 0.05$): " + "; ".join(f"{latex_escape(c['better'])} $<$ {latex_escape(c['worse'])}"
                                                       for c in kept) + ".")
        else:
            caption += " No claim is resolved in the paper's order at this n."
    label = re.sub(r"[^A-Za-z0-9]+", "-", f"{name or 'study'}-{preset}").strip("-")
    lines += [rf"\caption{{{caption}}}", rf"\label{{tab:{label}}}", r"\end{table}"]
    return "\n".join(lines) + "\n"


def studies_text(studies: Sequence[Sequence[dict[str, Any]]], fmt: str, pairs: bool = False,
                 recipe: str | Sequence[str] = "") -> str:
    """Several studies' records in one document: csv (one header; the `study` column tells them
    apart), markdown (each study's block) or latex (each study's table). A document with a study
    not every run of which has finished begins with "partial: k of N runs finished" (csv: each
    row's `status` and `n` say it). `recipe`: per study (or one for all), how its runs differ from
    the preset as shipped."""
    from . import markdown

    recipes = [recipe] * len(studies) if isinstance(recipe, str) else list(recipe)
    if fmt == "csv":
        if pairs:
            return write_csv(PAIR_COLUMNS, [p for records in studies for p in pairs_of(records)])
        return row_csv([r for records in studies for r in records])
    if fmt == "markdown":
        counts = [c for records in studies if (c := partial(records))]
        head = (f"**{partial_line((sum(c[0] for c in counts), sum(c[1] for c in counts)))}**\n\n" if counts else "")
        return head + "\n".join(markdown.study(list(records)) + (f"\nRun with {r}.\n" if r else "")
                                 for records, r in zip(studies, recipes))
    if fmt == "latex":
        return "\n".join(study_latex(records, r) for records, r in zip(studies, recipes))
    raise ValueError(fmt)

