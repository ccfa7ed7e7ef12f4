"""Checkpoints that survive a kill: atomic writes, only tensors and plain values, strict loads.

`torch.save` straight onto the target, killed mid-write, leaves an unloadable file and has already
destroyed the previous one (kill -9 mid-write, reproduced with the pinned torch). We write a temporary file in the same directory, fsync it,
and `os.replace` it over the old one: at every instant the path holds a complete checkpoint.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
import zipfile
from pathlib import Path
from typing import Any

import torch

from ..errors import UserError, writing

FORMAT = "resnet-cli/checkpoint-v1"
TMP_PREFIX = ".tmp-ckpt-"


def save(obj: dict[str, Any], path: Path) -> None:
    path = Path(path)
    with writing(path):  # a full disk: one line naming the checkpoint; the previous one stays
        fd, tmp = tempfile.mkstemp(prefix=TMP_PREFIX, dir=path.parent)
        with writing(path, tmp):
            with os.fdopen(fd, "wb") as f:
                out = _Recording(f)
                try:
                    torch.save({"format": FORMAT, **obj}, out)
                except RuntimeError:
                    if out.error is not None:  # the write's own error (ENOSPC), which torch's message lost
                        raise out.error from None
                    raise
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, path)
    _fsync_dir(path.parent)


class _Recording:
    """The file torch.save writes into, keeping the OSError of a failed write: torch replaces it by
    "[enforce fail at inline_container.cc] unexpected pos" and drops the errno, so a full disk would
    read as a bug."""

    def __init__(self, f):
        self.f, self.error = f, None

    def write(self, data) -> int:
        try:
            return self.f.write(data)
        except OSError as exc:
            self.error = exc
            raise

    def flush(self) -> None:
        self.f.flush()


def clean_orphans(directory: Path) -> list[Path]:
    """Temporary files left by a kill during a write are useless; remove them at start-up."""
    removed = []
    for p in Path(directory).glob(TMP_PREFIX + "*"):
        with _suppress():
            p.unlink()
            removed.append(p)
    return removed


def load(path: Path, map_location: str | torch.device = "cpu") -> dict[str, Any]:
    path = Path(path)
    if not path.is_file():
        raise UserError(f"{path}: no checkpoint there")
    try:
        obj = torch.load(path, map_location=map_location, weights_only=True)
    except Exception as exc:  # truncated zip, random bytes, a pickle of arbitrary objects...
        # Our own words, whole: torch's messages run to paragraphs of advice (`weights_only=False`)
        # that is wrong for a file that is not one of ours.
        if zipfile.is_zipfile(path) and ("weights only" in str(exc).lower() or "weights_only" in str(exc)):
            raise UserError(f"{path}: not a resnet-cli checkpoint: it holds objects other than tensors and plain "
                            "values, and loading it would run arbitrary code") from None
        raise UserError(f"{path}: not a loadable checkpoint: truncated, corrupt, or not written by torch.save "
                        f"({type(exc).__name__}); resume from another run or start a new one") from None
    if not isinstance(obj, dict) or obj.get("format") != FORMAT:
        raise UserError(f"{path}: not a resnet-cli checkpoint (expected format {FORMAT})")
    return obj


def rng_state(device: torch.device) -> dict[str, Any]:
    """This process's global RNG streams (dropout, the dropout shortcut): the CPU's, Python's and
    the run device's own CUDA stream only. Data order and augmentation are drawn from generators
    seeded by (seed, epoch, batch), so they need no saved state."""
    import random

    state = {"torch": torch.get_rng_state(), "python": _plain(random.getstate())}
    if device.type == "cuda":
        state["cuda"] = torch.cuda.get_rng_state(device)
    return state


def set_rng_state(state: dict[str, Any], device: torch.device) -> None:
    """Restore what `rng_state` saved onto this process's device. A machine may see fewer GPUs than
    the one that saved (and a saved CPU run resumes on a GPU): only the run device's stream is set."""
    import random

    torch.set_rng_state(state["torch"])
    random.setstate(_tuple(state["python"]))
    cuda = state.get("cuda")
    if isinstance(cuda, list):  # checkpoints before per-device states held every GPU's
        cuda = cuda[device.index or 0] if device.type == "cuda" and (device.index or 0) < len(cuda) else None
    if cuda is not None and device.type == "cuda":
        torch.cuda.set_rng_state(cuda, device)


def rank_rng_state(saved: dict[str, Any] | list[dict[str, Any]], rank: int) -> dict[str, Any] | None:
    """One rank's entry of a checkpoint's RNG states (a list, one per rank; older checkpoints: one
    dict). None for a rank the saving run did not have (resumed with more processes)."""
    states = [saved] if isinstance(saved, dict) else list(saved)
    return states[rank] if rank < len(states) else None


def _plain(x):
    return [_plain(v) for v in x] if isinstance(x, (tuple, list)) else x


def _tuple(x):
    return tuple(_tuple(v) for v in x) if isinstance(x, list) else x


def _fsync_dir(directory: Path) -> None:
    with _suppress():
        fd = os.open(directory, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def _suppress():
    return contextlib.suppress(OSError)


def load_weights(model: torch.nn.Module, weights: dict[str, Any], where: str, fix: str) -> None:
    """`model.load_state_dict(weights, strict=True)`, with a refusal in one line that names the
    first difference (torch's message starts "Error(s) in loading state_dict for ResNet:" and puts
    every key on later lines) and what to do about it."""
    mine = model.state_dict()
    missing = [k for k in mine if k not in weights]
    unexpected = [k for k in weights if k not in mine]
    shapes = [k for k in mine if k in weights and hasattr(weights[k], "shape") and weights[k].shape != mine[k].shape]
    if not (missing or unexpected or shapes):
        try:
            model.load_state_dict(weights, strict=True)
            return
        except (RuntimeError, ValueError) as exc:
            raise UserError(f"{where}: weights do not fit this net: {str(exc).splitlines()[-1].strip()[:160]}; {fix}") from None

    def more(keys: list[str]) -> str:
        return f" (and {len(keys) - 1} more)" if len(keys) > 1 else ""

    parts = []
    if shapes:
        k = shapes[0]
        parts.append(f"'{k}' is {list(weights[k].shape)} in the checkpoint, {list(mine[k].shape)} in this net{more(shapes)}")
    if missing:
        parts.append(f"this net's '{missing[0]}'{more(missing)} missing from the checkpoint")
    if unexpected:
        parts.append(f"the checkpoint's '{unexpected[0]}'{more(unexpected)} not in this net")
    raise UserError(f"{where}: weights do not fit this net: {'; '.join(parts)}; {fix}")
