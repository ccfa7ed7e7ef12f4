"""Write the measured tables and figures of docs/ from the JSON lines the `resnet` commands print.

    python tools/docs_tables.py quick      # `make docs`: digits runs, degrade, gradnorm, plot, lesion, landscape
    python tools/docs_tables.py studies    # `make docs-studies`: the quick CNN ablation studies, the benchmarks
    python tools/docs_tables.py fashion    # `make docs-fashion`: He 2016a Fig. 1/6 on Fashion-MNIST, its lesions and landscapes
    python tools/docs_tables.py fashion-studies  # `make docs-fashion-studies`: Tables 1, 2 and depth on Fashion-MNIST
    python tools/docs_tables.py usage      # only the `--help` texts (seconds)
    python tools/docs_tables.py render     # re-render every section from the JSON saved by earlier runs
    python tools/docs_tables.py section NAME...  # rerun the commands of the named sections only, and write them
    python tools/docs_tables.py render NAME...   # write the named sections from their saved JSON, running nothing

Each table lives in a docs page between `<!-- generated: NAME -->` and `<!-- end -->`; this script
replaces only what is between the markers, and writes beside each table the commands, the machine
and the wall time. Commands run as `python -m resnet_cli ... --json` (this interpreter); their
stdout is kept in runs/docs/json/JOB.jsonl with JOB.meta.json, so a table can be re-rendered (and
a renderer changed) without training again. Figures come from the commands' own `--out`/`--figure`.

Not part of the package: nothing under resnet_cli/ imports this file. docs_jobs.py runs one command
and keeps its output; renderers.py and renderers_studies.py are pure functions from JSON records to
markdown (tests/test_docs.py feeds them small hand-made inputs).
"""

from __future__ import annotations

import json
import re
import shutil
import sys
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

import renderers as R  # tools/renderers.py: the markdown of each table
import renderers_studies as S  # the same for resnet ablate and resnet bench
from docs_jobs import JSON_DIR, ROOT, Job, run_job, threads_of  # running one command and keeping its output

DOCS = ROOT / "docs"
FIGURES = DOCS / "figures"

MARKER = re.compile(r"(<!-- generated: (?P<name>[\w-]+) -->\n)(?P<body>.*?)(<!-- end -->)", re.S)


# --- jobs: one command each --------------------------------------------------------------------

def _fashion_run(net: str, depth: int) -> str:
    return f"{FASHION}/runs/{net}-{depth}-seed0"


def _run_dir(net: str, seed: int) -> str:
    return f"runs/docs/{net}-s{seed}"


TRAIN_NETS = {  # run name -> (config, extra flags, label)
    "plain8": ("digits/plain8", (), "plain-8"),
    "residual8": ("digits/residual8", (), "ResNet-8"),
    "plain26": ("digits/plain26", (), "plain-26"),
    "residual26": ("digits/residual26", (), "ResNet-26"),
    "plain56": ("digits/plain26", ("--depth", "56"), "plain-56"),
    "residual56": ("digits/residual26", ("--depth", "56"), "ResNet-56"),
}
TRAIN_RUNS = [(n, 0) for n in TRAIN_NETS] + [(n, s) for s in (1, 2) for n in ("plain26", "residual26")]
LESION_SEEDS = (0, 1, 2)
JACOBIAN_SEEDS = range(10)
LANDSCAPES = {"26-1d": (26, 1, 41), "26-2d": (26, 2, 21), "56-1d": (56, 1, 41), "56-2d": (56, 2, 15)}
STUDIES = ("shortcut", "activation", "activation-modern", "projection", "depth", "zero-init", "gate-bias")
# He 2016b Tables 1 and 2 and the depth study on real images (`make docs-fashion-studies`, an hour or more
# each on 2 cores): the studies' `fashion` presets, two workers of one thread each.
FASHION_STUDIES = ("shortcut", "activation", "depth")
PATHS_NETS = {"residual26pre": ("--preact",), "residual56pre": ("--depth", "56", "--preact")}  # docs/paths.md
EXPORT = "runs/docs/export"  # docs/export.md: the digits ResNet-26 in each format, format -> file name
EXPORT_FORMATS = {"torchscript": "res26.pt", "onnx": "res26.onnx", "state_dict": "res26-weights.pt"}
VIT_STUDIES = ("transformer-ln", "transformer-shortcut")  # docs/vit.md; one job at a time (one core)
# docs/normfree.md's study (Fixup, SkipInit, ReZero, stochastic depth), its table in ablate.md: two workers of one thread.
NORM_STUDIES = ("normalisation",)
# docs/bench.md, what the sized seeds cost: one quick study at its sized n (12 seeds here), each row's
# seeds stacked, against the same study at 8 seeds trained one run at a time (the docs' runs before
# the studies were sized), one after the other in one docs job. Its ResNet-110 rows are most of the
# quick studies' time.
AFFORD_STUDY = "shortcut"
# The quick studies whose claims across budgets docs/ablate.md shows (`--budget-rows not-in-order`):
# those rerun on their registered family so far, each after its own ablate-STUDY job.
BUDGET_STUDIES = ("projection",)
AFFORD_OUT = "runs/docs/afford"
REPORT_FORMATS = {"csv": ("--format", "csv"), "pairs": ("--format", "csv", "--pairs"),
                  "markdown": ("--format", "markdown"), "latex": ("--format", "latex"),
                  "runs": ("--runs", "--format", "csv")}
