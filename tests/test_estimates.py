"""Before a shipped study's first run (issue 74): the time it will take, from the docs' measurement
of that study and preset (sweep/estimates.py), checked against the measured table's own figures."""

from __future__ import annotations

import dataclasses

import pytest

from resnet_cli.sweep import engine
from resnet_cli.sweep import plan as plan_mod


def test_a_shipped_study_states_an_estimate_before_its_first_run():
    from resnet_cli.sweep.estimates import MEASURED

    plan = plan_mod.plan("shortcut", "quick")
    line = engine.preview(plan, 2)
    m = MEASURED[("shortcut", "quick")]
    # the docs' measurement: 65 min for 132 runs on 2 workers, so 143 runs at 2 at once take 143/132 of it
    assert m.per_run * len(plan.runs) / 2 == pytest.approx(65 * 60 * len(plan.runs) / 132)
    assert "about 1 h 10 min at 2 at once" in line and "--stack 16 --jobs 2 --threads 1" in line
    assert "not measured" in engine.preview(dataclasses.replace(plan, name="not-shipped"), 2)


def test_every_shipped_estimate_is_a_shipped_study_with_that_preset():
    from resnet_cli.sweep.estimates import MEASURED
    from resnet_cli.sweep.study_file import shipped

    for study, preset in MEASURED:
        assert study in shipped() and plan_mod.plan(study, preset).runs, (study, preset)


def test_another_thread_count_gets_the_measured_figure_as_a_guide_not_a_scaled_guess():
    from resnet_cli.sweep.estimates import estimate

    one = estimate("projection", "quick", 40, 2, threads=1)
    four = estimate("projection", "quick", 40, 2, threads=4)
    assert one.startswith("about 5.9 min at 2 at once") and "a guide only" not in one
    assert four.startswith("about 5.9 min at 2 at once") and four.endswith("yours run 4: a guide only)")
    assert "a guide only" not in estimate("projection", "quick", 40, 2, threads="auto")
