"""Model builder: spec -> modules. See units.py (Table 2 orderings) and shortcuts.py (Table 1)."""

from .nets import ResNet, build_model, count_params
from .shortcuts import COMBINERS
from .units import ORDERINGS, ResidualUnit

__all__ = ["COMBINERS", "ORDERINGS", "ResNet", "ResidualUnit", "build_model", "count_params"]
