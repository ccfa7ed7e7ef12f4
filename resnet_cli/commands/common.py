"""Flags shared by the commands that build a spec, and how they map onto spec keys.

Every flag is sugar for a dotted key, so flags, `--set` and YAML go through one validation.
"""

from __future__ import annotations

from typing import Annotated, Any, Optional

import typer

from .. import output
from .. import spec as spec_mod
from ..errors import UserError
from ..spec import Spec
from ..spec.datasets import DATASETS

SpecArg = Annotated[Optional[str], typer.Argument(help="YAML spec file, or the name of a bundled config (see `resnet configs`).")]
Depth = Annotated[Optional[int], typer.Option("--depth", help="model.depth: 6n+2 basic / 9n+2 bottleneck (CIFAR), 18..200 (ImageNet).")]
Preact = Annotated[bool, typer.Option("--preact", help="model.unit=full_preact (He 2016b).")]
Dataset = Annotated[Optional[str], typer.Option("--dataset", help=f"data.dataset: {', '.join(DATASETS.names())} (imagenet also means model.family=imagenet unless the spec names one).")]
DataDir = Annotated[Optional[str], typer.Option("--data-dir", help="data.dir: where the dataset lives.")]
Epochs = Annotated[Optional[int], typer.Option("--epochs", help="optim.epochs (milestones reset to 50%/75%).")]
Iters = Annotated[Optional[int], typer.Option("--iters", help="optim.iters (milestones reset to 50%/75%).")]
BatchSize = Annotated[Optional[int], typer.Option("--batch-size", help="optim.batch_size.")]
Lr = Annotated[Optional[float], typer.Option("--lr", help="optim.lr.")]
Seed = Annotated[Optional[int], typer.Option("--seed", help="run.seed.")]
Device = Annotated[Optional[str], typer.Option("--device", help="run.device: auto, cpu, cuda, cuda:N.")]
def thread_count(value: str) -> int | str:
    """`--threads auto` or a whole number (0: torch's default, every core)."""
    if value == "auto":
        return value
    if not str(value).isdigit():
        raise typer.BadParameter(f"{value!r} is neither auto nor a number of threads (0: every core)")
    return int(value)


Threads = Annotated[Optional[str], typer.Option("--threads", parser=thread_count, metavar="auto|N", help="run.threads: auto (the default: fewer threads where other processes hold cores, chosen at start and at each epoch), N, or 0 (torch's default, every core). Pin N for bitwise repeats.")]
# Commands that analyse trained runs: the thread count the run trained with, unless told otherwise.
RunThreads = Annotated[Optional[int], typer.Option("--threads", min=0, help="CPU threads (default: the run's run.threads; 0: torch's default).")]
Out = Annotated[Optional[str], typer.Option("--out", help="run.out: the run directory.")]
Set = Annotated[Optional[list[str]], typer.Option("--set", help="Any spec field: --set optim.weight_decay=5e-4 (repeatable).")]
# Commands that read a trained run: only the data keys that keep its splits and normalisation.
DataSet = Annotated[Optional[list[str]], typer.Option("--set", help="The run's data read from elsewhere: data.dir, data.download, data.test_subset, data.workers or data.image_size (repeatable).")]
# `--stack [K]` (train --seeds, ablate): a bare `--stack` arrives as `--stack=all` (cli.BARE_VALUES).
Stack = Annotated[Optional[str], typer.Option("--stack", metavar="[K]", help="Train the seeds of one spec (ablate: of each row) as one stacked net in one process, at most K in a stack (bare --stack: all of them); docs/train.md, Several seeds.")]


def stack_cap(text: str | None) -> int:
    """`--stack` as the most seeds a stack may hold: 0 without --stack, a large number for all."""
    if text is None:
        return 0
    if text == "all":
        return 1 << 30
    if not text.isdigit() or int(text) < 1:
        from ..errors import UserError

        raise UserError(f"--stack {text}: expected a number of seeds (1 or more), or --stack alone for all of them")
    return int(text)


