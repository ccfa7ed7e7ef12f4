"""How long a shipped study takes before any of its runs has finished here: the measured wall time
of the docs' runs of that study and preset, per run and per worker, scaled to the runs left and the
workers asked for. Only measured figures: a study or preset not measured here has no estimate
(the first run to finish tells, engine.preview).

Each figure is one measurement by `make docs-studies` (docs/ablate.md, "ablate-times", and the
projection study rerun on its registered seeds): the command's flags, its wall time and its run
count. One worker's seconds per run = wall time x workers / runs, so the estimate for a plan is
runs left x that / the workers it runs on. The machine was a 2-core AMD EPYC whose cores other
processes also used (the 1-minute load at the end is in the table); a quiet machine is faster, and
runs without --stack (one process each, no stacked net) are slower.
"""

from __future__ import annotations

from dataclasses import dataclass

FLAGS = "--stack 16 --jobs 2 --threads 1"  # how every measurement below was run


@dataclass(frozen=True)
class Measured:
    wall_s: float  # the whole study's wall time
    runs: int  # rows x seeds it trained
    workers: int = 2  # --jobs

    @property
    def per_run(self) -> float:
        """One worker's wall seconds per run."""
        return self.wall_s * self.workers / self.runs


# (study, preset) -> the measurement (docs/ablate.md's ablate-times table; projection, gate-bias,
# zero-init and normalisation: their reruns on their registered seeds, 4 rows x 10 seeds in 5.9 min,
# 6 x 10 in 18.5, 6 x 9 in 13.2 and 7 x 11 in 17.4).
MEASURED: dict[tuple[str, str], Measured] = {
    ("shortcut", "quick"): Measured(65 * 60, 11 * 12),
    ("activation", "quick"): Measured(51.8 * 60, 10 * 12),
    ("activation-modern", "quick"): Measured(55.1 * 60, 10 * 12),
    ("projection", "quick"): Measured(5.9 * 60, 4 * 10),
    ("depth", "quick"): Measured(129 * 60, 11 * 12),
    ("gate-bias", "quick"): Measured(18.5 * 60, 6 * 10),
    ("normalisation", "quick"): Measured(17.4 * 60, 7 * 11),
    ("zero-init", "quick"): Measured(13.2 * 60, 6 * 9),
}


def estimate(study: str, preset: str, todo: int, workers: int, changed: bool = False,
             threads: int | str = 1) -> str | None:
    """'about 1 h 10 min at 2 at once (measured ...)' for `todo` runs on `workers`, or None where
    this study and preset were never measured. `changed`: the recipe differs from the preset's
    (--set), so the measurement is only a guide. `threads`: the runs' run.threads; the measurements
    are at one thread a run, and no measurement here says how a run speeds up with more (on a busy
    2-core machine more threads were slower: docs/bench.md), so other counts get the figure as a
    guide, not scaled by a guess."""
    from ..output import duration

    m = MEASURED.get((study, preset))
    if m is None or todo <= 0:
        return None
    total = m.per_run * todo / max(1, workers)
    caveat = "; --set changes the recipe, so only a guide" if changed else ""
    if isinstance(threads, int) and threads != 1:  # auto: the cores left over split between the workers
        caveat += f"; measured at one thread a run, yours run {threads}: a guide only"
    return (f"about {duration(total)} at {workers} at once (measured: {m.per_run:.0f} s a run per worker with "
            f"{FLAGS} on 2 busy cores, docs/ablate.md{caveat})")
