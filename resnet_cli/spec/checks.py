"""Cross-field rules of the spec's sections, kept beside `spec.py` so the schema stays one screen.

Each check takes a validated section and raises ValueError; pydantic turns that into the one-line
error `spec.validate` prints (the dotted keys are named in the message itself).
"""

from __future__ import annotations


def check_length(optim) -> None:
    """optim: exactly one length, milestones strictly increasing and inside it, and milestones only
    where the schedule steps (cosine has none: its lr is a function of the iteration alone)."""
    if (optim.iters is None) == (optim.epochs is None):
        raise ValueError("set exactly one of optim.iters and optim.epochs (the other to null)")
    if optim.milestones is None:
        return
    if optim.schedule != "step" and optim.milestones:  # [] (no steps) is what cosine means anyway
        raise ValueError(f"optim.milestones {optim.milestones} step the lr of optim.schedule: step only; "
                         f"set them to null for optim.schedule: {optim.schedule}")
    length = optim.iters if optim.iters is not None else optim.epochs
    if sorted(optim.milestones) != optim.milestones or len(set(optim.milestones)) != len(optim.milestones):
        raise ValueError(f"optim.milestones must be strictly increasing, got {optim.milestones}")
    if optim.milestones and optim.milestones[-1] >= length:
        unit = "iters" if optim.iters is not None else "epochs"
        raise ValueError(f"optim.milestones {optim.milestones} must be below optim.{unit} = {length}")
