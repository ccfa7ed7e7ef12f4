"""`--format csv|markdown|latex` and `resnet report --runs` (results/formats.py, results/markdown.py):
each read back by an independent reader (Python's csv module, the docs' own generator, a LaTeX
compiler where one is installed) on a real tiny digits study."""

import csv
import io
import json
import shutil
import statistics
import subprocess
import sys

import pytest

from resnet_cli.results import formats

from test_ablate import BLOWUP, TINY
from invoking import invoke

sys.path.insert(0, str(__import__("pathlib").Path(__file__).resolve().parents[1] / "tools"))


STUDY = TINY.replace("seeds: [0, 1]", "seeds: [0, 1, 2]") + """claims:
  - {better: identity, worse: plain, source: "made up: identity below plain"}
"""


@pytest.fixture(scope="module")
def study_dir(tmp_path_factory):
    root = tmp_path_factory.mktemp("formats")
    (root / "s.yaml").write_text(STUDY)
    r = invoke("ablate", root / "s.yaml", "--out", root / "res", "--json")
    assert r.exit_code == 0, r.stderr
    return root


def _json(root):
    r = invoke("report", root / "res", "--json")
    assert r.exit_code == 0, r.stderr
    return [json.loads(line) for line in r.stdout.splitlines()]


def _same(text, value, rounded=False):
    """A csv cell against the JSON value it came from (`rounded`: the JSON's row numbers are rounded
    to 4 decimals, the csv's are not, as docs/report.md says)."""
    if value is None:
        return text == ""
    if isinstance(value, bool):
        return text == ("true" if value else "false")
    if isinstance(value, (int, float)):
        return float(text) == pytest.approx(value, rel=1e-12, abs=5.000001e-5 if rounded else 0)
    return text == str(value)


def test_the_csv_read_back_equals_the_json_records_field_by_field(study_dir):
    records = _json(study_dir)
    rows = [r for r in records if r["event"] == "row"]
    r = invoke("report", study_dir / "res", "--format", "csv")
    assert r.exit_code == 0, r.stderr
    got = list(csv.DictReader(io.StringIO(r.stdout)))
    assert list(got[0]) == list(formats.ROW_COLUMNS) and len(got) == len(rows) == 2
    for line, rec in zip(got, rows):
        lo, hi = rec["interval"] or (None, None)
        # One type per column (issue 74): the csv's own columns where the JSON mixes types.
        own = {"interval_lo": lo, "interval_hi": hi, "group": rec["group"] or "all", "fail": bool(rec["fail"]),
               "paper": None if isinstance(rec["paper"], str) else rec["paper"], "paper_fail": rec["paper"] == "fail"}
        for col in formats.ROW_COLUMNS:
            value = own.get(col, rec.get(col))
            assert _same(line[col], value, rounded=True), (col, line[col], value)
    # --pairs: the claim, with its difference and p as the study object has them.
    p = invoke("report", study_dir / "res", "--format", "csv", "--pairs")
    (pair,) = list(csv.DictReader(io.StringIO(p.stdout)))
    (claim,) = records[-1]["claims"]
    assert pair["kind"] == "claim" and (pair["better"], pair["worse"]) == ("identity", "plain")
    assert _same(pair["difference"], claim["shift"]) and _same(pair["p"], claim["p"])
    assert _same(pair["p_holm"], claim["p_holm"]) and pair["verdict"] == claim["verdict"]


def test_the_markdown_format_is_the_docs_block_byte_for_byte(study_dir):
    import docs_tables

    records = _json(study_dir)
    r = invoke("report", study_dir / "res", "--format", "markdown")
    assert r.exit_code == 0, r.stderr
    assert r.stdout == docs_tables._study(records)  # what `make docs-studies` writes between the markers
    assert "| 1 | identity |" in r.stdout and "The 1 declared claim" in r.stdout