# docs/bench.md, threads on a shared machine: key -> (the net as the table names it, bench's spec arguments).
BENCH_THREADS = {"cifar-20": ("CIFAR ResNet-20, batch 128", ("cifar/resnet20", "--set", "data.dataset=synthetic")),
                 "digits-20": ("digits ResNet-20, batch 128 (`resnet train --dataset digits --depth 20`)",
                               ("--depth", "20", "--set", "data.dataset=digits"))}
VIT_GRADNORM = {"he": "gradnorm-vit-24.png", "trunc_normal": "gradnorm-vit-24-trunc.png"}  # init -> figure
COMMANDS = ("train", "configs", "degrade", "gradnorm", "ablate", "report", "bench", "plot", "lesion", "landscape")
# Fashion-MNIST (`make docs-fashion`, about 5 hours on 2 cores): He 2016a Fig. 1/6 on real images,
# then Li et al.'s landscapes and Veit et al.'s lesions on the grid's own run directories (seed 0).
FASHION = "runs/docs/degrade-fashion"
FASHION_16 = "runs/docs/degrade-fashion-16"  # the same residual pair at twice the budget, seed 0
# The 56-layer plane at 7x7: at one thread an 11x11 grid of that pair takes about half an hour.
FASHION_LANDSCAPES = {"56-1d": (56, 1, 41), "56-2d": (56, 2, 7), "20-1d": (20, 1, 41), "20-2d": (20, 2, 11)}
# Stacked seeds (docs/bench.md): the quick studies' digits ResNet-110 and the CIFAR ResNet-20 (on
# synthetic CIFAR-shaped images: no download), one thread, as the quick studies' workers run.
BENCH_STACK = {
    "digits-110": ("cifar/resnet110", "--set", "data.dataset=digits", "--set", "model.widths=[8,16,32]",
                   "--batch-size", "64", "--stack", "1,4,8,16"),
    "cifar-20": ("cifar/resnet20", "--set", "data.dataset=synthetic", "--stack", "1,4,8"),
}
BENCH_TRAIN = {"20": ("cifar/resnet20",), "56": ("cifar/resnet56", "--steps", "10"), "110": ("cifar/resnet110",)}


