"""`make wheelhouse`: an offline install bundle for a machine without network (docs/install.md).

    python tools/wheelhouse.py --out wheelhouse --python 3.12 --platform manylinux2014_x86_64

Writes the wheel of resnet-cli itself and the wheels of every dependency except torch and
torchvision, for the named Python version and platform: a GPU machine or cluster brings its own CUDA
build of PyTorch, and a bundle with another torch in it would have pip replace that one. pytest
(the GPU check, tests/gpu/check.py, runs it) and submitit (`--launcher slurm`) come along
(`--extra`). On the target:

    pip install --no-index --find-links wheelhouse resnet-cli
"""

from __future__ import annotations

import argparse
import re
import shutil
import subprocess
import sys
import tempfile
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BROUGHT = {"torch", "torchvision"}  # the machine's own
SOURCES = ["pyproject.toml", "setup.py", "README.md", "resnet_cli", "configs"]  # what the wheel is built from


def copy_sources(dest: Path) -> Path:
    """What the wheel is built from, copied to `dest` (building leaves build/ and *.egg-info behind,
    which the checkout must not collect)."""
    dest.mkdir(parents=True)
    for name in SOURCES:
        if (ROOT / name).is_dir():
            shutil.copytree(ROOT / name, dest / name, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            shutil.copy2(ROOT / name, dest / name)
    return dest


def requirements(pyproject: Path = ROOT / "pyproject.toml") -> list[str]:
    """The project's dependencies, less the ones the target machine brings."""
    deps = tomllib.loads(pyproject.read_text(encoding="utf-8"))["project"]["dependencies"]
    return [d for d in deps if re.split(r"[\s<>=!~;\[]", d, maxsplit=1)[0].lower() not in BROUGHT]


def build(out: Path, python: str, platforms: list[str], extra: list[str]) -> list[Path]:
    out.mkdir(parents=True, exist_ok=True)
    pip = [sys.executable, "-m", "pip", "--disable-pip-version-check", "-q"]
    # The project's own wheel, pure Python, so one serves every target. Built from a copy: building
    # leaves build/ and *.egg-info behind, which the checkout must not collect.
    with tempfile.TemporaryDirectory() as tmp:
        src = copy_sources(Path(tmp) / "src")
        subprocess.run([*pip, "wheel", "--no-deps", "-w", str(out), str(src)], check=True)
    target = ["--only-binary=:all:", "--python-version", python]
    for platform in platforms:
        target += ["--platform", platform]
    subprocess.run([*pip, "download", "-d", str(out), *target, *requirements(), *extra], check=True)
    return sorted(out.glob("*.whl"))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=ROOT / "wheelhouse")
    parser.add_argument("--python", default=f"{sys.version_info.major}.{sys.version_info.minor}",
                        help="the target's Python version, e.g. 3.12 (default: this one)")
    parser.add_argument("--platform", action="append",
                        help="a wheel platform tag, e.g. manylinux2014_x86_64; repeat for several "
                             "(default: manylinux2014_x86_64)")
    parser.add_argument("--extra", action="append", default=None,
                        help="more requirements to bundle (default: pytest for the GPU check, submitit for --launcher slurm)")
    args = parser.parse_args()
    wheels = build(args.out, args.python, args.platform or ["manylinux2014_x86_64"],
                   ["pytest", "submitit"] if args.extra is None else args.extra)
    print(f"{len(wheels)} wheels in {args.out} for Python {args.python}")


if __name__ == "__main__":
    main()
