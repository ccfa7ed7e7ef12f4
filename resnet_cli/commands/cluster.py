"""`--launcher slurm` for every command that can submit (`resnet ablate`, `resnet degrade`): its
options, declared once here (`@options`), and what they do: submit the pending runs as one job
array (sweep/slurm.py), print the sbatch script (--dry-run), or wait and print the final
table as a local run does (--wait)."""

from __future__ import annotations

import enum
import functools
import inspect
from dataclasses import asdict, dataclass
from typing import Annotated, Any, Callable, Optional

import typer
from rich.markup import escape

from .. import errors, output
from ..errors import UserError
from ..results import report
from ..sweep import engine as sweep
from ..sweep import slurm


class Launcher(str, enum.Enum):
    local = "local"
    slurm = "slurm"


# The launcher's flags (rich_help_panel keeps them together in --help), declared on a command by @options.
_P = "SLURM (--launcher slurm)"
LauncherOpt = Annotated[Launcher, typer.Option("--launcher", help="local: run here (--jobs); slurm: submit the "
                                               "pending runs as one SLURM job array (docs/cluster.md).")]
ClusterFile = Annotated[Optional[str], typer.Option("--cluster", help="A YAML file with a `slurm:` section "
                                                    "(the settings below); flags override it.", rich_help_panel=_P)]
Partition = Annotated[Optional[str], typer.Option("--partition", help="sbatch --partition.", rich_help_panel=_P)]
Time = Annotated[Optional[int], typer.Option("--time", min=1, help="Minutes per task (default 240); past it the run "
                                             "checkpoints and requeues.", rich_help_panel=_P)]
Cpus = Annotated[Optional[int], typer.Option("--cpus-per-run", min=1, help="CPUs per task (default 1), "
                                             "also the run's threads.", rich_help_panel=_P)]
Gpus = Annotated[Optional[int], typer.Option("--gpus-per-run", min=0, help="GPUs per task (default 0).",
                                             rich_help_panel=_P)]
Mem = Annotated[Optional[str], typer.Option("--mem", help="Memory per task, e.g. 16G.", rich_help_panel=_P)]
Account = Annotated[Optional[str], typer.Option("--account", help="sbatch --account.", rich_help_panel=_P)]
Qos = Annotated[Optional[str], typer.Option("--qos", help="sbatch --qos.", rich_help_panel=_P)]
Parallel = Annotated[Optional[int], typer.Option("--array-parallelism", min=1, help="Tasks running at once "
                                                 "(default 256).", rich_help_panel=_P)]
Sbatch = Annotated[Optional[list[str]], typer.Option("--sbatch", help="An extra sbatch option, e.g. "
                                                     "--sbatch=--constraint=a100 (repeatable).", rich_help_panel=_P)]
DryRun = Annotated[bool, typer.Option("--dry-run", help="Print the sbatch script and submit nothing.",
                                      rich_help_panel=_P)]
Wait = Annotated[bool, typer.Option("--wait", help="Wait for the array and print the table as a local run does.",
                                    rich_help_panel=_P)]


@dataclass(frozen=True)
class Request:
    """What the launcher's flags asked for: the sbatch settings (`slurm_flags`, over a --cluster file),
    --dry-run and --wait."""

    launcher: Launcher = Launcher.local
    cluster_file: str | None = None
    partition: str | None = None
    time: int | None = None  # minutes per task
    cpus_per_run: int | None = None
    gpus_per_run: int | None = None
    mem: str | None = None
    account: str | None = None
    qos: str | None = None
    array_parallelism: int | None = None
    sbatch: list[str] | None = None
    dry_run: bool = False
    wait: bool = False

    @property
    def slurm_flags(self) -> dict[str, Any]:
        """The settings given as flags (slurm.settings lays them over the --cluster file's)."""
        return {k: v for k, v in asdict(self).items() if k not in ("launcher", "cluster_file", "dry_run", "wait")}

    @property
    def asked(self) -> bool:
        """Whether any launcher flag was given (a SLURM flag without --launcher slurm is refused in `run`)."""
        return (self.launcher is not Launcher.local or self.dry_run or self.wait or self.cluster_file is not None
                or any(v not in (None, []) for v in self.slurm_flags.values()))


