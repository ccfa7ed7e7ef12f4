"""results/degrade_grid.py on one real grid (plain and residual at depth 26, seeds 0 and 1, one
epoch on 256 digits): degrade.json holds what the command printed with its provenance (the
versions, the commit, when, the wall times rounded as written), `resnet report` reads the grid
back from its run directories alone (the file only names it), a run refused in this invocation
stays out of the report, and a run of the layout before probe.json reports the probe values
its runs.jsonl line kept."""

import datetime as dt
import json
import shutil
import subprocess
import time
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
from typer.testing import CliRunner

from resnet_cli import output
from resnet_cli.cli import app
from resnet_cli.results import degrade_formats as F
from resnet_cli.results import degrade_grid as G
from resnet_cli.results import degrade_view as DV
from resnet_cli.sweep import degrade_plan as D
from resnet_cli.sweep.one_run import Outcome

ARGS = ["--depths", "26", "--seeds", "0..1", "--epochs", "1", "--set", "data.train_subset=256"]


@pytest.fixture(scope="module")
def grid(tmp_path_factory):
    """The grid's directory and the JSON objects `resnet degrade --json` printed."""
    out = tmp_path_factory.mktemp("grid") / "d"
    res = CliRunner().invoke(app, ["degrade", *ARGS, "--out", str(out), "--json"])
    assert res.exit_code == 0, res.output
    return out, [json.loads(line) for line in res.stdout.splitlines() if line.strip()]


def copied(grid, tmp_path) -> Path:
    dest = tmp_path / "d"
    shutil.copytree(grid[0], dest)
    return dest


def as_json(value):
    """As a JSON file or line holds it (tuples become lists)."""
    return json.loads(json.dumps(value))


def printed(objs, event):
    return [o for o in objs if o["event"] == event]


def test_degrade_json_keeps_the_printed_results_with_their_provenance(grid):
    out, objs = grid
    text = (out / G.RESULT_FILE).read_text(encoding="utf-8")
    assert text.startswith('{\n  "source": ') and text.endswith("}\n")  # indented for people, one trailing newline
    assert not list(out.glob(".*.tmp"))  # written whole, then moved into place
    saved = json.loads(text)
    assert (saved["source"], saved["depths"], saved["seeds"], saved["nets"]) == (
        "degrade/digits-8-26", [26], [0, 1], ["plain", "residual"])
    assert saved["base_spec"]["data"]["train_subset"] == 256
    assert saved["summaries"] == printed(objs, "summary")
    (claims,) = printed(objs, "claims")
    assert saved["claims"] == claims
    # the article's findings on 26-layer nets, our medians beside its ranges
    medians = {(s["net"], m): s[f"{m}_median"] for s in saved["summaries"] for m in ("train_acc", "grad_norm_first_layer")}
    assert [f["ours"] for f in saved["findings"]] == [medians[("plain", "train_acc")], medians[("residual", "train_acc")],
                                                      medians[("plain", "grad_norm_first_layer")],
                                                      medians[("residual", "grad_norm_first_layer")]]
    # every run's own training time, summed from the run directories; this invocation's wall time
    own = sum(json.loads(p.read_text())["wall_time_s"] for p in (out / "runs").glob("*/summary.json"))
    assert saved["train_wall_s"] == round(own, 1) and saved["train_wall_s"] > 0
    assert saved["wall_s"] == round(saved["wall_s"], 1) and 0 < saved["wall_s"] < 600
    assert saved["versions"]["torch"] == torch.__version__
    head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=Path(__file__).parent, capture_output=True, text=True)
    assert saved["git_commit"].removesuffix("-dirty") == head.stdout.strip()
    finished = dt.datetime.fromisoformat(saved["finished"])
    assert finished.utcoffset() == dt.timedelta(0) and finished.microsecond == 0
    assert dt.timedelta(0) <= dt.datetime.now(dt.timezone.utc) - finished < dt.timedelta(hours=1)


