"""Output a person can read: tables legible at 80 columns with no number cut, whole-sentence config
descriptions, --threads on every command that computes, and no citation of notes users do not have.

Tables are rendered by the commands' own table builders into a rich Console 80 columns wide; the
values they must show are written out here by hand (f"{v:.1e}" of the inputs), not taken from the
code under test.
"""

from __future__ import annotations

import io
import re
from pathlib import Path

import numpy as np
import pytest
import torch
from rich.console import Console
from typer.testing import CliRunner

from resnet_cli.cli import app

ROOT = Path(__file__).resolve().parent.parent


def render(renderable, width: int = 80) -> str:
    con = Console(width=width, file=io.StringIO(), highlight=False, color_system=None)
    con.print(renderable)
    text = con.file.getvalue()
    assert all(len(line) <= width for line in text.splitlines()), "a line is wider than the console"
    assert "…" not in text, f"something was cut:\n{text}"
    return text


# ---------------------------------------------------------------------------------------------
# Tables at 80 columns


def _net_norms(name: str, first: float, inputs_start: float):
    from resnet_cli.analysis.gradnorm import NetNorms

    layers = [{"layer": f"units.{i}.branch.0", "label": f"unit{i}.conv1", "index": i, "path": "main",
               "kind": "Conv2d", "grad_norm": first * 10.0 ** (-i), "weight_norm": 1.0} for i in range(1, 40)]
    return NetNorms(name=name, params=123_456, depth=39, units=19, layers=layers,
                    inputs=[inputs_start * 10.0 ** i for i in range(20)], direct=[0.5 ** (19 - l) for l in range(20)],
                    steps=1, loss=2.302585, status="completed")


def test_gradnorm_tables_keep_every_exponent_at_80_columns():
    from resnet_cli.commands import gradnorm as cmd

    results = [_net_norms("digits/plain26-with-a-long-name", 3.2, 2.1e-39),
               _net_norms("scale:0.5+full_preact", 1.5e-3, 4.4e-20), _net_norms("exclusive_gate:-6", 7.7, 1e-3)]
    summary = render(cmd._summary_view(results, 1).table([]))
    # first layer, fc (index 39), min (index 39) and max (index 1) of the main-path norms, as written by hand
    for want in ["3.2e-01", "3.2e-39", "1.5e-04", "1.5e-42", "7.7e-01", "7.7e-39", "1.9e-06", "2.303"]:
        assert want in summary, want
    layers = render(cmd._layer_view(results, True).table([]))
    for want in ["3.20e-01", "3.20e-39", "1.50e-42", "2.10e-39", "4.40e-20", "unit39.conv1", "dE/dx_19"]:
        assert want in layers, want


def test_degrade_table_keeps_ranges_and_published_figures_whole():
    from resnet_cli.results import degrade_view

    def summary(net, depth):
        s = {"net": net, "depth": depth, "n": 10, "diverged": 1 if net == "plain" else 0, "params": 51_234,
             "reference": {"train_acc": 0.56, "train_acc_range": [0.395, 0.834],
                           "grad_norm_first_layer_range": [1.9, 3.2], "source": "the Residual Connection article"}}
        for metric, v in [("train_loss", 1.234567), ("train_acc", 0.5612), ("test_acc", 0.5234),
                          ("grad_norm_first_layer", 2.345)]:
            s.update({f"{metric}_median": v, f"{metric}_min": v * 0.7, f"{metric}_max": v * 1.3})
        return s

    text = render(degrade_view.table([summary(n, d) for d in (8, 26) for n in ("plain", "residual")],
                                     "degrade/digits-8-26"))
    for want in ["0.864-1.605", "0.39-0.73", "0.37-0.68", "1.64-3.05", "pub 0.56", "0.40-0.83", "pub 1.90-3.20",
                 "n=10", "1 div.", "51.2k"]:
        assert want in text, want


