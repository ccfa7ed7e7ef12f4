"""The per-run numbers docs/train.md prints still come out of the code: the cheapest headline runs
(the digits plain-26 and ResNet-26 at seed 0, seconds each) are trained again at the thread count
the page states, and every figure of their table rows must match to the digit the page shows. The
page's numbers once drifted (4.72% printed, another figure trained) and nothing noticed; the next
drift fails here, and the fix is `make docs` (or the code change that caused it, if unintended).

Bitwise holds only on the CPU model the page was generated on (the instruction set picks the
kernels, whose sums differ in their last bits, and six epochs on 360 test images turn last bits
into whole points): elsewhere the comparison is skipped, saying which CPU the page names."""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import pytest

from processes import resnet

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tools"))
from docs_jobs import machine  # noqa: E402 - the same reading of the CPU the page's note was written with

pytestmark = pytest.mark.slow  # two trainings of a few seconds, in child processes

ROOT = Path(__file__).resolve().parent.parent
PAGE = ROOT / "docs" / "train.md"


def _block() -> str:
    text = PAGE.read_text(encoding="utf-8")
    return text.split("<!-- generated: train-digits -->", 1)[1].split("<!-- end -->", 1)[0]


def _row(label: str, seed: int) -> list[str]:
    for line in _block().splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if cells[:2] == [label, str(seed)]:
            return cells
    raise AssertionError(f"docs/train.md has no row for {label} seed {seed}")


def test_the_page_states_the_thread_count_its_runs_used():
    note = _block().strip().splitlines()[0]
    assert "--threads 1" in note and "1 thread a process" in note, note


def _page_cpu() -> str:
    note = _block().strip().splitlines()[0]
    return re.search(r"wall time on (.+?), \d+ cores", note).group(1)


@pytest.mark.parametrize("config,label", [("digits/residual26", "ResNet-26"), ("digits/plain26", "plain-26")])
def test_the_documented_run_repeats_to_the_digits_printed(tmp_path, config, label):
    here = re.match(r"(.+?), \d+ cores", machine()).group(1)
    if here != _page_cpu():
        pytest.skip(f"docs/train.md was generated on {_page_cpu()}; this is {here}: not the same kernels")
    # The columns: net | seed | params | iterations | train loss | train error % | test error % | wall s
    _, _, params, iterations, loss, train_err, test_err, _ = _row(label, 0)
    r = resnet("train", config, "--seed", "0", "--threads", "1", "--out", "run", "--json", cwd=tmp_path, timeout=600)
    assert r.returncode == 0, r.stderr
    s = json.loads(r.stdout.splitlines()[-1])
    decimals = len(loss.split(".")[1])  # the page's own rounding
    got = [f"{s['params']:,}", str(s["iterations"]), f"{s['train_loss']:.{decimals}f}",
           f"{s['train_error']:.2f}", f"{s['test_error']:.2f}"]
    assert got == [params, iterations, loss, train_err, test_err], (
        f"{label} seed 0 now gives {got}; docs/train.md says {[params, iterations, loss, train_err, test_err]}: "
        "rerun `make docs` if the change was meant")
    assert re.fullmatch(r"\d+\.\d+", test_err)