def _jobs() -> dict[str, Job]:
    jobs: list[Job] = []
    for net, seed in TRAIN_RUNS:
        config, extra, _ = TRAIN_NETS[net]
        out = _run_dir(net, seed)
        # One thread: a run repeats bitwise only at the thread count it ran with (docs/train.md), and
        # torch's default (every core) differs from machine to machine.
        jobs.append(Job(f"train-{net}-s{seed}", ("train", config, *extra, "--seed", str(seed), "--threads", "1",
                                                 "--out", out, "--json"), fresh=(out,)))
    # Seeds 100..109: the grid's claims were registered anew on 2026-12-08, after the default seeds 0..9
    # had been run; no run before the registration may decide them (docs/degrade.md).
    jobs.append(Job("degrade", ("degrade", "--seeds", "100..109", "--out", "runs/docs/degrade", "--json"),
                    fresh=("runs/docs/degrade",)))
    jobs.append(Job("gradnorm", ("gradnorm", "--out", "docs/figures/gradnorm-resnet110.png", "--json")))
    for s in JACOBIAN_SEEDS:
        jobs.append(Job(f"jacobian-s{s}", ("gradnorm", "--jacobian", "--seed", str(s), "--json")))
    jobs.append(Job("responses", ("gradnorm", "--responses", *(_run_dir(n, 0) for n in ("plain8", "residual8", "plain26",
                                                                                        "residual26")),
                                  "--out", "docs/figures/responses-digits.png", "--json")))
    jobs.append(Job("plot", ("plot", *(_run_dir(n, 0) for n in ("residual26", "plain26", "residual56", "plain56")),
                             "--out", "docs/figures/curves-digits-26-56.png", "--json")))
    for s in LESION_SEEDS:
        fig = "docs/figures/lesion-digits-26.png" if s == 0 else f"runs/docs/lesion-digits-26-s{s}.png"
        jobs.append(Job(f"lesion-26-s{s}", ("lesion", _run_dir("residual26", s), "--compare", _run_dir("plain26", s),
                                             "--out", fig, "--json")))
    jobs.append(Job("lesion-56-s0", ("lesion", _run_dir("residual56", 0), "--compare", _run_dir("plain56", 0),
                                     "--out", "docs/figures/lesion-digits-56.png", "--json")))
    for key, (depth, dims, points) in LANDSCAPES.items():
        jobs.append(Job(f"landscape-{key}", ("landscape", _run_dir(f"residual{depth}", 0), _run_dir(f"plain{depth}", 0),
                                              "--dims", str(dims), "--range", "-1", "1", "--points", str(points),
                                              "--out", f"docs/figures/landscape-digits-{key}.png", "--json")))
    # Not fresh: a rerun reuses the grid's finished runs (their resolved specs match), so the
    # landscapes below can be redrawn without training again.
    # One thread a process: these jobs are run beside others on small machines, where torch's
    # default of every core spins and runs many times slower (docs/maintainers.md).
    for net, extra in PATHS_NETS.items():  # the pre-activation twins of the digits nets above
        jobs.append(Job(f"train-{net}-s0", ("train", "digits/residual26", *extra, "--seed", "0", "--threads", "1",
                                             "--out", _run_dir(net, 0), "--json"), fresh=(_run_dir(net, 0),)))
    for depth in (26, 56):
        jobs.append(Job(f"paths-{depth}", ("paths", _run_dir(f"residual{depth}", 0), _run_dir(f"residual{depth}pre", 0),
                                           "--with-init", "--samples", "100", "--threads", "1",
                                           "--out", f"docs/figures/paths-digits-{depth}.png", "--json")))
    # Veit et al.'s 54 units at initialisation, on synthetic CIFAR-shaped images (no dataset needed);
    # 8 samples a length at batch 16 keep it to minutes on a CPU, so the window is rough.
    jobs.append(Job("paths-110-init", ("paths", "--init", "cifar/resnet110", "preact/resnet110-cifar10",
                                       "--set", "data.dataset=synthetic", "--samples", "8", "--batch-size", "16",
                                       "--threads", "1", "--out", "runs/docs/paths-110-init.png", "--json")))
    jobs.append(Job("paths-plain26", ("paths", _run_dir("plain26", 0), "--samples", "20", "--threads", "1",
                                      "--out", "runs/docs/paths-plain26.png", "--json")))
    for fmt, name in EXPORT_FORMATS.items():
        jobs.append(Job(f"export-{fmt}", ("export", _run_dir("residual26", 0), "--format", fmt,
                                          "--out", f"{EXPORT}/{fmt}/{name}", "--json"), fresh=(f"{EXPORT}/{fmt}",)))
    jobs.append(Job("degrade-vit", ("degrade", "degrade/vit-digits", "--out", "runs/docs/degrade-vit", "--threads", "1",
                                    "--json"), fresh=("runs/docs/degrade-vit",)))
    jobs.append(Job("degrade-fashion", ("degrade", "degrade/fashion-fig1", "--out", FASHION, "--threads", "1", "--json")))
    # Does twice the budget close ResNet-56's gap to ResNet-20 (docs/degrade.md)? 46 and 17
    # minutes at one thread; two processes on the one --out (--depths 56, --depths 20) use both cores.
    jobs.append(Job("degrade-fashion-16", ("degrade", "degrade/fashion-fig1", "--epochs", "16", "--nets", "residual",
                                           "--seeds", "0..0", "--out", FASHION_16, "--threads", "1", "--json")))
    # Alone on the machine (nothing else in this job runs beside it): both cores, about half the time.
    jobs.append(Job("lesion-fashion-56", ("lesion", _fashion_run("residual", 56), "--compare", _fashion_run("plain", 56),
                                          "--max-k", "4", "--draws", "4",  # 27 single deletions, 16 draws a net
                                          "--threads", "2",
                                          "--out", "docs/figures/lesion-fashion-56.png", "--json")))
    for key, (depth, dims, points) in FASHION_LANDSCAPES.items():
        jobs.append(Job(f"landscape-fashion-{key}", (
            "landscape", _fashion_run("residual", depth), _fashion_run("plain", depth), "--dims", str(dims),
            "--range", "-1", "1", "--points", str(points), "--samples", "1000", "--threads", "1",
            "--out", f"docs/figures/landscape-fashion-{key}.png", "--json")))
    for study in STUDIES:
        out = f"runs/docs/ablate/{study}"
        # Each row's seeds as one stacked net (8x8 digits nets: 1.4x per seed at 8 seeds, docs/bench.md),
        # two workers of one thread each.
        jobs.append(Job(f"ablate-{study}", ("ablate", study, "--preset", "quick", "--stack", "16", "--jobs", "2",
                                            "--threads", "1", "--out", out,
                                            "--figure", f"docs/figures/ablate-{study}.png", "--json"), fresh=(out,)))
    for study in FASHION_STUDIES:
        out = f"runs/docs/ablate-fashion/{study}"
        # From empty results directories, so that the wall time is the study's; except depth, whose
        # 175 core-minutes (ResNet-1202 alone 56) may take more than one sitting: its job
        # resumes and skips the runs already there, and each run's own time is in its summary.
        jobs.append(Job(f"ablate-fashion-{study}", ("ablate", study, "--preset", "fashion", "--jobs", "2",
                                                    "--threads", "1", "--out", out,
                                                    "--figure", f"docs/figures/ablate-fashion-{study}.png", "--json"),
                        fresh=() if study == "depth" else (out,)))
    for study in VIT_STUDIES:
        out = f"runs/docs/ablate/{study}"
        jobs.append(Job(f"ablate-{study}", ("ablate", study, "--preset", "quick", "--jobs", "1", "--out", out,
                                            "--figure", f"docs/figures/ablate-{study}.png", "--json"), fresh=(out,)))
    for study in NORM_STUDIES:
        out = f"runs/docs/ablate/{study}"
        jobs.append(Job(f"ablate-{study}", ("ablate", study, "--preset", "quick", "--stack", "16", "--jobs", "2",
                                            "--threads", "1", "--out", out, "--figure",
                                            f"docs/figures/ablate-{study}.png", "--json"),
                        fresh=(out,)))
    # Issue: a claim reversed or unresolved at 1x, short of budget or not? Each study's not-in-order
    # claims retrained at 2x and 4x beside its quick study's runs (1x reused, never retrained).
    for study in BUDGET_STUDIES:
        jobs.append(Job(f"budgets-{study}", ("ablate", study, "--preset", "quick", "--budgets", "1,2,4",
                                             "--budget-rows", "not-in-order", "--stack", "16", "--jobs", "2",
                                             "--threads", "1", "--out", f"runs/docs/ablate/{study}", "--json")))
    for side, argv in (("separate", ("--seeds", "0..7")), ("stacked", ("--stack", "16"))):
        out = f"{AFFORD_OUT}/{side}"
        jobs.append(Job(f"afford-{side}", ("ablate", AFFORD_STUDY, "--preset", "quick", *argv, "--jobs", "2",
                                           "--threads", "1", "--out", out, "--json"), fresh=(out,)))
    for init, fig in VIT_GRADNORM.items():
        jobs.append(Job(f"gradnorm-vit-{init}", ("gradnorm", "--base", "vit/digits-tiny", "-v", "post_ln", "-v", "pre_ln",
                                                 "--depth", "24", "--set", f"model.init={init}",
                                                 "--out", f"docs/figures/{fig}", "--json")))
    for depth, argv in BENCH_TRAIN.items():
        jobs.append(Job(f"bench-{depth}", ("bench", *argv, "--json")))
    jobs.append(Job("bench-data", ("bench", "cifar/resnet20", "--data-only", "--json")))
    jobs.append(Job("bench-vary", ("bench", "cifar/resnet20", "--no-baseline", "--vary", "train.channels_last=on,off",
                                   "--vary", "run.threads=2,1", "--json")))
    # run.threads auto against every core and one thread, quiet and with both cores kept busy.
    for key, (_, argv) in BENCH_THREADS.items():
        jobs.append(Job(f"bench-threads-{key}", ("bench", *argv, "--vary", "run.threads=auto,0,1", "--busy",
                                                 "--steps", "10", "--warmup", "3", "--json")))
    jobs.append(Job("bench-memory", ("bench", "preact/resnet1001-cifar10", "--batch-size", "32", "--memory", "--json")))
    for key, argv in BENCH_STACK.items():
        jobs.append(Job(f"bench-stack-{key}", ("bench", *argv, "--threads", "1", "--json")))
    # train.compile on the stacked step (docs/bench.md): the digits ResNet-110 at k = 16, separate, stacked
    # eager and stacked compiled side by side in one run; one round, since each compiled side compiles anew.
    jobs.append(Job("bench-stack-compile", ("bench", *BENCH_STACK["digits-110"][:-1], "16", "--set",
                                            "train.compile=true", "--rounds", "1", "--threads", "1", "--json")))
    for cmd in COMMANDS:
        jobs.append(Job(f"usage-{cmd}", (cmd, "--help"), json_lines=False))
    # docs/report.md: each output format on a real study (the zero-init study's quick runs: the projection
    # study's directory also holds its --budgets runs, whose report has no LaTeX form).
    for key, argv in REPORT_FORMATS.items():
        jobs.append(Job(f"report-{key}", ("report", "runs/docs/ablate/zero-init", *argv), json_lines=False))
    return {j.name: j for j in jobs}


