"""`resnet train --nproc N`: start N training processes with torchrun's own launcher, and keep the
error contract across the process boundary.

The parent checks what it can before starting anyone (spec, --out, GPUs for N ranks). A child's
bad-input error (dataset missing, checkpoint not ours) is written to a file the parent gave it
instead of being printed by every rank; the parent prints it once and exits with its code, where
`torchrun` itself would print each rank's line and then a long `ChildFailedError` traceback.
"""

from __future__ import annotations

import json
import logging
import os
import sys
import tempfile
from pathlib import Path

from .. import errors, output
from ..errors import UserError

ERROR_DIR_ENV = "RESNET_LAUNCH_ERROR_DIR"  # set by the parent; each failing rank writes rank-<r>.json there


def precheck(spec, nproc: int, resume_dir: Path | None) -> None:
    """Refuse in one line what would fail in every child anyway."""
    from . import runtime

    if resume_dir is None and spec.run.out is None:
        raise UserError("--nproc needs --out RUN_DIR, so every rank (and a restart) finds the same run")
    refuse_under_ddp(spec)
    batch = spec.optim.batch_size
    if batch % nproc:
        fits = [n for n in range(1, min(batch, 64) + 1) if batch % n == 0]
        raise UserError(f"optim.batch_size {batch} does not divide evenly over --nproc {nproc}; "
                        f"valid --nproc for this batch: {', '.join(map(str, fits))}")
    runtime.plan(spec.run, spec.train, local_rank=nproc - 1, torchrun=True, probe_gpu=False)


def refuse_under_ddp(spec) -> None:
    """What DistributedDataParallel cannot run: stochastic depth draws its drops per process, so ranks
    would skip different units and DDP's gradient all-reduce would wait on parameters one rank never
    used (Huang et al. 2016 trained on one GPU)."""
    if spec.model.stochastic_depth < 1.0:
        raise UserError(f"model.stochastic_depth {spec.model.stochastic_depth} runs in one process only: each rank "
                        "would drop other units; train it without --nproc (or set model.stochastic_depth=1)")


def child_error(exc: UserError) -> bool:
    """In a child of `launch_torchrun`: hand a bad-input error to the parent; False elsewhere."""
    directory = os.environ.get(ERROR_DIR_ENV)
    if not directory or "RANK" not in os.environ:
        return False
    path = Path(directory) / f"rank-{int(os.environ['RANK'])}.json"
    path.write_text(json.dumps({"message": exc.message, "code": exc.code}), encoding="utf-8")
    return True


def torchrun_argv(nproc: int, argv: list[str]) -> list[str]:
    """torchrun's arguments for this command line, less our `--nproc`."""
    kept, skip = [], False
    for arg in argv:
        if skip:
            skip = False
        elif arg == "--nproc":
            skip = True
        elif not arg.startswith("--nproc="):
            kept.append(arg)
    return ["--standalone", f"--nproc_per_node={nproc}", "-m", "resnet_cli", *kept]


def launch_torchrun(nproc: int) -> int:
    """`torchrun --standalone --nproc_per_node N -m resnet_cli train ...`: the standard launcher,
    not a home-made one, so its restart and rendezvous rules apply. Returns the exit code."""
    from torch.distributed import run as torchrun
    from torch.distributed.elastic.multiprocessing.api import SignalException
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError

    args = torchrun_argv(nproc, sys.argv[1:])
    output.info("launching: torchrun " + " ".join(args))
    # The agent's own log lines (rendezvous banners, "failed (exitcode: 2)") are not for users.
    logging.getLogger("torch.distributed").setLevel(logging.CRITICAL)
    # torchrun sets OMP_NUM_THREADS=1 for each child when it is unset, and prints a banner saying
    # so; set the same value ourselves, so children match and the banner stays away. run.threads
    # still sets torch's thread count in each child (runtime.py).
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    with tempfile.TemporaryDirectory(prefix="resnet-launch-") as error_dir:
        os.environ[ERROR_DIR_ENV] = error_dir
        try:
            torchrun.run(torchrun.parse_args(args))
        except ChildFailedError as exc:
            return _failed(Path(error_dir), {rank: f.exitcode for rank, f in exc.failures.items()})
        except SignalException as exc:
            return 128 + int(exc.sigval)
        finally:
            os.environ.pop(ERROR_DIR_ENV, None)
    return errors.OK


def _failed(error_dir: Path, exit_codes: dict[int, int]) -> int:
    reports = sorted(error_dir.glob("rank-*.json"), key=lambda p: int(p.stem.split("-")[1]))
    if reports:  # the same bad input fails every rank: say it once
        first = json.loads(reports[0].read_text(encoding="utf-8"))
        print(f"resnet: error: {first['message']}", file=sys.stderr)
        return int(first["code"])
    rank = min(exit_codes)
    code = exit_codes[rank]
    if code in (errors.DIVERGED, errors.INTERRUPTED_INT, errors.INTERRUPTED_TERM):
        return code  # an outcome rank 0 has already reported, not a failure of the launch
    print(f"resnet: error: training process of rank {rank} failed with exit code {code} (its output is above)",
          file=sys.stderr)
    return errors.FAILED