# Request's fields as command options: (parameter name, its flag's declaration, default).
_OPTIONS = (("launcher", LauncherOpt, Launcher.local), ("cluster_file", ClusterFile, None),
            ("partition", Partition, None), ("time", Time, None), ("cpus_per_run", Cpus, None),
            ("gpus_per_run", Gpus, None), ("mem", Mem, None), ("account", Account, None), ("qos", Qos, None),
            ("array_parallelism", Parallel, None), ("sbatch", Sbatch, None), ("dry_run", DryRun, False),
            ("wait", Wait, False))


def options(fn: Callable) -> Callable:
    """Give a command the launcher's options, declared once here: `fn` takes one keyword
    `cluster: Request`, and its --help lists the options under their own panel."""
    own = inspect.signature(fn, eval_str=True)
    params = [p for p in own.parameters.values() if p.name != "cluster"]
    params += [inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, annotation=ann, default=default)
               for name, ann, default in _OPTIONS]

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        request = Request(**{name: kwargs.pop(name, default) for name, _, default in _OPTIONS})
        return fn(*args, cluster=request, **kwargs)

    wrapper.__signature__ = own.replace(parameters=params)  # what typer reads the options from
    return wrapper


def run(plan, request: Request, json_: bool, final: Callable[[Any, dict[str, str]], None]) -> None:
    """Submit (or --dry-run, or --wait for) the plan's pending runs. `final(submitted, failed)`:
    what --wait prints once the array is done, the command's own report (`resnet ablate`: the
    study's table; `resnet degrade`: its grid), `failed` naming each run that did not finish."""
    launcher, cluster, flags = request.launcher, request.cluster_file, request.slurm_flags
    dry_run, wait = request.dry_run, request.wait
    if launcher is Launcher.local:
        given = [name for name, on in (("--dry-run", dry_run), ("--wait", wait), ("--cluster", cluster is not None))
                 if on] + [f"--{k.replace('_', '-')}" for k, v in flags.items() if v not in (None, [])]
        raise UserError(f"{given[0]} is for --launcher slurm")
    s = slurm.settings(cluster, flags)
    todo = sweep.triage(plan)  # the runs the array would take: todo, less the running ones
    console = output.stderr()
    for key, exc in todo.refused.items():
        console.print(f"[red]run {key} not submitted[/]: {escape(exc.message)}")
    if dry_run:
        if json_:
            output.emit({"event": "dry_run", "runs": [r.key for r in todo.todo], "script": slurm.script(plan, s, len(todo.todo))})
        else:
            print(slurm.script(plan, s, max(1, len(todo.todo))), end="", flush=True)
        console.print(f"{len(todo.todo)} run(s) to submit, {len(todo.finished)} finished, {len(todo.running)} running")
        return
    done = [0]

    def submitted(sub, running) -> None:
        console.print(escape(f"{plan.title}: submitted job array {sub.job_id} of {len(sub.runs)} run(s) "
                             f"({len(todo.finished)} finished, {len(running)} running, not submitted); "
                             f"logs in {sub.folder.parent}; watch: resnet report {plan.results}"))
        if json_ and not wait:
            output.emit({"event": "submitted", "job_id": sub.job_id, "runs": [r.key for r in sub.runs],
                         "logs": str(sub.folder.parent), "results": str(plan.results)})

    def progress(run, outcome) -> None:
        if outcome is not None and run.key not in todo.refused:  # a task left the queue
            done[0] += 1
            rec = report.seed_result(run.path)
            console.print(escape(f"[{done[0]}/{len(array.submitted.runs)}] {run.path.name}: "
                                 f"{rec.status if rec else 'no run'}"))

    array = slurm.Slurm(s, wait, on_submit=submitted)
    result = sweep.execute(plan, notify=progress, launcher=array)
    if array.submitted is None:
        console.print(f"nothing to submit: {len(todo.finished)} run(s) finished, {len(array.running)} running")
    if not wait:
        if todo.refused:
            raise typer.Exit(errors.USAGE)
        return
    if result.signum is not None:  # Ctrl-C while waiting: the array is SLURM's, it goes on
        console.print(f"stopped waiting; the array goes on: resnet report {plan.results}")
        raise typer.Exit(errors.INTERRUPTED_INT)
    final(array.submitted, {key: o.message for key, o in result.outcomes.items() if o.status == "error"})
