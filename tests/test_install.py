"""A regular install is the real install (issue 14): the wheel carries the bundled configs, and
the installed `resnet` finds them from outside the checkout. Built offline with the environment's
own setuptools (no build isolation, nothing downloaded); dependencies are not installed, the test
environment's torch, typer, ... are used."""

import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

import processes

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tools"))
import wheelhouse  # noqa: E402  (tools/ is not a package)

ROOT = Path(__file__).resolve().parent.parent
pytestmark = pytest.mark.slow  # pip builds and installs the wheel, and the installed `resnet` runs as a child


@pytest.fixture(scope="module")
def installed(tmp_path_factory):
    pytest.importorskip("setuptools", minversion="70.1", reason="the build backend (setuptools>=70.1) is not installed")
    tmp = tmp_path_factory.mktemp("install")
    src = wheelhouse.copy_sources(tmp / "src")
    wheels = tmp / "wheels"
    pip = [sys.executable, "-m", "pip", "--disable-pip-version-check", "-q"]
    build = subprocess.run([*pip, "wheel", "--no-deps", "--no-build-isolation", "--no-index", "-w", str(wheels), str(src)],
                           capture_output=True, text=True, timeout=300)
    assert build.returncode == 0, build.stderr
    wheel = next(wheels.glob("resnet_cli-*.whl"))
    target = tmp / "target"
    inst = subprocess.run([*pip, "install", "--no-deps", "--no-index", "--target", str(target), str(wheel)],
                          capture_output=True, text=True, timeout=300)
    assert inst.returncode == 0, inst.stderr
    return wheel, target, tmp


def resnet(target: Path, cwd: Path, *args):
    env = {**os.environ, "PYTHONPATH": str(target), "OMP_NUM_THREADS": "1"}
    code = "import resnet_cli, sys; assert resnet_cli.__file__.startswith(sys.argv[1]), resnet_cli.__file__; " \
           "sys.argv = ['resnet', *sys.argv[2:]]; from resnet_cli.cli import main; main()"
    return processes.resnet(cmd=[sys.executable, "-c", code, str(target), *map(str, args)], cwd=cwd, env=env)


def test_wheel_holds_every_bundled_config(installed):
    wheel, _, _ = installed
    names = set(zipfile.ZipFile(wheel).namelist())
    expected = {f"resnet_cli/configs/{p.relative_to(ROOT / 'configs')}" for p in (ROOT / "configs").rglob("*.yaml")}
    assert expected and expected <= names, sorted(expected - names)


def test_installed_resnet_lists_and_dry_runs_bundled_configs_outside_the_checkout(installed):
    _, target, tmp = installed
    elsewhere = tmp / "elsewhere"
    elsewhere.mkdir()
    r = resnet(target, elsewhere, "configs", "--json")
    assert r.returncode == 0, r.stderr
    listed = r.stdout
    for name in ("cifar/resnet110", "preact/resnet1001-cifar10", "digits-8-26", "depth"):
        assert name in listed, listed
    r = resnet(target, elsewhere, "train", "preact/resnet1001-cifar10", "--dry-run", "--json", "--device", "cpu")
    assert r.returncode == 0, r.stderr
    assert '"params": 10' in r.stdout  # 10.2M parameters (He 2016b Table 4)
    assert not (elsewhere / "runs").exists()


FOREIGN_TORCH = sorted(Path("/opt/wheels").glob("torch-2.13.0*-cp311-*.whl"))


@pytest.mark.skipif(os.environ.get("RESNET_TEST_FOREIGN_TORCH") != "1" or not FOREIGN_TORCH,
                    reason="opt-in (RESNET_TEST_FOREIGN_TORCH=1; needs a torch 2.13.0 wheel in /opt/wheels): "
                           "installs a second PyTorch into a fresh venv, about two minutes")
def test_install_beside_another_torch_keeps_it(installed):
    """A machine's own PyTorch (here 2.13.0+cpu with its torchvision 0.28.0, the nearest this
    project's machine has to a cluster's 2.11) survives `pip install` of our wheel with its deps."""
    wheel, _, tmp = installed
    venv = tmp / "foreign"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=300)
    pip = [str(venv / "bin" / "python"), "-m", "pip", "-q", "--disable-pip-version-check"]
    subprocess.run([*pip, "install", str(FOREIGN_TORCH[0]), "torchvision==0.28.0"], check=True, timeout=900)
    r = subprocess.run([*pip, "install", str(wheel)], capture_output=True, text=True, timeout=900)
    assert r.returncode == 0, r.stderr
    # Versions from the installed metadata: PyPI's torchvision 0.28.0 is the CUDA build, whose C
    # ops do not load beside a +cpu torch, so it is not imported here (our CLI does not need it).
    py = str(venv / "bin" / "python")
    v = subprocess.run([py, "-c", "from importlib.metadata import version as v; print(v('torch'), v('torchvision'))"],
                       capture_output=True, text=True)
    assert v.stdout.split() == ["2.13.0+cpu", "0.28.0"], v.stderr
    r = subprocess.run([py, "-m", "resnet_cli", "train", "digits/residual8", "--dry-run", "--json"],
                       capture_output=True, text=True, cwd=tmp)
    assert r.returncode == 0 and '"event": "dry_run"' in r.stdout, r.stderr
