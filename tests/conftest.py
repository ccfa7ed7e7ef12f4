import os

import pytest

# Tests run on the CPU with few threads: CI has 2 cores and tests must not fight over them.
os.environ.setdefault("OMP_NUM_THREADS", "1")


@pytest.fixture(autouse=True)
def _torch_threads():
    import torch

    torch.set_num_threads(1)
    yield


@pytest.fixture
def in_tmp(tmp_path, monkeypatch):
    """Run a test inside its own temporary working directory (runs/ lands there)."""
    monkeypatch.chdir(tmp_path)
    return tmp_path
