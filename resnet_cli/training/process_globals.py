"""What a command may change for the rest of its process, put back when it returns.

A run seeds the global generators (the spec's seed), sets torch's thread count (`run.threads`) and,
with `run.deterministic`, torch's deterministic mode and cuBLAS's workspace variable.
In `resnet`'s own process that ends with the process; in a caller that runs commands in-process
(typer's CliRunner, a notebook, a test suite) it would change everything after the call: the next
unseeded draw, the next timing. `kept()` saves that state on the way in and restores it on the way
out, whatever the command did. Torch is read only if it is already imported, so `resnet --help`
still imports none.
"""

from __future__ import annotations

import contextlib
import os
import random
import sys
from typing import Iterator


@contextlib.contextmanager
def kept() -> Iterator[None]:
    py, env = random.getstate(), dict(os.environ)
    np_state = sys.modules["numpy"].random.get_state() if "numpy" in sys.modules else None
    torch = sys.modules.get("torch")
    torch_state = ((torch.random.get_rng_state(), torch.get_num_threads(), torch.are_deterministic_algorithms_enabled())
                   if torch is not None else None)
    try:
        yield
    finally:
        random.setstate(py)
        for name in os.environ.keys() - env.keys():
            del os.environ[name]
        os.environ.update({k: v for k, v in env.items() if os.environ.get(k) != v})
        if np_state is not None:
            sys.modules["numpy"].random.set_state(np_state)
        if torch_state is not None:
            torch.random.set_rng_state(torch_state[0])
            if torch.get_num_threads() != torch_state[1]:
                torch.set_num_threads(torch_state[1])
            torch.use_deterministic_algorithms(torch_state[2])
