"""The spec language: one strict, frozen schema for a run (schema.py), the depth rules (layouts.py,
vit_layout.py), the datasets' shapes (datasets.py), the unit orderings (orderings.py), and the
strict YAML loader with the bundled configs (yamlio.py, bundled.py). This package's face re-exports
the schema's names, so `from resnet_cli.spec import Spec, validate` reads as before."""

from .schema import *  # noqa: F401,F403
