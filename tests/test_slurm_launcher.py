"""`--launcher slurm` without a cluster: the sbatch script --dry-run prints, the cluster settings'
strict validation (one line, exit 2), the missing extra, and what `resnet report` reads from a run
directory while an array runs. The runs themselves are tested against a real SLURM in test_slurm.py."""

import fcntl
import json
import os
import re
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from resnet_cli.cli import app
from resnet_cli.results import report

pytest.importorskip("submitit")


def cli(*args):
    return CliRunner().invoke(app, [str(a) for a in args])


def test_dry_run_prints_one_array_of_the_pending_runs_with_the_settings(in_tmp):
    listed = cli("ablate", "shortcut", "--preset", "quick", "--list")
    assert listed.exit_code == 0, listed.stderr
    n = len(listed.stdout.splitlines())  # one command per run: the array's size
    (in_tmp / "cluster.yaml").write_text("slurm:\n  partition: gpu\n  time: 600\n  account: lab\n"
                                         "  setup: ['module load cuda/12.4']\n")
    r = cli("ablate", "shortcut", "--preset", "quick", "--launcher", "slurm", "--dry-run", "--cluster", "cluster.yaml",
            "--time", "60", "--gpus-per-run", "1", "--mem", "16G", "--array-parallelism", "4",
            "--sbatch=--constraint=a100")
    assert r.exit_code == 0, r.stderr
    script = r.stdout
    assert script.startswith("#!/bin/bash")
    sbatch = dict(re.findall(r"^#SBATCH --([a-z-]+)=(.*)$", script, re.M))
    assert sbatch["array"] == f"0-{n - 1}%4"
    assert sbatch["time"] == "60"  # the flag over the file
    assert sbatch["partition"] == "gpu" and sbatch["account"] == "lab"  # the file's
    assert sbatch["gpus-per-node"] == "1" and sbatch["mem"] == "16G" and sbatch["constraint"] == "a100"
    assert sbatch["signal"] == "USR2@120"  # a signal before the kill: the run checkpoints and requeues
    assert "module load cuda/12.4" in script and "-m submitit.core._submit" in script
    assert f"{n} run(s) to submit" in r.stderr
    assert not (in_tmp / "runs").exists()  # a dry run writes nothing


def test_degrade_submits_its_grid_as_one_array_too(in_tmp):
    # resnet degrade runs on the same sweep engine, so the same launcher: one task per run --list prints.
    grid = ["degrade", "--depths", "8", "--seeds", "0..2", "--out", "g"]
    listed = cli(*grid, "--list")
    assert listed.exit_code == 0, listed.stderr
    n = len(listed.stdout.splitlines())
    assert n == 6  # plain and residual at 8 layers, 3 seeds
    r = cli(*grid, "--launcher", "slurm", "--dry-run", "--time", "30")
    assert r.exit_code == 0, r.stderr
    sbatch = dict(re.findall(r"^#SBATCH --([a-z-]+)=(.*)$", r.stdout, re.M))
    assert sbatch["array"].startswith(f"0-{n - 1}") and sbatch["time"] == "30" and sbatch["job-name"] == "resnet-degrade"
    assert f"{n} run(s) to submit" in r.stderr
    assert not (in_tmp / "g").exists()  # a dry run writes nothing


@pytest.mark.parametrize("file, flags, expected", [
    ("slurm:\n  partiton: gpu\n", [], "unknown key 'slurm.partiton'; did you mean 'slurm.partition'?"),
    ("slurm:\n  time: 0\n", [], "slurm.time: Input should be greater than or equal to 1"),
    ("cluster:\n  time: 5\n", [], "expected one top-level key, slurm:"),
    (None, ["--mem", "16 GB"], "slurm.mem: String should match pattern"),
    (None, ["--sbatch", "constraint=a100"], "expected a long sbatch option"),
])
def test_bad_cluster_settings_are_one_line_exit_2(in_tmp, file, flags, expected):
    args = ["ablate", "shortcut", "--preset", "quick", "--launcher", "slurm", "--dry-run", *flags]
    if file is not None:
        (in_tmp / "c.yaml").write_text(file)
        args += ["--cluster", "c.yaml"]
    r = cli(*args)
    assert r.exit_code == 2, (r.stdout, r.stderr)
    assert len(r.stderr.strip().splitlines()) == 1 and expected in r.stderr, r.stderr


def test_without_submitit_the_launcher_names_the_extra(in_tmp, monkeypatch):
    monkeypatch.setitem(sys.modules, "submitit", None)  # import submitit raises ImportError
    r = cli("ablate", "shortcut", "--preset", "quick", "--launcher", "slurm", "--dry-run")
    assert r.exit_code == 2
    assert r.stderr.strip().splitlines() == [
        "resnet: error: --launcher slurm needs submitit: pip install 'resnet-cli[slurm]' (or pip install submitit)"]