JOBS = _jobs()


def load(name: str) -> tuple[Any, dict[str, Any]]:
    """A job's saved output (a list of JSON records, or the text) and its meta record."""
    meta = json.loads((JSON_DIR / f"{name}.meta.json").read_text(encoding="utf-8"))
    if not JOBS[name].json_lines:
        return (JSON_DIR / f"{name}.txt").read_text(encoding="utf-8"), meta
    lines = (JSON_DIR / f"{name}.jsonl").read_text(encoding="utf-8").splitlines()
    return [json.loads(line) for line in lines if line.strip()], meta


# --- sections: one table each ------------------------------------------------------------------

@dataclass(frozen=True)
class Section:
    name: str
    page: str                                   # under docs/
    jobs: tuple[str, ...]
    render: Callable[[dict[str, Any]], str]     # job name -> its output
    target: str = "docs"                        # which make target produces it
    commands: str | None = None                 # how to name many similar commands in the note
    copies: tuple[tuple[str, str], ...] = field(default=())  # (from, to) relative to ROOT, after the jobs
    reads: tuple[str, ...] = ()                 # other jobs' saved output it reads, without running them


def _train_rows(out: dict[str, Any]) -> list[dict[str, Any]]:
    rows = []
    for net, seed in TRAIN_RUNS:
        summary = out[f"train-{net}-s{seed}"][-1]
        rows.append({**summary, "label": TRAIN_NETS[net][2]})
    return rows


