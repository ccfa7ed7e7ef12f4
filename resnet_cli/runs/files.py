"""The names of a run directory's files and the statuses a run ends in: the one place that says them.

    RUN_DIR/
      spec.yaml        the resolved spec (rerun with `resnet train RUN_DIR/spec.yaml`)
      meta.json        versions, git commit, device, seed, command line, start time
      metrics.jsonl    one JSON object per line, appended as training goes
      checkpoint.pt    the latest checkpoint (atomic; see training/checkpoint.py)
      summary.json     written once at the end: status, final errors, wall time
      study.json       a study's run: its study, row, seed and the paper's figure (written by the sweep)
      probe.json       `resnet degrade`'s probe: the first layer's gradient norm, He 2016a Fig. 6's curve
      slurm.json       a SLURM array task's job id, log and state (the last task that ran it)
      ablate.log       a study's run: its own log (the sweep's runs print here, not on the terminal)
      tensorboard/     with train.tensorboard: the same scalars as event files
      .lock            held (flock) by the process training in it; the OS drops it when that process dies
"""

from __future__ import annotations

SPEC, META, METRICS, CHECKPOINT, SUMMARY, LOCK = (
    "spec.yaml", "meta.json", "metrics.jsonl", "checkpoint.pt", "summary.json", ".lock")
STUDY, PROBE, SLURM, LOG, TENSORBOARD = "study.json", "probe.json", "slurm.json", "ablate.log", "tensorboard"
# A degrade grid's per-run records as versions before probe.json kept them (OUT/runs.jsonl; read, never written).
LEGACY_RUNS = "runs.jsonl"

# The statuses summary.json may end in with nothing left to do: a rerun skips these, reports count them.
FINAL = ("completed", "diverged")