@pytest.mark.parametrize("flag", [["--dry-run"], ["--wait"], ["--partition", "gpu"]])
def test_cluster_flags_without_the_slurm_launcher_are_refused(in_tmp, flag):
    r = cli("ablate", "shortcut", "--preset", "quick", *flag)
    assert r.exit_code == 2 and f"{flag[0]} is for --launcher slurm" in r.stderr, r.stderr


def test_report_tells_pending_running_and_failed_from_the_directory(tmp_path):
    run = tmp_path / "01-a-s0"
    run.mkdir()
    (run / "study.json").write_text(json.dumps({"study": "tiny", "index": 1, "row": "a", "seed": 0}))
    assert report.seed_result(run).status == "pending"  # submitted, not started
    fd = os.open(run / ".lock", os.O_RDWR | os.O_CREAT)
    fcntl.flock(fd, fcntl.LOCK_EX)  # what runs/writer.py holds while a task has the run open
    try:
        assert report.seed_result(run).status == "running"
    finally:
        os.close(fd)
    assert report.seed_result(run).status == "pending"  # the holder died: its lock went with it
    (run / "slurm.json").write_text(json.dumps({"job": "7_0", "state": "failed", "message": "boom",
                                                "log": "/logs/7_0_0_log.err"}))
    rec = report.seed_result(run)
    assert rec.status == "error" and "7_0" in rec.message and "/logs/7_0_0_log.err" in rec.message


def test_the_launcher_options_are_declared_once_and_every_submitting_command_has_them():
    """`ablate` and `degrade` declared the same 13 SLURM options each; now commands/cluster.py does, once."""
    import typer.main

    from resnet_cli.cli import app
    from resnet_cli.commands import ablate, degrade  # noqa: F401 (registers them)

    group = typer.main.get_command(app)
    flags = {name: {opt for p in group.commands[name].params for opt in p.opts} for name in ("ablate", "degrade")}
    wanted = {"--launcher", "--cluster", "--partition", "--time", "--cpus-per-run", "--gpus-per-run", "--mem",
              "--account", "--qos", "--array-parallelism", "--sbatch", "--dry-run", "--wait"}
    assert wanted <= flags["ablate"] and wanted <= flags["degrade"]
    package = Path(__file__).resolve().parents[1] / "resnet_cli"
    declaring = [p.name for p in package.rglob("*.py") if '"--partition"' in p.read_text()]
    assert declaring == ["cluster.py"]


def test_what_submitit_is_handed_equals_the_cluster_file(in_tmp, monkeypatch):
    """Checked without a cluster: a stand-in for submitit records the executor's arguments, and each
    is compared with the cluster file read here with yaml (not through SlurmSettings): the requeue
    budget (submitit's max_num_timeout), the time limit, the resources and the array's size."""
    import types

    import yaml

    from resnet_cli.sweep import plan as plan_mod, slurm

    seen: dict = {}

    class Executor:
        def __init__(self, folder, max_num_timeout):
            seen["folder"], seen["max_num_timeout"] = folder, max_num_timeout

        def update_parameters(self, **params):
            seen["params"] = params

        def map_array(self, fn, items):
            seen["items"] = list(items)
            return [types.SimpleNamespace(job_id=f"42_{i}", paths=types.SimpleNamespace(stderr=f"e{i}"))
                    for i in range(len(seen["items"]))]

    import submitit

    fake = types.SimpleNamespace(SlurmExecutor=Executor, helpers=submitit.helpers, core=submitit.core)
    monkeypatch.setattr(slurm, "_submitit", lambda: fake)
    text = ("slurm:\n  partition: long\n  time: 720\n  cpus_per_run: 4\n  gpus_per_run: 1\n  mem: 32G\n"
            "  requeues: 5\n  array_parallelism: 7\n  signal_delay_s: 300\n  sbatch: ['--constraint=h100']\n")
    (in_tmp / "cluster.yaml").write_text(text)
    want = yaml.safe_load(text)["slurm"]
    plan = plan_mod.plan("projection", "quick", results=in_tmp / "res")
    sub = slurm.submit(plan, slurm.settings("cluster.yaml", {}), plan.runs)
    assert seen["max_num_timeout"] == want["requeues"] == 5  # not one more, not one fewer
    p = seen["params"]
    assert (p["time"], p["cpus_per_task"], p["gpus_per_node"], p["mem"], p["partition"]) == (
        want["time"], want["cpus_per_run"], want["gpus_per_run"], want["mem"], want["partition"])
    assert p["array_parallelism"] == want["array_parallelism"] and p["signal_delay_s"] == want["signal_delay_s"]
    assert p["additional_parameters"] == {"constraint": "h100"}
    assert len(seen["items"]) == len(plan.runs) == 4 * 10 and sub.job_id == "42"  # one task per run