def _sections() -> list[Section]:
    train_jobs = tuple(f"train-{n}-s{s}" for n, s in TRAIN_RUNS)
    lesion_seed_jobs = tuple(f"lesion-26-s{s}" for s in LESION_SEEDS)
    sections = [
        Section("train-digits", "train.md", train_jobs, lambda o: R.train_table(_train_rows(o)),
                commands="`resnet train digits/<net> --seed S --threads 1 --out runs/docs/<net>-sS --json` for the nets and seeds "
                         "listed"),
        Section("degrade", "degrade.md", ("degrade",),
                lambda o: R.degrade_table(o["degrade"], _degrade_json("runs/docs/degrade").get("findings"))
                + R.degrade_claims_table(o["degrade"]),
                copies=(("runs/docs/degrade/degrade.png", "docs/figures/degrade.png"),)),
        Section("gradnorm", "gradnorm.md", ("gradnorm",), lambda o: R.gradnorm_table(o["gradnorm"])),
        Section("jacobian", "gradnorm.md", ("jacobian-s0",), lambda o: R.jacobian_table(o["jacobian-s0"])),
        Section("jacobian-seeds", "gradnorm.md", tuple(f"jacobian-s{s}" for s in JACOBIAN_SEEDS),
                lambda o: R.jacobian_seeds_table([r for s in JACOBIAN_SEEDS for r in o[f"jacobian-s{s}"]]),
                commands="`resnet gradnorm --jacobian --seed S --json` for S = 0..9"),
        Section("responses", "gradnorm.md", ("responses",), lambda o: R.responses_table(o["responses"])),
        Section("plot", "plot.md", ("plot",), lambda o: R.plot_table(o["plot"])),
        Section("lesion-units", "lesion.md", ("lesion-26-s0",), lambda o: R.lesion_units_table(o["lesion-26-s0"])),
        Section("lesion-k", "lesion.md", ("lesion-26-s0",), lambda o: R.lesion_k_table(o["lesion-26-s0"])),
        Section("lesion-seeds", "lesion.md", lesion_seed_jobs,
                lambda o: R.lesion_summary_table([(s, o[f"lesion-26-s{s}"]) for s in LESION_SEEDS]),
                commands="`resnet lesion runs/docs/residual26-sS --compare runs/docs/plain26-sS --json` for S = 0, 1, 2"),
        Section("lesion-56", "lesion.md", ("lesion-56-s0",), lambda o: R.lesion_summary_table([(0, o["lesion-56-s0"])])),
        Section("landscape", "landscape.md", tuple(f"landscape-{k}" for k in LANDSCAPES),
                lambda o: R.landscape_table([r for k in LANDSCAPES for r in o[f"landscape-{k}"]]),
                commands="`resnet landscape runs/docs/residualD-s0 runs/docs/plainD-s0 --dims N --range -1 1 --points P "
                         "--out docs/figures/landscape-digits-D-Nd.png --json` for the four grids in the table"),
        Section("paths", "paths.md", (*(f"train-{n}-s0" for n in PATHS_NETS), "paths-26", "paths-56", "paths-plain26"),
                lambda o: R.paths_table(o["paths-26"] + o["paths-56"] + o["paths-plain26"])),
        Section("paths-110-init", "paths.md", ("paths-110-init",), lambda o: R.paths_table(o["paths-110-init"])),
        Section("export", "export.md", tuple(f"export-{f}" for f in EXPORT_FORMATS),
                lambda o: R.export_table([r for f in EXPORT_FORMATS for r in o[f"export-{f}"]], _export_sizes())),
        Section("degrade-vit", "vit.md", ("degrade-vit",), lambda o: R.degrade_table(o["degrade-vit"]),
                target="docs-studies", copies=(("runs/docs/degrade-vit/degrade.png", "docs/figures/degrade-vit-digits.png"),)),
        Section("degrade-fashion", "degrade.md", ("degrade-fashion",),
                lambda o: R.degrade_table(o["degrade-fashion"])
                + R.degrade_claims_table(o["degrade-fashion"], _degrade_json(FASHION).get("train_wall_s")),
                target="docs-fashion", copies=((f"{FASHION}/degrade.png", "docs/figures/degrade-fashion.png"),)),
        Section("degrade-fashion-budget", "degrade.md", ("degrade-fashion-16",),
                lambda o: R.budget_table([("8 epochs", o["degrade-fashion"]), ("16 epochs", o["degrade-fashion-16"])],
                                         (_paper("depth", "ResNet-20"), _paper("depth", "ResNet-56"))),
                target="docs-fashion", reads=("degrade-fashion",)),
        Section("lesion-fashion", "lesion.md", ("lesion-fashion-56",),
                lambda o: R.lesion_summary_table([(0, o["lesion-fashion-56"])]), target="docs-fashion"),
        Section("landscape-fashion", "landscape.md", tuple(f"landscape-fashion-{k}" for k in FASHION_LANDSCAPES),
                lambda o: R.landscape_table([r for k in FASHION_LANDSCAPES for r in o[f"landscape-fashion-{k}"]]),
                target="docs-fashion",
                commands=f"`resnet landscape {FASHION}/runs/residual-D-seed0 {FASHION}/runs/plain-D-seed0 --dims N "
                         "--range -1 1 --points P --samples 1000 --threads 1 --out docs/figures/landscape-fashion-D-Nd.png --json` "
                         "for the four grids in the table"),
        Section("ablate-claims", "ablate.md", (), lambda o: S.claims_summary_table(
            [{**_registration(s), **dict(zip(("records", "meta"), _saved(f"ablate-{s}")))}
             for s in (*STUDIES, *NORM_STUDIES, *VIT_STUDIES)]
            + [{**_grid_registration(), **dict(zip(("records", "meta"), _saved("degrade")))}]), target="docs-studies"),
        Section("bench-afford", "bench.md", ("afford-separate", "afford-stacked"),
                lambda o: S.afford_table(AFFORD_STUDY, [(o[f"afford-{side}"], load(f"afford-{side}")[1])
                                                        for side in ("separate", "stacked")]),
                target="docs-studies"),
        Section("ablate-times", "ablate.md", tuple(f"ablate-{s}" for s in STUDIES),
                lambda o: S.ablate_times_table([(s, o[f"ablate-{s}"], load(f"ablate-{s}")[1]) for s in STUDIES]),
                target="docs-studies"),
    ]
    sections += [Section(f"ablate-{s}", "ablate.md", (f"ablate-{s}",), lambda o, s=s: _study(o[f"ablate-{s}"]),
                         target="docs-studies") for s in STUDIES]
    sections += [Section(f"budgets-{s}", "ablate.md", (f"budgets-{s}",), lambda o, s=s: _budget_claims(o[f"budgets-{s}"]),
                         target="docs-studies") for s in BUDGET_STUDIES]
    sections += [Section(f"ablate-fashion-{s}", "ablate.md", (f"ablate-fashion-{s}",),
                         lambda o, s=s: _study(o[f"ablate-fashion-{s}"]), target="docs-fashion-studies")
                 for s in FASHION_STUDIES]
    sections += [Section(f"ablate-{s}", "vit.md", (f"ablate-{s}",), lambda o, s=s: S.ablate_table(o[f"ablate-{s}"]),
                         target="docs-studies") for s in VIT_STUDIES]
    sections += [Section(f"ablate-{s}", "ablate.md", (f"ablate-{s}",), lambda o, s=s: _study(o[f"ablate-{s}"]),
                         target="docs-studies") for s in NORM_STUDIES]
    sections.append(Section("ablate-vit-times", "vit.md", tuple(f"ablate-{s}" for s in VIT_STUDIES),
                            lambda o: S.ablate_times_table([(s, o[f"ablate-{s}"], load(f"ablate-{s}")[1])
                                                            for s in VIT_STUDIES]), target="docs-studies"))
    sections.append(Section("gradnorm-vit", "vit.md", tuple(f"gradnorm-vit-{i}" for i in VIT_GRADNORM),
                            lambda o: R.vit_gradnorm_table([(i, o[f"gradnorm-vit-{i}"]) for i in VIT_GRADNORM]),
                            target="docs-studies"))
    sections += [
        Section("bench-train", "bench.md", tuple(f"bench-{d}" for d in BENCH_TRAIN),
                lambda o: S.bench_train_table([(f"ResNet-{d}", "resnet " + " ".join(JOBS[f"bench-{d}"].argv[:-1]),
                                                o[f"bench-{d}"]) for d in BENCH_TRAIN]), target="docs-studies"),
        Section("bench-data", "bench.md", ("bench-data",), lambda o: S.bench_data_table(o["bench-data"]),
                target="docs-studies"),
        Section("bench-vary", "bench.md", ("bench-vary",), lambda o: S.bench_vary_table(o["bench-vary"]),
                target="docs-studies"),
        Section("bench-threads", "bench.md", tuple(f"bench-threads-{k}" for k in BENCH_THREADS),
                lambda o: S.bench_threads_table([(name, o[f"bench-threads-{k}"])
                                                 for k, (name, _) in BENCH_THREADS.items()]),
                target="docs-studies"),
        Section("bench-memory", "bench.md", ("bench-memory",), lambda o: S.bench_memory_table(o["bench-memory"]),
                target="docs-studies"),
        Section("bench-stack", "bench.md", tuple(f"bench-stack-{k}" for k in BENCH_STACK),
                lambda o: S.bench_stack_table([(k, o[f"bench-stack-{k}"]) for k in BENCH_STACK]),
                target="docs-studies"),
        Section("bench-stack-compile", "bench.md", ("bench-stack-compile",),
                lambda o: S.bench_stack_compile_table(o["bench-stack-compile"]), target="docs-studies"),
    ]
    sections += [Section(f"usage-{c}", f"{c}.md", (f"usage-{c}",), lambda o, c=c: R.usage_block(o[f"usage-{c}"]),
                         target="usage") for c in COMMANDS]
    sections.append(Section("report-formats", "report.md", tuple(f"report-{k}" for k in REPORT_FORMATS),
                            lambda o: R.format_blocks([(" ".join(("resnet", *JOBS[f"report-{k}"].argv)),
                                                        o[f"report-{k}"]) for k in REPORT_FORMATS]),
                            target="docs-studies"))  # after ablate-zero-init: it reads those runs
    return sections