def test_plot_table_names_each_run_and_says_their_directory_once(monkeypatch, tmp_path):
    from resnet_cli import output
    from resnet_cli.commands import plot as cmd
    from resnet_cli.plots import curves

    base = tmp_path / "ablate" / "shortcut-quick"
    runs = {}
    for name, label in [("gate-6-s1", "exclusive_gate-26 (full_preact)"), ("identity-s0", "ResNet-26")]:
        path = str(base / name)
        runs[path] = {"run": path, "label": label, "status": "completed", "dataset": "digits", "seed": 0,
                      "epochs": 15, "iterations": 33_690, "train_error": 0.77, "test_error": 5.28,
                      "test_error_epoch": 15, "residual": True, "curve": []}
    out = io.StringIO()
    monkeypatch.setattr(curves, "read_run", lambda p: runs[p])
    monkeypatch.setattr(curves, "figure", lambda r, p: p)
    monkeypatch.setattr(output, "stdout", lambda: Console(width=80, file=out, highlight=False, color_system=None))
    monkeypatch.setattr(output, "choose", lambda _json: output.Format.TABLE)
    cmd.plot(list(runs), out=str(tmp_path / "c.png"), json_=False)
    text = out.getvalue()
    assert "…" not in text and all(len(line) <= 80 for line in text.splitlines())
    assert "gate-6-s1" in text and "identity-s0" in text and "33,690" in text and "5.28" in text
    squashed = "".join(text.split())  # a long directory may fold over lines
    assert f"runsin{base}/" in squashed and squashed.count("shortcut-quick") == 1  # said once, below the table


def test_short_paths_keep_what_differs():
    from resnet_cli.output import short_paths

    assert short_paths(["runs/a/x", "runs/a/y"]) == ("runs/a", ["x", "y"])
    assert short_paths(["runs/a/x", "runs/b/y"]) == ("runs", ["a/x", "b/y"])
    assert short_paths(["x", "y"]) == (None, ["x", "y"])


# ---------------------------------------------------------------------------------------------
# Landscape panels


def test_landscape_panels_share_levels_and_one_colour_bar(monkeypatch, tmp_path):
    from resnet_cli import figures
    from resnet_cli.analysis import landscape as land

    grid = [-1.0, -0.5, 0.0, 0.5, 1.0]

    def result(label, scale):
        pts = [{"alpha": a, "beta": b, "loss": scale * (1 + a * a + b * b), "accuracy": 50.0}
               for a in grid for b in grid]
        return {"label": label, "dims": 2, "grid": grid, "points": pts, "residual": True,
                "measures": {"local_minima": 1, "tv_ratio": 1.0, "nonconvex_fraction": 0.0}}

    results = [result("ResNet-26", 0.1), result("plain-26", 100.0)]  # log10 loss 1e-1..3e-1 and 2..2.5
    saved = {}
    real_save = figures.save
    monkeypatch.setattr(figures, "save", lambda fig, path: saved.setdefault("fig", fig) and real_save(fig, path))
    land.figure(results, tmp_path / "l.png")
    fig = saved["fig"]
    panels = [ax for ax in fig.axes if ax.get_label() != "<colorbar>"]
    bars = [ax for ax in fig.axes if ax.get_label() == "<colorbar>"]
    assert len(panels) == 2 and len(bars) == 1
    levels = [np.asarray(ax.collections[0].levels) for ax in panels]
    assert np.array_equal(levels[0], levels[1])
    # The shared levels span both surfaces: from log10(0.1) to log10(100 * 3), by hand.
    assert levels[0][0] == pytest.approx(-1.0) and levels[0][-1] == pytest.approx(np.log10(300.0))


# ---------------------------------------------------------------------------------------------
# `resnet configs`


def _configs_rows():
    import json

    res = CliRunner().invoke(app, ["configs", "--json"])
    assert res.exit_code == 0, res.output
    return [json.loads(line) for line in res.stdout.splitlines()]


def test_every_config_is_described_in_whole_sentences():
    rows = _configs_rows()
    assert len(rows) >= 20
    for row in rows:
        about, first = row["about"], Path(row["path"]).read_text().splitlines()[0].lstrip("# ").strip()
        assert about.startswith(first), row["name"]  # nothing of the first line is lost
        assert re.search(r"[.!?]$", about), f"{row['name']}: '{about}' does not end a sentence"
        assert about.count("(") == about.count(")"), f"{row['name']}: '{about}' stops inside parentheses"
        assert not re.search(r"\b(not reported|unknown) %", about), row["name"]


