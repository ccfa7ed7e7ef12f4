"""The offline install bundle (`make wheelhouse`, docs/install.md): built for this machine's Python,
it installs into a fresh venv with `--no-index` beside a PyTorch that is already there, as on a
GPU machine without network that brings its own torch but not pydantic.

The fresh venv gets "its own torch" through a .pth file naming a directory that holds only torch,
torchvision and what they require (links into this environment's site-packages): pointing the .pth
at the whole site-packages, or `--system-site-packages`, would hand it pydantic, typer, ... too,
and the test could not tell whether the bundle is complete."""

import importlib.metadata as md
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tools"))
import wheelhouse  # noqa: E402

pytestmark = pytest.mark.slow


def _closure(names: list[str]) -> list[md.Distribution]:
    """These distributions and everything they require here, extras followed (torch's CUDA build
    requires `cuda-toolkit[cublas,...]`), markers evaluated for this Python."""
    from packaging.requirements import Requirement

    seen: dict[str, md.Distribution] = {}
    done: set[tuple[str, str]] = set()
    todo = [(name, "") for name in names]
    while todo:
        name, extra = todo.pop()
        name = re.sub(r"[-_.]+", "-", name).lower()
        if (name, extra) in done:
            continue
        done.add((name, extra))
        try:
            dist = seen.get(name) or md.distribution(name)
        except md.PackageNotFoundError:
            continue  # an optional requirement that is not installed
        seen[name] = dist
        for req in dist.requires or []:
            r = Requirement(req)
            if r.marker is None or r.marker.evaluate({"extra": extra}):
                todo += [(r.name, "")] + [(r.name, e) for e in r.extras]
    return list(seen.values())


def torch_only_site(where: Path) -> Path:
    """A directory holding links to torch, torchvision and their requirements, nothing else."""
    where.mkdir()
    for dist in _closure(["torch", "torchvision"]):
        base = Path(dist.locate_file(""))
        for top in {Path(f).parts[0] for f in dist.files or []}:
            if top.endswith(".pth") or top == ".." or not (base / top).exists() or (where / top).exists():
                continue
            (where / top).symlink_to(base / top)
    return where


def test_wheelhouse_installs_with_no_index_beside_the_machines_torch(tmp_path):
    pytest.importorskip("packaging")
    house = tmp_path / "wheelhouse"
    # setuptools: this machine's torch (2.14) requires setuptools>=77.0.3 and a fresh venv brings an
    # older one; a GPU image's torch comes with its requirements met.
    wheels = wheelhouse.build(house, f"{sys.version_info.major}.{sys.version_info.minor}",
                              ["manylinux2014_x86_64", "manylinux_2_28_x86_64"], ["pytest", "setuptools>=77.0.3"])
    names = {w.name.split("-")[0].lower() for w in wheels}
    assert {"resnet_cli", "pydantic", "pydantic_core", "typer", "rich", "pyyaml", "pytest"} <= names, names
    assert not names & {"torch", "torchvision"}, names  # the machine's own, never replaced

    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=300)
    py = venv / "bin" / "python"
    site = Path(subprocess.run([str(py), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                               capture_output=True, text=True, check=True).stdout.strip())
    (site / "machine_torch.pth").write_text(str(torch_only_site(tmp_path / "torch-only")) + "\n")
    probe = "import importlib.util as u; print(bool(u.find_spec('torch')), bool(u.find_spec('pydantic')))"
    before = subprocess.run([str(py), "-c", probe], capture_output=True, text=True, check=True).stdout.split()
    assert before == ["True", "False"], before  # the bare GPU image: its own torch, no pydantic

    # No index and no configured find-links or constraints: only the bundle may be used. --no-compile:
    # byte-compiling scipy, scikit-learn and matplotlib is most of the install's time and tells
    # nothing about whether the bundle is complete.
    env = {k: v for k, v in os.environ.items() if not k.startswith("PIP_")}
    env["PIP_CONFIG_FILE"] = os.devnull
    r = subprocess.run([str(py), "-m", "pip", "install", "-q", "--no-compile", "--no-index", "--find-links", str(house),
                        "resnet-cli", "pytest"], capture_output=True, text=True, env=env, timeout=900)
    assert r.returncode == 0, r.stderr
    where = subprocess.run([str(py), "-c", "import pydantic, torch; print(pydantic.__file__); print(torch.__file__)"],
                           capture_output=True, text=True, check=True).stdout.split()
    assert where[0].startswith(str(venv)), where  # pydantic came from the bundle
    assert where[1].startswith(str(tmp_path / "torch-only")), where  # torch is still the machine's

    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    r = subprocess.run([str(venv / "bin" / "resnet"), "train", "digits/residual8", "--dry-run", "--json"],
                       capture_output=True, text=True, cwd=elsewhere, env={**env, "OMP_NUM_THREADS": "1"}, timeout=300)
    assert r.returncode == 0 and '"event": "dry_run"' in r.stdout, r.stderr
