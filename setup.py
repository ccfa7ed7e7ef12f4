"""Packaging beyond what pyproject.toml can say: the bundled configs.

They stay in the repository's top-level `configs/` (the one source; `resnet configs` reads them
there in a checkout) and travel inside the wheel as the data package `resnet_cli/configs`, where an
installed `resnet` finds them. A package-dir mapping, so nothing is copied or linked in the tree.
"""

from setuptools import find_packages, setup

setup(
    packages=[*find_packages(include=["resnet_cli", "resnet_cli.*"]), "resnet_cli.configs"],
    package_dir={"resnet_cli.configs": "configs"},
    package_data={"resnet_cli.configs": ["**/*.yaml"]},
)
