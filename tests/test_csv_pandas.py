"""The study csv files read as a user's notebook reads them (issue 74): pandas.read_csv with no
options, one dtype per column, a non-empty group in a study without groups, an explicit metric,
unrounded values, and a row index in runs.csv, so the documented groupby over `report --runs`
reproduces the table's medians to the last bit (docs/report.md)."""

from __future__ import annotations

import io
import statistics

import pytest

from invoking import invoke
from test_ablate import BLOWUP, TINY

pd = pytest.importorskip("pandas")

STUDY = TINY.replace("seeds: [0, 1]", "seeds: [0, 1, 2]") + BLOWUP + """claims:
  - {better: identity, worse: plain, source: "made up: identity below plain"}
"""


@pytest.fixture(scope="module")
def study_dir(tmp_path_factory):
    root = tmp_path_factory.mktemp("pandas")
    (root / "s.yaml").write_text(STUDY)
    r = invoke("ablate", root / "s.yaml", "--out", root / "res", "--json")
    assert r.exit_code == 0, r.stderr
    return root / "res"


def _csv(*args):
    r = invoke("report", *args, "--format", "csv")
    assert r.exit_code == 0, r.stderr
    return pd.read_csv(io.StringIO(r.stdout))


def test_each_column_has_one_type(study_dir):
    rows = _csv(study_dir)
    assert len(rows) == 3 and list(rows["index"]) == [1, 2, 3]
    assert rows["group"].tolist() == ["all"] * 3  # a study without groups: one named group, never empty
    assert rows["metric"].tolist() == ["test_error"] * 3
    assert rows["paper"].dtype == "float64" and rows["paper"].tolist()[0] == 1.5  # "fail" is not a number
    assert rows["paper"].isna().tolist() == [False, True, True]
    assert rows["paper_fail"].dtype == bool and rows["paper_fail"].tolist() == [False, True, False]
    assert rows["fail"].dtype == bool  # true/false, never empty
    for column in ("median", "mean", "std", "interval_lo", "interval_hi", "train_loss"):
        assert rows[column].dtype == "float64", column
    runs = _csv(study_dir, "--runs")
    assert runs["index"].dtype == "int64" and runs["group"].tolist() == ["all"] * len(runs)
    assert runs["counted_error"].dtype == "float64" and runs["seed"].dtype == "int64"


def test_the_documented_groupby_reproduces_the_tables_medians_unrounded(study_dir):
    rows, runs = _csv(study_dir), _csv(study_dir, "--runs")
    # docs/report.md's recipe: the rows in the paper's order, each the median of its runs as counted
    medians = runs.groupby(["study", "group", "index", "row"])["counted_error"].median()
    assert len(medians) == len(rows) == 3  # nothing dropped by an empty key
    for r in rows.itertuples():
        assert medians.loc[(r.study, r.group, r.index, r.row)] == r.median  # exactly: both unrounded
    # an independent count: the runs' own numbers, by hand, through the statistics module
    for index, group in runs.groupby("index"):
        assert statistics.median(group["counted_error"]) == rows.set_index("index").loc[index, "median"]
    # the diverged row counts at digits' chance error, 90%, as the table counts it
    blowup = runs[runs["row"] == "absurd lr"]
    assert set(blowup["status"]) == {"diverged"} and set(blowup["counted_error"]) == {90.0}
    # the groupby a user writes first keeps every row (an empty group made it return none)
    assert rows.groupby(["study", "group", "row"]).size().sum() == 3


def test_pairs_csv_reads_with_one_type_per_column(study_dir):
    pairs = _csv(study_dir, "--pairs")
    assert pairs["kind"].tolist()[0] == "claim" and pairs["difference"].dtype == "float64"
    assert pairs["p"].dtype == "float64" and pairs["hypothesis"].dtype == bool
