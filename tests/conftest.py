import os
import shutil
import tempfile

import pytest

# Tests run on the CPU with few threads: CI has 2 cores and tests must not fight over them.
os.environ.setdefault("OMP_NUM_THREADS", "1")
# A new machine has no inductor cache: the session compiles into an empty one of its own (child
# processes inherit it), so a cache warmed by earlier runs cannot hide what torch.compile does there.
_INDUCTOR_CACHE = tempfile.mkdtemp(prefix="resnet-tests-inductor-")
os.environ["TORCHINDUCTOR_CACHE_DIR"] = _INDUCTOR_CACHE


@pytest.fixture(autouse=True, scope="session")
def _own_inductor_cache():
    yield
    shutil.rmtree(_INDUCTOR_CACHE, ignore_errors=True)


@pytest.fixture(autouse=True)
def _torch_threads():
    import torch

    torch.set_num_threads(1)
    yield


@pytest.fixture(autouse=True, scope="session")
def _cli_leaves_the_process_as_it_found_it():
    """Every in-process CLI invocation (Typer's CliRunner, used by most tests and by the session
    fixtures below) is checked: signal handlers, the parent-death signal, threads, environment,
    torch's thread counts and flags, and the global generators must be as before the call. A test
    whose command leaked fails at that call, naming what leaked (tests/process_state.py)."""
    import sklearn  # noqa: F401  (sets KMP_* variables when first imported: not a command's doing)
    from typer.testing import CliRunner

    from process_state import leaks, snapshot

    invoke = CliRunner.invoke

    def checked(self, *args, **kwargs):
        before = snapshot()
        result = invoke(self, *args, **kwargs)
        leaked = leaks(before)
        if leaked:
            command = " ".join(map(str, (args[1] if len(args) > 1 else kwargs.get("args")) or []))
            raise AssertionError(f"`resnet {command}` changed the test process:\n  " + "\n  ".join(leaked))
        return result

    CliRunner.invoke = checked
    yield
    CliRunner.invoke = invoke


@pytest.fixture
def in_tmp(tmp_path, monkeypatch):
    """Run a test inside its own temporary working directory (runs/ lands there)."""
    monkeypatch.chdir(tmp_path)
    return tmp_path


@pytest.fixture(scope="session")
def residual8_run(tmp_path_factory):
    """One trained run directory shared by the commands that read runs (paths, landscape): the
    bundled residual 8-layer digits net at width 4, one epoch (about a second). Read it, never write it."""
    from typer.testing import CliRunner

    from resnet_cli.cli import app

    out = tmp_path_factory.mktemp("trained") / "residual8"
    r = CliRunner().invoke(app, ["train", "digits/residual8", "--epochs", "1", "--set", "model.widths=[4]",
                                 "--out", str(out)])
    assert r.exit_code == 0, r.stderr
    return out


@pytest.fixture
def training_loss(monkeypatch):
    """`training_loss(then)`: from now on each training step's loss is `then(loss, n)`, n counting
    the steps from 1, by wrapping torch's cross-entropy for the calls that build a graph (the
    trainer's step); evaluation runs under no_grad and keeps the plain loss."""
    import torch
    import torch.nn.functional as F

    plain = F.cross_entropy
    calls = {"n": 0}

    def install(then):
        def loss(*args, **kw):
            value = plain(*args, **kw)
            if not torch.is_grad_enabled():
                return value
            calls["n"] += 1
            return then(value, calls["n"])

        monkeypatch.setattr(F, "cross_entropy", loss)
        return calls

    return install


def pytest_collection_modifyitems(config, items):
    """Under pytest-xdist (`make test`), the tests against the one-node SLURM (tools/slurm_local.sh)
    share one worker: they share its one node, and two arrays at once would queue behind each other.

    The slow tests (seconds to a minute each) go first, in their collected order, the quick ones
    after: xdist hands out tests in collection order, and a minute-long test handed out last keeps one
    worker busy while the other has nothing left, where quick tests at the end fill both workers."""
    for item in items:
        if item.get_closest_marker("slurm"):
            item.add_marker(pytest.mark.xdist_group("slurm"))
    items.sort(key=lambda item: item.get_closest_marker("slow") is None)  # stable: the order within each part


# `make slurm-check` (and CI through it) sets RESNET_REQUIRE_SLURM=1: the SLURM tests exist to run
# against a cluster, so there a skip (no cluster answering, submitit missing) is a failure carrying
# the skip's reason, and "21 passed" cannot quietly become "14 passed, 7 skipped". Unset (`make test`
# without SLURM) skips stay skips. It applies to every test the session runs; slurm-check runs only
# the SLURM files.
REQUIRE_SLURM = os.environ.get("RESNET_REQUIRE_SLURM") == "1"


def _required(report) -> None:
    if REQUIRE_SLURM and report.skipped:
        reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else str(report.longrepr)
        report.outcome = "failed"
        report.longrepr = f"skipped where RESNET_REQUIRE_SLURM=1 requires it to run: {reason}"


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    _required(outcome.get_result())


@pytest.hookimpl(hookwrapper=True)
def pytest_make_collect_report(collector):
    """A module-level importorskip skips at collection, before any test exists to fail."""
    outcome = yield
    _required(outcome.get_result())