def test_latex_escapes_labels_and_has_one_rule_of_each_kind(tmp_path):
    rows = [{"event": "row", "study": "s_1", "preset": "quick", "index": 1, "row": "exclusive gating, b_g -6",
             "n": 3, "median": 4.0, "interval": [3.0, 5.0], "coverage": 0.75, "paper": 8.7, "fail": False,
             "dataset": "digits", "paper_metric": "CIFAR-10 error %"},
            {"event": "row", "study": "s_1", "preset": "quick", "index": 2, "row": "50% & #2_{x}", "n": 3,
             "median": 90.0, "interval": [89.0, 91.0], "coverage": 0.75, "paper": "fail", "fail": True}]
    study = {"event": "study", "study": "s_1", "preset": "quick", "family": {"declared": True, "size": 1},
             "claims": [{"better": "exclusive gating, b_g -6", "worse": "50% & #2_{x}", "verdict": "in order"}]}
    text = formats.study_latex([*rows, study])
    assert "exclusive gating, $b_g$ $-$6" in text  # a minus sign, not a hyphen
    assert r"50\% \& \#2\_\{x\}$^{\dag}$" in text  # the worse row of a claim resolved in order, marked
    assert text.count(r"\toprule") == text.count(r"\midrule") == text.count(r"\bottomrule") == 1
    body = text.split("\\midrule\n")[1].split("\\bottomrule")[0]
    assert body.count("\\\\\n") == len(rows) and "|" not in text.split("\\begin{tabular}")[1].split("}")[0]
    assert "s\\_1 (preset quick, n = 3 seeds a row)" in text and "sign-flip test" in text
    if shutil.which("pdflatex") is None:
        pytest.skip("pdflatex is not installed here: the table was checked as text, not compiled")
    doc = "\\documentclass{article}\\usepackage{booktabs}\\begin{document}" + text + "\\end{document}\n"
    (tmp_path / "t.tex").write_text(doc)
    done = subprocess.run(["pdflatex", "-interaction=nonstopmode", "t.tex"], cwd=tmp_path, capture_output=True)
    assert done.returncode == 0, done.stdout[-2000:]


def test_runs_lists_every_run_with_its_status_and_regroups_into_the_table(tmp_path):
    (tmp_path / "s.yaml").write_text(TINY + BLOWUP)
    r = invoke("ablate", tmp_path / "s.yaml", "--out", tmp_path / "res", "--json")
    assert r.exit_code == 0, r.stderr
    # One run stopped by a signal: its summary says interrupted (as a SIGINT leaves it).
    summary = tmp_path / "res" / "02-plain-s1" / "summary.json"
    summary.write_text(json.dumps({**json.loads(summary.read_text()), "status": "interrupted"}))
    table = [x for x in _json(tmp_path) if x["event"] == "row"]
    got = invoke("report", tmp_path / "res", "--runs", "--format", "csv")
    assert got.exit_code == 0, got.stderr
    runs = list(csv.DictReader(io.StringIO(got.stdout)))
    assert list(runs[0]) == list(formats.RUN_COLUMNS) and len(runs) == 6
    status = {(r["row"], r["seed"]): r["status"] for r in runs}
    assert status[("absurd lr", "0")] == "diverged" and status[("plain", "1")] == "interrupted"
    assert all(r["torch"] and r["threads"] and r["run_dir"] for r in runs)
    # A groupby median of the counted errors is the table's median, row by row.
    for row in table:
        counted = [float(r["counted_error"]) for r in runs if r["row"] == row["row"] and r["counted_error"]]
        assert (statistics.median(counted) if counted else None) == row["median"], row["row"]


def test_format_clashes_are_one_line_exit_2(study_dir):
    r = invoke("report", study_dir / "res", "--json", "--format", "csv")
    assert r.exit_code == 2 and "give one" in r.stderr
    r = invoke("report", study_dir / "res", "--pairs")
    assert r.exit_code == 2 and "--format csv" in r.stderr
    r = invoke("report", study_dir / "res", "--format", "yaml")
    assert r.exit_code == 2


def test_an_unknown_format_is_one_line_listing_the_formats(tmp_path):
    r = invoke("report", tmp_path, "--format", "xlsx")
    assert r.exit_code == 2
    assert "Invalid value for '--format': 'xlsx'; valid: table, json, csv, markdown, latex" in r.stderr
    assert "Value error" not in r.stderr and len(r.stderr.strip().splitlines()) == 1
