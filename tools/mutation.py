"""Mutation testing, one module at a time against that module's own tests (`make mutation`).

mutmut reads one `[tool.mutmut]` table, so each module runs in its own copy of the working tree
(under mutants-by-module/, ignored by git) whose pyproject.toml names that module and its tests:
a mutant counts as killed only by the tests written for its module, not by a docs or degrade test
that happens to touch it. Prints one line per module (killed, survived, timed out, the score) and
writes each module's surviving mutants to mutants-by-module/NAME.survivors, for `mutmut show`
from that copy. Not part of CI: a module takes minutes to an hour on 2 cores.

    python tools/mutation.py                       # every module below
    python tools/mutation.py results/evidence.py   # one (a path under resnet_cli/)
"""

from __future__ import annotations

import collections
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
WORK = ROOT / "mutants-by-module"

# The code that decides and measures, each with the tests written for it.
MODULES: dict[str, tuple[str, ...]] = {
    "results/evidence.py": ("tests/test_evidence.py", "tests/test_evidence_edges.py", "tests/test_claims.py"),
    "results/study.py": ("tests/test_results.py", "tests/test_study_result.py"),
    "results/verdicts.py": ("tests/test_claims.py", "tests/test_verdicts_values.py"),
    "results/power.py": ("tests/test_claims.py", "tests/test_power_values.py"),
    "sweep/budgets.py": ("tests/test_budgets.py", "tests/test_budgets_values.py"),
    "training/precise_bn.py": ("tests/test_precise_bn.py",),
    "analysis/lesion.py": ("tests/test_lesion.py", "tests/test_lesion_values.py"),
    "analysis/paths.py": ("tests/test_paths.py", "tests/test_paths_values.py"),
    "analysis/landscape.py": ("tests/test_landscape.py", "tests/test_landscape_values.py"),
    "model/initialisation.py": ("tests/test_fidelity.py", "tests/test_normfree.py", "tests/test_zero_init.py"),
    "results/records.py": ("tests/test_records_values.py", "tests/test_study_result.py", "tests/test_results.py"),
    "results/table.py": ("tests/test_table_values.py", "tests/test_diverged.py", "tests/test_results.py"),
    "results/formats.py": ("tests/test_formats.py", "tests/test_formats_values.py"),
    "results/markdown.py": ("tests/test_markdown_values.py", "tests/test_formats.py", "tests/test_degrade_formats.py"),
    "results/report.py": ("tests/test_report_reading.py", "tests/test_report_family.py", "tests/test_report_values.py",
                          "tests/test_report_figure.py", "tests/test_diverged.py", "tests/test_results.py",
                          "tests/test_old_runs.py"),
    "results/degrade.py": ("tests/test_degrade_values.py", "tests/test_degrade.py"),
    "results/degrade_grid.py": ("tests/test_degrade_grid_values.py", "tests/test_degrade.py", "tests/test_diverged.py"),
    "results/degrade_view.py": ("tests/test_degrade_view_values.py", "tests/test_degrade_grid_values.py",
                                "tests/test_legible.py", "tests/test_degrade.py"),
    "results/degrade_formats.py": ("tests/test_degrade_formats_values.py", "tests/test_degrade_formats.py"),
    "results/degrade_reference.py": ("tests/test_degrade.py",),
    "analysis/trained.py": ("tests/test_trained_values.py", "tests/test_cli_open_runs.py", "tests/test_eval.py"),
    "analysis/evaluate.py": ("tests/test_eval.py",),
    "analysis/export.py": ("tests/test_export.py",),
    "analysis/gradnorm/norms.py": ("tests/test_gradnorm_values.py", "tests/test_gradnorm.py", "tests/test_measurements_grad.py"),
    "analysis/gradnorm/jacobian.py": ("tests/test_gradnorm.py",),
    "analysis/gradnorm/layer_responses.py": ("tests/test_gradnorm.py", "tests/test_measurements_trained.py"),
    "analysis/gradnorm/signal.py": ("tests/test_signal.py",),
}
# Tests that change the working directory or start workers cannot find mutmut's settings from there.
# Left out by their whole names: a word such as "shipped" also dropped every later test whose
# name held it (two of report.py's value tests never ran under mutmut until renamed).
LEFT_OUT = ("test_the_recorded_family_decides_after_the_study_file_changes",
            "test_a_claim_to_a_missing_label_is_one_line_exit_2_and_nothing_written",
            "test_shipped_quick_presets_plan_the_seeds_their_families_need",
            "test_every_shipped_claim_names_rows_of_its_study")