# He 2016b Table 2 compares the unit orderings of ResNet-110 and of ResNet-164, each net on its
# own (the presets give them different widths): the order is counted within each net.
def _study(records: list[dict[str, Any]]) -> str:
    """A study's table, then its reading: `resnet ablate --format markdown`'s renderer, the same text."""
    from resnet_cli.results import markdown

    return markdown.study(records)


def _budget_claims(records: list[dict[str, Any]]) -> str:
    """The claims a --budgets job retrained, each at every budget with its pattern (the package's renderer)."""
    from resnet_cli.results import budget_claims

    got = [r for r in records if r.get("event") == "budget_claim"]
    retrained = [r for r in got if any(a["verdict"] != "not run" for k, a in r["at"].items() if k != "1x")]
    return budget_claims.markdown(retrained) if retrained else "Every declared claim is in order at 1x: nothing retrained.\n"


def _export_sizes() -> dict[str, int]:
    return {name: (ROOT / EXPORT / fmt / name).stat().st_size for fmt, name in EXPORT_FORMATS.items()}


def _same_runs(spec) -> str:
    """A row's spec less where and with what seed it runs: two studies' rows with the same key are the
    same runs (shortcut's identity row is activation's (a) and normalisation's BN row)."""
    tree = spec.model_dump(mode="json")
    tree["run"] = {k: v for k, v in tree["run"].items() if k not in ("out", "seed", "threads", "name")}
    return json.dumps(tree, sort_keys=True)