def test_about_text_reads_on_across_lines_to_the_sentence_end():
    from resnet_cli.commands.configs import about_text

    assert about_text("# One net (He 2016a sec. 4.2, Fig. 6). Paper: 6.4 %.\n# More.\nmodel: {}\n") == \
        "One net (He 2016a sec. 4.2, Fig. 6). Paper: 6.4 %."
    assert about_text("# A net: conv-BN-ReLU,\n# then a pool. Details.\n") == "A net: conv-BN-ReLU, then a pool."
    assert about_text("# An unfinished (first line\n# ends here). Next one.\n") == \
        "An unfinished (first line ends here)."
    assert about_text("model: {}\n") == ""


def test_configs_table_is_legible_at_80_columns(monkeypatch):
    from resnet_cli import output
    from resnet_cli.commands.configs import configs

    out = io.StringIO()
    monkeypatch.setattr(output, "stdout", lambda: Console(width=80, file=out, highlight=False, color_system=None))
    monkeypatch.setattr(output, "choose", lambda _json: output.Format.TABLE)
    configs(False)
    text = out.getvalue()
    assert "…" not in text and all(len(line) <= 80 for line in text.splitlines())
    assert "digits/residual26" in text and "resnet train NAME" in text
    note = "SCIEN" + "CE"  # the notes' name, in pieces so that the citation test below passes over this line
    assert note not in text and all(note not in row["about"] for row in _configs_rows())


# ---------------------------------------------------------------------------------------------
# Threads


COMPUTING = ["train", "degrade", "gradnorm", "bench", "lesion", "landscape", "paths", "eval"]


@pytest.mark.parametrize("command", COMPUTING)
def test_every_computing_command_takes_threads(command):
    res = CliRunner().invoke(app, [command, "--help"], env={"COLUMNS": "200"})
    assert res.exit_code == 0 and "--threads" in res.output


def test_threads_flag_is_run_threads():
    from resnet_cli.commands.common import build_spec

    assert build_spec("digits/residual8", None, threads=2).run.threads == 2
    res = CliRunner().invoke(app, ["train", "digits/residual8", "--threads", "-1", "--dry-run"])
    assert res.exit_code == 2


@pytest.mark.parametrize("name", sorted(p.stem for p in (ROOT / "configs" / "digits").glob("*.yaml")))
def test_digits_configs_resolve_to_one_thread(name):
    from resnet_cli import spec as spec_mod

    assert spec_mod.load(f"digits/{name}").run.threads == 1


def test_lesion_landscape_and_paths_take_the_runs_thread_count_or_the_flag(tmp_path, residual8_run, monkeypatch):
    """The thread count each analysis computes with, read when it loads the run's weights (the
    command puts the caller's count back when it returns)."""
    from resnet_cli.analysis import trained

    seen = []
    load_run = trained.load_run
    monkeypatch.setattr(trained, "load_run", lambda *a, **kw: seen.append(torch.get_num_threads()) or load_run(*a, **kw))
    runner = CliRunner()
    run = residual8_run  # digits/residual8 keeps run.threads 1 (the test above)
    try:
        torch.set_num_threads(2)
        for args, threads in [(["lesion", run, "--max-k", "1", "--draws", "1", "--out", tmp_path / "l.png"], 1),
                              (["landscape", run, "--points", "3", "--samples", "50", "--threads", "2",
                                "--out", tmp_path / "s.png"], 2),
                              (["paths", run, "--samples", "1", "--out", tmp_path / "p.png"], 1),  # the run's own
                              (["paths", run, "--samples", "1", "--threads", "2", "--out", tmp_path / "p.png"], 2)]:
            seen.clear()
            res = runner.invoke(app, [str(a) for a in args])
            assert res.exit_code == 0, res.output
            assert seen == [threads], args[0]
            assert torch.get_num_threads() == 2  # the caller's count, back
    finally:
        torch.set_num_threads(1)


# ---------------------------------------------------------------------------------------------
# Citations users can follow


def test_no_citation_of_notes_outside_the_repository():
    # The names are built from pieces so that this file does not match itself.
    notes = re.compile("|".join(["SCIEN" + "CE", "PITFA" + "LLS", r"\bSTY" + r"LE( \d|\.md)", "shar" + "ed/"]))
    hits = []
    for folder in ("resnet_cli", "configs", "tests"):
        for path in sorted((ROOT / folder).rglob("*")):
            if path.suffix in (".py", ".yaml", ".yml", ".md") and path.is_file():
                for i, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
                    if notes.search(line):
                        hits.append(f"{path.relative_to(ROOT)}:{i}: {line.strip()}")
    assert not hits, "cite the papers instead:\n" + "\n".join(hits)
