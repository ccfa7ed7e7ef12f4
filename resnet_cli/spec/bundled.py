"""Where the bundled configs live, and how a name (`resnet110`, `preact/resnet1001-cifar10`) finds one."""

from __future__ import annotations

from pathlib import Path

from ..errors import UserError

EXPERIMENT_DIRS = {"studies": "resnet ablate NAME", "degrade": "resnet degrade NAME"}


def configs_dir() -> Path:
    """The bundled configs: inside the package when installed from a wheel (setup.py maps the
    repository's top-level configs/ there), the top-level configs/ in a checkout."""
    package = Path(__file__).resolve().parents[1]  # resnet_cli/ (this file is resnet_cli/spec/bundled.py)
    return package / "configs" if (package / "configs").is_dir() else package.parent / "configs"


def find_spec_file(name: str) -> Path:
    """A path, or the name of a bundled config (`resnet110`, `preact/resnet1001-cifar10`)."""
    path = Path(name)
    if path.exists():
        return path
    for cand in (configs_dir() / name, configs_dir() / f"{name}.yaml"):
        if cand.is_file():
            return cand
    if path.is_absolute() or path.suffix in (".yaml", ".yml") or name.startswith(("~", ".")):
        # A path that is not there is a typo or a moved file: never train a bundled config that
        # happens to share its file name.
        raise UserError(f"{name}: no such spec file (bundled configs are named like `cifar/resnet110`, "
                        "see `resnet configs`)")
    # A bare name (`resnet110`) may live in any folder of specs; studies and degrade experiments
    # are other file kinds, run by `resnet ablate` and `resnet degrade`.
    hits = [] if len(path.parts) > 1 else [
        p for p in sorted(configs_dir().rglob(f"{path.name}.yaml"))
        if p.relative_to(configs_dir()).parts[0] not in EXPERIMENT_DIRS]
    if len(hits) == 1:
        return hits[0]
    raise UserError(f"{name}: no such spec file or bundled config (bundled configs are named like "
                    "`cifar/resnet110`, see `resnet configs`)")
