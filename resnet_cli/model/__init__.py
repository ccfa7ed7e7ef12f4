"""Model builder: spec -> modules. See units.py (Table 2 orderings), shortcuts.py (Table 1) and
vit.py (the token nets of family vit, whose units take the same shortcuts)."""

from .build import build_model, count_params
from .nets import ResNet
from .shortcuts import COMBINERS
from .units import ORDERINGS, ResidualUnit

__all__ = ["COMBINERS", "ORDERINGS", "ResNet", "ResidualUnit", "build_model", "count_params"]