def _registration(study: str) -> dict[str, Any]:
    """A study's registered quick family from its study file: members, one same-runs key per member,
    how many are hypotheses, the seeds it is sized for."""
    from resnet_cli.sweep import plan as plan_mod

    plan = plan_mod.plan(study, "quick")
    runs = {row.label: _same_runs(row.spec) for row in plan.rows}
    members = plan.family.members
    return {"name": study, "members": [(m.better, m.worse, m.metric) for m in members],
            "keys": [(runs[m.better], runs[m.worse], m.metric) for m in members],
            "hypotheses": sum(m.hypothesis for m in members), "sized": len(plan.seeds)}


def _grid_registration() -> dict[str, Any]:
    """`resnet degrade`'s default grid (8 and 26 layers, 10 seeds) as one study of the summary."""
    from resnet_cli.results.degrade import he2016a_claims

    members = [(m.better, m.worse, m.metric) for m in he2016a_claims([8, 26]).members]
    return {"name": "degrade (digits 8/26)", "members": members, "keys": [("degrade", *m) for m in members],
            "hypotheses": 0, "sized": 10}


def _saved(job: str) -> tuple[Any, dict[str, Any] | None]:
    """A job's saved output and meta where it has been run here, else (None, None)."""
    return load(job) if (JSON_DIR / f"{job}.meta.json").exists() else (None, None)


def _degrade_json(out: str) -> dict[str, Any]:
    """What `resnet degrade` keeps in OUT/degrade.json and not in --json: the article's figures beside
    ours, and the runs' summed training time (a rerun's own wall time is the reuse's)."""
    path = ROOT / out / "degrade.json"
    return json.loads(path.read_text(encoding="utf-8")) if path.exists() else {}