Json = Annotated[bool, typer.Option("--json", help="JSON lines on stdout (automatic when stdout is not a terminal).")]
StudyFormat = Annotated[Optional[output.Format], typer.Option(
    "--format", case_sensitive=False,
    help="table (a terminal's default), json (the default when piped), csv (one line per row; with --pairs, per "
         "claim and pair), markdown (the docs' table and reading) or latex (a booktabs table).")]
Pairs = Annotated[bool, typer.Option("--pairs", help="With --format csv: one line per claim and exploratory pair "
                                                     "instead of one per row.")]
OutputFile = Annotated[Optional[str], typer.Option(
    "--output", "-o", metavar="FILE", help="Write the csv, markdown or latex document to FILE instead of stdout "
                                           "(atomically: a temporary file beside it, then a rename).")]


def text_options(fmt: output.Format, pairs: bool, output_file: str | None) -> None:
    """--pairs and --output, checked before any work: each needs its format, --output a writable file."""
    if pairs and fmt is not output.Format.CSV:
        raise UserError("--pairs: one line per claim and pair is a csv layout; give --format csv")
    if output_file is not None:
        if fmt not in output.TEXT_FORMATS:
            raise UserError(f"--output {output_file}: writes a csv, markdown or latex document; give --format "
                            "csv, markdown or latex")
        output.check_file(output_file)


def flag_overrides(*, depth=None, preact=False, dataset=None, data_dir=None, epochs=None, iters=None,
                   batch_size=None, lr=None, seed=None, device=None, threads=None, out=None) -> list[tuple[str, Any]]:
    o: list[tuple[str, Any]] = []
    if depth is not None:
        o.append(("model.depth", depth))
    if preact:
        o.append(("model.unit", "full_preact"))
    if dataset is not None:
        o.append(("data.dataset", dataset))
    if data_dir is not None:
        o.append(("data.dir", data_dir))
    if epochs is not None and iters is not None:
        from ..errors import UserError

        raise UserError("--epochs and --iters are exclusive: give one length")
    if epochs is not None:
        o += [("optim.epochs", epochs), ("optim.iters", None), ("optim.milestones", None)]
    if iters is not None:
        o += [("optim.iters", iters), ("optim.epochs", None), ("optim.milestones", None)]
    if batch_size is not None:
        o.append(("optim.batch_size", batch_size))
    if lr is not None:
        o.append(("optim.lr", lr))
    if seed is not None:
        o.append(("run.seed", seed))
    if device is not None:
        o.append(("run.device", device))
    if threads is not None:
        o.append(("run.threads", threads))
    if out is not None:
        o.append(("run.out", out))
    return o


def rerun(words: list[str]) -> str:
    """The command that resumes an interrupted sweep, to paste as it is: `resnet` and the flags that
    make the same plan, its output folder named (a default one moves with the recipe)."""
    import shlex

    return shlex.join(["resnet", *words])


def print_lines(lines: list[str]) -> None:
    """Lines on stdout, each flushed (`--list` into a pipe); a reader that leaves stops us quietly."""
    from ..errors import PipeClosed

    try:
        for line in lines:
            print(line, flush=True)
    except BrokenPipeError:
        raise PipeClosed() from None


def set_threads(threads: int | str | None, default: int | str = 0) -> None:
    """Analyses of trained runs have no spec of their own to carry run.threads: apply --threads (or
    the run's own setting) here, before any tensor work. 0 leaves torch's default."""
    from ..training import cpu_threads

    n = cpu_threads.count(default if threads is None else threads)
    if n:
        import torch

        torch.set_num_threads(n)


def build_spec(spec_file: str | dict | None, sets: list[str] | None, name: str | None = None, **flags: Any) -> Spec:
    """A spec file (or a run's spec tree, named `name` in errors), then the flags, then `--set`."""
    return spec_mod.load(spec_file, flag_overrides(**flags), sets or [], name=name)
