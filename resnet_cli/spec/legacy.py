"""Spec trees that earlier versions wrote, read as the runs they describe were trained.

A field added with an `auto` default that builds something else for a setting that existed before
it is pinned here, in a tree written before the field, to what the tree meant then. Every reader of
a run directory's spec (its spec.yaml, its checkpoint's spec) passes the tree through `as_written`.
"""

from __future__ import annotations

import copy
from typing import Any


def as_written(tree: Any) -> Any:
    """`tree` with the fields its version did not have set to what that version built."""
    model = tree.get("model") if isinstance(tree, dict) else None
    shortcut = model.get("shortcut") if isinstance(model, dict) else None
    if isinstance(shortcut, dict) and "after_addition" not in shortcut:
        # Before model.shortcut.after_addition every kind, ReZero's too, kept the unit ordering's
        # ReLU after the addition: an older ReZero run resumes and reports as the net it trained.
        tree = copy.deepcopy(tree)
        tree["model"]["shortcut"]["after_addition"] = "ordering"
    return tree
