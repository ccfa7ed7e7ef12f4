"""Measurement jobs: the spec a timed run uses, and one job run in a fresh interpreter.

A job is a JSON object (side, mode, device, warmup, steps, spec); `python -m resnet_cli.bench` reads
it on stdin and prints its figures as one JSON line, so a peak resident-set size belongs to that one
configuration and nothing measured earlier pollutes it.
"""

from __future__ import annotations

import copy
import itertools
import json
import os
import re
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any, Callable, Iterable

Progress = Callable[[str], None]


class MeasureFailed(Exception):
    """A measuring process died or returned no figures (out of memory, a crash)."""


def bench_tree(spec_tree: dict, warmup: int, steps: int) -> dict:
    """The spec a timed run of ours uses: exactly warmup + steps + 1 iterations, no checkpoints,
    one evaluation at the end (after the timed window), never stopped as diverged (random labels)."""
    from .. import spec as spec_mod

    tree = copy.deepcopy(spec_tree)
    for key, value in [("optim.iters", warmup + steps + 1), ("optim.epochs", None), ("optim.milestones", None),
                       ("train.checkpoint_every", 0), ("train.eval_every", "end"),
                       ("train.grad_norm_every", 0), ("train.diverge_factor", 1e9)]:
        spec_mod.set_dotted(tree, key, value)
    return tree


def check_spec(spec) -> None:
    """bench feeds CIFAR-shaped images (3 x 32 x 32): only CIFAR-family nets apply."""
    from ..errors import UserError

    if spec.model.family != "cifar":
        raise UserError(f"bench measures CIFAR-family nets on 32x32 images; model.family is {spec.model.family} "
                        "(use a cifar/ or preact/ config)")


def device_of(spec) -> str:
    import torch

    d = spec.run.device
    if d == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    return d


def run_job(job: dict[str, Any], extra_env: dict[str, str] | None = None) -> dict[str, Any]:
    """Run one measurement in a fresh interpreter and return its figures."""
    env = {**os.environ, **(extra_env or {})}
    root = str(Path(__file__).resolve().parents[2])
    env["PYTHONPATH"] = root + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    proc = subprocess.run([sys.executable, "-m", "resnet_cli.bench"], input=json.dumps(job), env=env,
                          capture_output=True, text=True)
    if proc.returncode != 0:
        if proc.returncode < 0:
            why = f"killed by signal {-proc.returncode}"
            if -proc.returncode == signal.SIGKILL:
                why += " (out of memory?)"
        else:
            lines = [ln for ln in proc.stderr.strip().splitlines() if ln.strip()]
            # The child's last line is its exception; the user reads what went wrong, not our class names.
            why = re.sub(r"^[\w.]+(Error|Exception|Failed)\w*: ", "", lines[-1])[:300] if lines \
                else f"exit status {proc.returncode}"
        raise MeasureFailed(f"{job['side']} {job['mode']} measurement failed: {why}")
    lines = [ln for ln in proc.stdout.splitlines() if ln.strip()]
    if not lines:
        raise MeasureFailed(f"{job['side']} {job['mode']} measurement printed no figures")
    return json.loads(lines[-1])


def variants_from(items: Iterable[str]) -> list[dict[str, Any]]:
    """`--vary key=v1,v2 --vary other=a,b` -> the product of the settings, in order."""
    from .. import spec as spec_mod
    from ..errors import UserError

    axes = []
    for item in items:
        key, _, text = item.partition("=")
        if not key or not text:
            raise UserError(f"--vary {item}: expected dotted.key=v1,v2, e.g. --vary train.channels_last=on,off")
        axes.append([(key.strip(), spec_mod.parse_set(f"{key}={v}")[1]) for v in text.split(",")])
    return [dict(combo) for combo in itertools.product(*axes)] if axes else [{}]


def variant_label(variant: dict[str, Any]) -> str:
    return " ".join(f"{k.split('.')[-1]}={_show(v)}" for k, v in variant.items())


def _show(v: Any) -> str:
    return str(v).lower() if isinstance(v, bool) else str(v)