PYTEST_ARGS = ["-m", "not slow", "-x", "-q", "-p", "no:random_order", "-k",
               " and ".join(f"not {name}" for name in LEFT_OUT)]
STATUS = re.compile(r"^\s*(\S+): (\w[\w ]*)$")
# mutmut stops a mutant after (its tests' own time + this) x 15 x 2 CPU-seconds. Its estimate leaves
# out the session fixtures that train a net, which the first test to use them pays for in a mutant's
# run: with its default of 1 s, `model.to(None)` (no change on a CPU) timed out on
# analysis/trained.py's tests, and a timeout counts as killed. 10 s leaves those fixtures room; a
# real endless loop still stops.
TIMEOUT_CONSTANT_S = 10.0


def settings(module: str, tests: tuple[str, ...]) -> str:
    quoted = lambda items: "[" + ", ".join(f'"{i}"' for i in items) + "]"  # noqa: E731
    return ("[tool.mutmut]\n"
            f"paths_to_mutate = {quoted([f'resnet_cli/{module}'])}\n"
            f"tests_dir = {quoted(tests)}\n"
            f"pytest_add_cli_args = {quoted(PYTEST_ARGS)}\n"
            f"timeout_constant = {TIMEOUT_CONSTANT_S}\n"
            'also_copy = ["resnet_cli", "tests", "tools", "configs"]\n')


def copy_tree(dest: Path) -> None:
    """The working tree as git sees it (tracked and untracked, not ignored), with this module's settings."""
    shutil.rmtree(dest, ignore_errors=True)
    files = subprocess.run(["git", "ls-files", "--cached", "--others", "--exclude-standard", "-z"], cwd=ROOT,
                           check=True, capture_output=True).stdout.decode().split("\0")
    for rel in filter(None, files):
        src = ROOT / rel
        if src.is_file():
            (dest / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dest / rel)


def run(module: str, tests: tuple[str, ...], children: int) -> collections.Counter:
    dest = WORK / module.replace("/", "-").removesuffix(".py")
    copy_tree(dest)
    pyproject = (dest / "pyproject.toml").read_text(encoding="utf-8")
    pyproject = re.sub(r"\[tool\.mutmut\].*?(?=\n\[|\Z)", settings(module, tests), pyproject, flags=re.S)
    (dest / "pyproject.toml").write_text(pyproject, encoding="utf-8")
    mutmut = [sys.executable, "-m", "mutmut"]
    subprocess.run([*mutmut, "run", "--max-children", str(children)], cwd=dest, stdout=subprocess.DEVNULL)
    out = subprocess.run([*mutmut, "results", "--all", "true"], cwd=dest, capture_output=True, text=True).stdout
    counts, survivors = collections.Counter(), []
    for line in out.splitlines():
        if (m := STATUS.match(line)):
            counts[m[2]] += 1
            if m[2] == "survived":
                survivors.append(m[1])
    (WORK / f"{dest.name}.survivors").write_text("".join(f"{s}\n" for s in survivors), encoding="utf-8")
    return counts


def main(argv: list[str]) -> int:
    wanted = argv or list(MODULES)
    unknown = [m for m in wanted if m not in MODULES]
    if unknown:
        print(f"unknown module(s) {', '.join(unknown)}; known: {', '.join(MODULES)}", file=sys.stderr)
        return 2
    WORK.mkdir(exist_ok=True)
    children = max(1, int(os.environ.get("MUTATION_CHILDREN", os.cpu_count() or 1)))
    for module in wanted:
        c = run(module, MODULES[module], children)
        tested = sum(c.values()) - c["skipped"]
        score = 100.0 * (c["killed"] + c["timeout"]) / tested if tested else 0.0
        print(f"resnet_cli/{module}: {c['killed']} killed, {c['survived']} survived, {c['timeout']} timed out "
              f"of {tested} ({score:.0f}%)", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
