"""A trained run, loaded back for analysis: its resolved spec, its model with the last checkpoint's
weights, and its data. Lesion and landscape studies start here.

Reports read only the run directory: spec.yaml says what the net is, checkpoint.pt holds
the weights of the last completed step. Everything the user can get wrong about a run directory
(missing, no spec.yaml, no checkpoint, a corrupt or foreign checkpoint, weights that do not fit
the spec) is one `UserError` line, exit code 2.

`open_runs` is how a command opens the runs it was given (lesion, landscape, paths, eval, export,
gradnorm --responses): every directory checked before any work, then threads, device, weights.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from .. import data as data_mod
from ..errors import UserError
from ..model import build_model
from .. import spec as spec_mod
from ..training import cpu_threads
from ..spec import Spec, parse_set
from ..training import checkpoint as ckpt
from ..runs.files import CHECKPOINT, SPEC
from ..runs.reader import spec_as_written
from ..training.runtime import analysis_runtime

# What an analysis may change in a trained run's data section: where the files are, whether to
# fetch them, how much of the test split to read. Everything else (splits, subsets of the training
# images, synthetic parameters) would change which images set the normalisation the net was trained with.
DATA_FREE = ("data.dir", "data.download", "data.test_subset", "data.workers", "data.image_size")


@dataclass
class Trained:
    path: Path
    spec: Spec
    model: torch.nn.Module  # eval mode, on `device`
    data: Any  # data.Data
    device: torch.device
    iteration: int | None = None  # the checkpoint's training iteration

    @property
    def residual(self) -> bool:
        return self.spec.model.shortcut.kind != "none"

    @property
    def label(self) -> str:
        return run_label(self.spec)


def run_label(spec: Spec) -> str:
    """He 2016a names: plain-34 / ResNet-34; other shortcuts (He 2016b Table 1) by their registry name.
    Family vit: ViT-12 / plain-ViT-12 / rezero-ViT-12, its depth in blocks."""
    m = spec.model
    kind = m.shortcut.kind
    base = "plain" if kind == "none" else "ResNet" if kind == "identity" else kind
    if m.family == "vit":
        base = "ViT" if kind == "identity" else f"{base}-ViT"
    label = f"{base}-{m.depth}"
    return label if m.unit == "original" else f"{label} ({m.unit})"


def check_dir(path: str | Path) -> Path:
    """The checks every analysis shares: the directory exists and holds a spec."""
    p = Path(path)
    if not p.exists():
        raise UserError(f"{p}: no such run directory")
    if not p.is_dir():
        raise UserError(f"{p}: not a run directory (a file; give the directory that holds {SPEC})")
    if not (p / SPEC).is_file():
        raise UserError(f"{p}: not a run directory (no {SPEC}; train one with `resnet train ... --out {p}`)")
    return p


def load_spec(path: str | Path, data_sets: Sequence[str] = ()) -> Spec:
    """The run's resolved spec; `data_sets`: `--set data.KEY=VALUE` items among DATA_FREE (to read
    the same data from elsewhere), validated as the spec's own fields are."""
    p = check_dir(path)
    for item in data_sets:
        key, _ = parse_set(item)
        if key not in DATA_FREE:
            raise UserError(f"--set {key}: a trained run keeps its data splits and normalisation; "
                            f"only {', '.join(DATA_FREE)} may change")
    return spec_mod.load(spec_as_written(p), sets=data_sets, name=str(p / SPEC))


def pick_device(name: str) -> torch.device:
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if name.startswith("cuda") and not torch.cuda.is_available():
        raise UserError(f"--device {name}: no CUDA device is available; use cpu or auto")
    try:
        return torch.device(name)
    except RuntimeError:
        raise UserError(f"--device {name}: not a device; use auto, cpu, cuda or cuda:N") from None


def load_run(path: str | Path, device: str | torch.device = "cpu", data_sets: Sequence[str] = ()) -> Trained:
    """Spec -> model -> checkpoint weights (strict) -> data. The model comes back in eval mode:
    every analysis here evaluates with BN's running statistics, as at test time. `data_sets`: see
    `load_spec`."""
    p = check_dir(path)
    spec = load_spec(p, data_sets)
    if not (p / CHECKPOINT).is_file():
        raise UserError(f"{p}: no {CHECKPOINT} (the run has not finished an epoch yet, or it was removed)")
    dev = device if isinstance(device, torch.device) else pick_device(device)
    state = ckpt.load(p / CHECKPOINT)
    weights = state.get("model")
    if not isinstance(weights, dict):
        raise UserError(f"{p / CHECKPOINT}: holds no model weights")
    loaded = data_mod.load(spec.data)
    model = build_model(spec.model, loaded.in_channels, spec.model.num_classes or loaded.num_classes)
    ckpt.load_weights(model, weights, str(p / CHECKPOINT),
                      f"{p / SPEC} describes another net (edited?); restore the spec it was trained with")
    model.to(dev).eval()
    runtime_for(dev)  # fp32 without TF32 on CUDA for every analysis of the run (landscape, responses, lesion)
    progress = state.get("progress")
    iteration = progress.get("iteration") if isinstance(progress, dict) else None
    return Trained(path=p, spec=spec, model=model, data=loaded, device=dev, iteration=iteration)


def open_runs(paths: Sequence[str | Path], device: str | torch.device = "auto", threads: int | None = None,
              data_sets: Sequence[str] = (),
              before: Callable[[list[Spec]], None] | None = None) -> list[Trained]:
    """The trained runs in `paths`, opened for analysis, in four steps so that bad input costs no work:
    1. every directory and its spec is checked (all of them before anything loads);
    2. `before(specs)`: the command's own checks of its request (a figure path, a split) that need
       the specs but no weights;
    3. CPU threads: `threads`, or the first run's run.threads when None (an analysis runs as its run
       trained; auto: for the machine as it is now); 0 leaves torch's default. Then the device: auto, cpu, cuda or cuda:N;
    4. each run's model with its checkpoint's weights, and its data (`load_run`)."""
    specs = [load_spec(p, data_sets) for p in paths]
    if before is not None:
        before(specs)
    n = cpu_threads.count(specs[0].run.threads if threads is None else threads)
    if n:
        torch.set_num_threads(n)
    dev = device if isinstance(device, torch.device) else pick_device(device)
    return [load_run(p, dev, data_sets) for p in paths]


def runtime_for(device: torch.device):
    """Analyses run in fp32 (a landscape in bf16 would be bf16 rounding noise) and NCHW."""
    return analysis_runtime(device)