def test_report_reads_the_grid_back_from_its_run_directories_alone(grid, tmp_path):
    out, objs = grid
    saved = json.loads((out / G.RESULT_FILE).read_text())
    back = G.from_directory(out)
    assert back.plan is None and back.source == "degrade/digits-8-26"
    assert [(r["net"], r["seed"]) for r in back.records] == [("plain", 0), ("plain", 1), ("residual", 0),
                                                             ("residual", 1)]  # the plan's order
    for record, line in zip(back.records, printed(objs, "run")):  # each printed field as the run directory has it
        assert {k: record[k] for k in line} == line
    assert as_json([back.summaries, back.claims, back.findings]) == [saved["summaries"], saved["claims"],
                                                                      saved["findings"]]
    # a damaged degrade.json: the runs still report, the directory names the grid
    damaged = copied(grid, tmp_path)
    (damaged / G.RESULT_FILE).write_text('{"source": "degr', encoding="utf-8")
    (damaged / "runs" / "notes.txt").write_text("not a run\n", encoding="utf-8")
    again = G.from_directory(damaged)
    assert again.source == str(damaged) and as_json(again.summaries) == saved["summaries"]
    (damaged / G.RESULT_FILE).unlink()
    assert G.from_directory(damaged) is None  # not a degrade directory (report reads its runs as loose runs)


def test_a_run_refused_in_this_invocation_stays_out_and_the_wall_time_is_this_invocations(grid, tmp_path):
    out, objs = grid
    plan = D.make_plan(None, depths=[26], seeds=[0, 1], overrides=D.length_overrides(None, 1, None),
                       sets=["data.train_subset=256"], out=out)
    full = G.collect(plan)
    assert (len(full.records), full.wall_s, full.signum) == (4, 0.0, None)
    assert as_json([full.summaries, full.claims]) == [printed(objs, "summary"), printed(objs, "claims")[0]]
    refused = {key: Outcome("error", "another run's directory", code=2) for key in ("1:0",)}
    stopped = G.collect(plan, refused, signum=15, tick=time.perf_counter() - 100.0)
    assert [(r["net"], r["seed"]) for r in stopped.records] == [("plain", 1), ("residual", 0), ("residual", 1)]
    assert stopped.outcomes == refused and stopped.signum == 15 and stopped.source == "degrade/digits-8-26"
    assert 100.0 <= stopped.wall_s < 160.0
    assert [s["n"] for s in stopped.summaries] == [1, 2]


def test_an_empty_grid_has_nothing_to_summarise():
    empty = G._report(G.Grid(None, []))
    assert (empty.summaries, empty.claims, empty.findings) == ([], None, None)


def test_a_run_of_the_layout_before_probe_json_reports_its_runs_jsonl_probe_values(grid, tmp_path):
    out = copied(grid, tmp_path)
    run_dir = out / "runs" / "plain-26-seed0"
    (run_dir / "probe.json").unlink()
    (out / "runs.jsonl").write_text(json.dumps({"event": "run", "run_dir": "runs/plain-26-seed0",
                                                "grad_norm_first_layer": 0.125, "curve": [[4, 1.5, 50.0]]}) + "\n")
    back = G.from_directory(out)
    plain0 = next(r for r in back.records if (r["net"], r["seed"]) == ("plain", 0))
    assert plain0["grad_norm_first_layer"] == 0.125 and plain0["curve"] == [[4, 1.5, 50.0]]


def test_degrade_json_rounds_this_invocations_time_and_counts_a_run_without_one_as_nothing(tmp_path):
    plan = D.make_plan(None, depths=[26], seeds=[0], out=tmp_path)
    grid = G.Grid(plan, [{"wall_s": 1.26}, {"wall_s": None}], wall_s=12.345)  # the second: a reused old run
    G.write_result(grid)
    saved = json.loads((tmp_path / G.RESULT_FILE).read_text(encoding="utf-8"))
    assert (saved["wall_s"], saved["train_wall_s"]) == (12.3, 1.3)


