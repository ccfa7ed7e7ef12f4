""".ci/constraints.txt pins every package a development install brings, so a registry release cannot
change what `make test` installs between CI's run and a user's: the requirements of resnet-cli[dev],
followed through each installed package's own requirements, are each pinned there with `==`."""

from __future__ import annotations

import re
from importlib import metadata
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
# torch's CUDA wheels follow from the torch pin (and differ by platform); the file says so.
LEFT_TO_TORCH = re.compile(r"^(nvidia-|cuda-|triton$)")


def canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def pins(text: str) -> dict[str, str]:
    out = {}
    for line in text.splitlines():
        line = line.split("#")[0].strip()
        if line:
            name, _, version = line.partition("==")
            out[canonical(name)] = version
    return out


def requirement_names(dist: str, extras: set[str] = frozenset()) -> set[str]:
    """The packages `dist` requires (with `extras`), as installed here; markers evaluated for this
    machine, so a package another platform would need is not asked of this file."""
    from packaging.requirements import Requirement

    names = set()
    for text in metadata.requires(dist) or []:
        req = Requirement(text)
        env_ok = req.marker is None or any(req.marker.evaluate({"extra": e}) for e in (extras or {""}))
        if env_ok:
            names.add(canonical(req.name))
    return names


def closure(roots: set[str]) -> set[str]:
    seen, todo = set(), list(roots)
    while todo:
        name = todo.pop()
        if name in seen or LEFT_TO_TORCH.match(name):
            continue
        seen.add(name)
        try:
            todo.extend(requirement_names(name))
        except metadata.PackageNotFoundError:
            pass  # an optional package this platform does not install
    return seen


def test_every_package_of_a_dev_install_is_pinned():
    pinned = pins((ROOT / ".ci" / "constraints.txt").read_text())
    assert all(re.fullmatch(r"[0-9][0-9A-Za-z.+!]*", v) for v in pinned.values()), "every line NAME==VERSION"
    needed = closure(requirement_names("resnet-cli", {"dev"}))
    assert {"torch", "onnx", "onnxscript", "onnx-ir", "onnxruntime", "matplotlib", "numpy", "scipy", "submitit",
            "hypothesis", "ruff", "pytest", "pytest-random-order"} <= needed  # the walk sees the real tree
    assert sorted(needed - pinned.keys()) == []


def test_the_makefile_installs_with_the_constraints():
    make = (ROOT / "Makefile").read_text()
    assert "pip install -q -c .ci/constraints.txt -e '.[dev]'" in make
