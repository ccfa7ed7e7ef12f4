"""Packaging beyond what pyproject.toml can say: the bundled configs.

They stay in the repository's top-level `configs/` (the one source; `resnet configs` reads them
there in a checkout) and travel inside the wheel as the data packages `resnet_cli/configs/...`,
where an installed `resnet` finds them. A package-dir mapping, so nothing is copied or linked in
the tree; each folder is listed as a (namespace) package so setuptools ships it as data knowingly.
"""

from setuptools import find_namespace_packages, find_packages, setup

CONFIGS = ["resnet_cli.configs", *(f"resnet_cli.configs.{p}" for p in find_namespace_packages(where="configs"))]

setup(
    packages=[*find_packages(include=["resnet_cli", "resnet_cli.*"]), *CONFIGS],
    package_dir={"resnet_cli.configs": "configs"},
    package_data={name: ["*.yaml"] for name in CONFIGS},
)
