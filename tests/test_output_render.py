"""output.render: records become JSON lines (nothing else on stdout) or, for people, the views'
tables with their notes on stdout and their log lines on stderr."""

from __future__ import annotations

import io
import json

from rich.console import Console

from resnet_cli import output

RECORDS = [{"event": "unit", "unit": 1, "error": 12.3456}, {"event": "unit", "unit": 2, "error": float("nan")},
           {"event": "figure", "path": "f.png"}]


def _capture(monkeypatch):
    out, err = io.StringIO(), io.StringIO()
    monkeypatch.setattr(output, "stdout", lambda: Console(width=80, file=out, highlight=False, color_system=None))
    monkeypatch.setattr(output, "stderr", lambda: Console(width=80, file=err, highlight=False, color_system=None))
    return out, err


def _view(**kw):
    return output.View("units", ["unit", "error %"], lambda r: (str(r["unit"]), r["error"]),
                       keep=lambda r: r["event"] == "unit", **kw)


def test_json_writes_every_record_as_one_line_and_nothing_else(capsys, monkeypatch):
    _, err = _capture(monkeypatch)
    output.render(RECORDS, output.Format.JSON, _view(notes=["a note"], log=["figure: f.png"]))
    lines = capsys.readouterr().out.splitlines()
    assert [json.loads(line) for line in lines] == [
        {"event": "unit", "unit": 1, "error": 12.3456}, {"event": "unit", "unit": 2, "error": "nan"},
        {"event": "figure", "path": "f.png"}]
    assert err.getvalue() == ""  # the notes and log lines are for people; the records carry them


def test_table_shows_the_kept_records_the_notes_and_the_log(monkeypatch):
    out, err = _capture(monkeypatch)
    output.render(RECORDS, output.Format.TABLE, [_view(notes=["a note"]), output.View(show=False, log=["figure: f.png"])])
    text = out.getvalue()
    rows = [line for line in text.splitlines() if line.startswith("│")]
    assert [[c.strip() for c in r.split("│")[1:3]] for r in rows] == [["1", "12.35"], ["2", "nan"]]
    assert "f.png" not in text and text.rstrip().endswith("a note")
    assert err.getvalue() == "figure: f.png\n"


def test_rows_may_come_from_all_records_at_once(monkeypatch):
    out, _ = _capture(monkeypatch)
    view = output.View("files", ["file", "what"], rows=lambda recs: [(r["path"], "figure") for r in recs],
                       keep=lambda r: r["event"] == "figure", justify_right=[False, False])
    output.render(RECORDS, output.Format.TABLE, view)
    assert "│ f.png" in out.getvalue() and "figure" in out.getvalue() and "12.35" not in out.getvalue()