def test_the_grid_renders_to_a_file_in_each_text_format_and_says_the_claims_tally(grid, tmp_path):
    """`resnet degrade/report --format F --save PATH` on the real grid: the file holds that format's
    text of the grid's records (the pairs CSV only where asked; Markdown with the article's findings),
    and stderr gets the findings and the claims' tally, worded here."""
    back = G.from_directory(grid[0])
    records = DV.json_records(back)
    said = []
    log = SimpleNamespace(print=said.append)
    for fmt, pairs, want in ((output.Format.CSV, False, F.rows_csv(records)),
                             (output.Format.CSV, True, F.pairs_csv(records)),
                             (output.Format.MARKDOWN, False, F.table(records, back.findings) + F.claims_table(records))):
        said.clear()
        path = tmp_path / f"{fmt.value}-{pairs}.txt"
        if pairs:
            DV.render(back, fmt, log, pairs=True, save=str(path))
        else:
            DV.render(back, fmt, log, save=str(path))
        assert path.read_text(encoding="utf-8") == want
        # One depth: its twins are the grid's shallowest, "comparably accurate" (He 2016a), listed and
        # not tested, so no claim and no tally (tests/test_degrade_view_values.py has a grid with claims).
        assert back.claims["claims"] == [] and back.claims["family"]["size"] == 0
        assert said[0].startswith("the Residual Connection article's findings")
        assert not any(line.startswith("He 2016a's claims") for line in said)


def test_a_terminal_shows_the_grid_table_then_the_claims_table(grid):
    back = G.from_directory(grid[0])
    table, claims = DV.views(back)
    assert table.show is False and claims.show is False  # drawn by this module, not from columns
    assert table.draw(80).title == "degradation: plain vs residual (degrade/digits-8-26)"
    assert [c._cells for c in table.draw(80).columns][0] == ["plain\nn=2", "residual\nn=2"]
    assert claims.draw is None  # one depth: no claim, so no claims table
    empty = DV.views(G.Grid(None, []))
    assert [v.draw for v in empty] == [None, None]


def test_progress_prints_each_finished_run_once_and_what_became_of_the_others(grid, tmp_path):
    out, objs = grid
    said = []
    progress = DV.Progress(SimpleNamespace(print=said.append), total=4)
    run = SimpleNamespace(path=out / "runs" / "plain-26-seed0")
    progress(run, Outcome("completed"))
    progress(run, Outcome("error", "another process holds it", code=2))  # errors: one line at the end instead
    progress(run, None)
    (tmp_path / "runs" / "plain-26-seed1").mkdir(parents=True)  # no record yet: cut off before its first epoch
    cut = SimpleNamespace(path=tmp_path / "runs" / "plain-26-seed1")
    progress(cut, Outcome("interrupted", "stopped by SIGTERM"))
    progress(cut, Outcome("skipped"))
    record = next(r for r in G.from_directory(out).records if (r["net"], r["seed"]) == ("plain", 0))
    assert said == [DV.run_text(record, False, 1, 4), "[  2/4] plain-26-seed1: interrupted: stopped by SIGTERM",
                    "[  3/4] plain-26-seed1: skipped"]
    assert said[0].startswith("[  1/4] plain     26 layers  seed 0 ") and "(reused)" not in said[0]


def test_on_a_terminal_the_grid_prints_both_tables(grid, capsys):
    said = []
    DV.render(G.from_directory(grid[0]), output.Format.TABLE, SimpleNamespace(print=said.append))
    shown = capsys.readouterr().out
    assert "degradation: plain vs residual (degrade/digits-8-26)" in shown
    assert "He 2016a's claims" not in shown  # one depth: no claim (see above)
    assert not any(line.startswith("He 2016a's claims") for line in said)