def _paper(study: str, label: str) -> float:
    """A row's paper figure, from the shipped study file that holds it."""
    from resnet_cli.sweep import study_file

    rows = study_file.load(study_file.find(study)[0]).rows or []
    return next(r.paper for r in rows if r.label == label)


SECTIONS = _sections()


# --- writing the pages -------------------------------------------------------------------------

def replace_section(text: str, name: str, body: str) -> str:
    """`text` with the body of section `name` replaced; everything outside the markers is kept as is."""
    hits = [m for m in MARKER.finditer(text) if m.group("name") == name]
    if len(hits) != 1:
        raise ValueError(f"section '{name}': expected one '<!-- generated: {name} -->' ... '<!-- end -->', "
                         f"found {len(hits)}")
    m = hits[0]
    body = body.rstrip("\n") + "\n"
    return text[:m.start("body")] + body + text[m.end("body"):]


def note(section: Section, metas: Sequence[dict[str, Any]]) -> str:
    """The line beside a table: which command(s), which machine, how long, when, at which commit."""
    if not metas:
        return ""
    if section.commands:
        what = section.commands
    else:
        what = "; ".join(f"`{m['command']}`" for m in metas)
    wall = sum(m["wall_s"] for m in metas)
    last = max(metas, key=lambda m: m["finished"])  # jobs of one table may have been run at different times
    commits = list(dict.fromkeys(m["commit"] for m in metas))
    at = f"commit {commits[0]}" if len(commits) == 1 else "commits " + ", ".join(commits)
    # Older meta records lack "threads": their command line says it as well.
    threads = sorted({str(m.get("threads") or threads_of(tuple(m["command"].split()))) for m in metas})
    def said(t: str) -> str:
        if t == "auto":
            return "run.threads auto (the cores other processes leave free, split between a sweep's workers)"
        if t == "varied":
            return "the thread counts in the table"
        if not t.isdigit():  # "default" (older records: "torch's default (N cores)")
            return "torch's default threads (the cores, split between a sweep's workers)"
        return f"{t} thread{'s' if t != '1' else ''} a process"

    per_run = " or ".join(said(t) for t in threads)
    return (f"*Generated by `make {section.target}` from {what}: {R.duration(wall)} wall time on {last['machine']}, "
            f"{per_run} (1-minute load {last['load_1min']} at the end), {last['finished']}, {at}.*\n\n")


def render_section(section: Section) -> bool:
    """Write one section from its saved JSON; False if some of its jobs have no saved output yet."""
    if not all((JSON_DIR / f"{j}.meta.json").exists() for j in section.jobs + section.reads):
        return False
    loaded = {j: load(j) for j in section.jobs + section.reads}
    body = section.render({j: out for j, (out, _) in loaded.items()})
    if section.target != "usage":
        body = note(section, [loaded[j][1] for j in section.jobs]) + body
    page = DOCS / section.page
    page.write_text(replace_section(page.read_text(encoding="utf-8"), section.name, body), encoding="utf-8")
    for src, dst in section.copies:
        if (ROOT / src).exists():
            shutil.copyfile(ROOT / src, ROOT / dst)
    return True


def main(argv: list[str]) -> int:
    modes = {"quick": "docs", "studies": "docs-studies", "fashion": "docs-fashion",
             "fashion-studies": "docs-fashion-studies", "usage": "usage"}
    names = {s.name for s in SECTIONS}
    if argv[:1] in (["section"], ["render"]) and len(argv) > 1 and set(argv[1:]) <= names:
        wanted = [s for s in SECTIONS if s.name in argv[1:]]
    elif len(argv) == 1 and argv[0] in (*modes, "render"):
        wanted = [s for s in SECTIONS if argv[0] == "render" or s.target == modes[argv[0]]]
    else:
        print("usage: python tools/docs_tables.py quick|studies|fashion|fashion-studies|usage|render, section NAME... "
              "or render NAME... "
              f"(sections: {', '.join(sorted(names))})", file=sys.stderr)
        return 2
    if argv[0] == "quick":  # the quick pages also show each command's current usage
        wanted += [s for s in SECTIONS if s.target == "usage"]
    failed = []
    if argv[0] != "render":
        needed = list(dict.fromkeys(j for s in wanted for j in s.jobs))
        failed = [j for j in needed if not run_job(JOBS[j])]
    FIGURES.mkdir(parents=True, exist_ok=True)
    for s in wanted:
        if any(j in failed for j in s.jobs + s.reads) or not render_section(s):
            print(f"docs: section '{s.name}' in docs/{s.page} not written (no output from its commands)",
                  file=sys.stderr)
        else:
            print(f"docs: wrote '{s.name}' in docs/{s.page}", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
