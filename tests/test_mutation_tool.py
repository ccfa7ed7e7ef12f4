"""tools/mutation.py: each module's mutmut settings name that module and its own tests, and the
rest of pyproject.toml is left as it was; `mutmut results` lines are read into counts."""

from __future__ import annotations

import re
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tools"))
import mutation  # noqa: E402


def test_each_modules_settings_name_it_and_its_tests_and_keep_the_rest_of_pyproject():
    text = (ROOT / "pyproject.toml").read_text(encoding="utf-8")
    new = re.sub(r"\[tool\.mutmut\].*?(?=\n\[|\Z)", mutation.settings("results/study.py", ("tests/test_results.py",)),
                 text, flags=re.S)
    before, after = tomllib.loads(text), tomllib.loads(new)
    assert after["tool"]["mutmut"]["paths_to_mutate"] == ["resnet_cli/results/study.py"]
    assert after["tool"]["mutmut"]["tests_dir"] == ["tests/test_results.py"]
    assert after["tool"]["mutmut"]["pytest_add_cli_args"][:2] == ["-m", "not slow"]
    assert after["tool"]["mutmut"]["timeout_constant"] == 10.0  # room for the fixtures that train
    del before["tool"]["mutmut"], after["tool"]["mutmut"]
    assert after == before


def test_every_named_module_and_test_file_exists():
    for module, tests in mutation.MODULES.items():
        assert (ROOT / "resnet_cli" / module).is_file(), module
        assert tests and all((ROOT / t).is_file() for t in tests), tests


def test_results_lines_are_read_by_status():
    out = ("    resnet_cli.results.study.x_compute__mutmut_1: killed\n"
           "    resnet_cli.results.study.x_compute__mutmut_2: survived\n"
           "    resnet_cli.results.study.x_reading__mutmut_7: timeout\n")
    got = [m.groups() for line in out.splitlines() if (m := mutation.STATUS.match(line))]
    assert got == [("resnet_cli.results.study.x_compute__mutmut_1", "killed"),
                   ("resnet_cli.results.study.x_compute__mutmut_2", "survived"),
                   ("resnet_cli.results.study.x_reading__mutmut_7", "timeout")]
