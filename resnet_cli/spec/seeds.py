"""The one syntax for seeds on the command line (`--seeds` of ablate and degrade; docs/spec.md, Seeds):

    3        seed 3 alone
    0,3,7    those seeds, in that order
    0..4     a range, both ends included: 0, 1, 2, 3, 4 (0-4 says the same)
"""

from __future__ import annotations

from ..errors import UserError
from .section import INT_MAX as MAX

SYNTAX = "a seed (3), a list (0,3,7) or a range (0..4, both ends included)"
HELP = "Seeds: a seed (3), a list (0,3,7) or a range (0..4); see docs/spec.md, Seeds."


def parse(text: str) -> list[int]:
    """'3' -> [3]; '0,3,7' -> [0, 3, 7]; '5..7' -> [5, 6, 7]; '7,' -> [7]."""
    compact = text.replace(" ", "")
    try:
        if ".." in compact or "-" in compact:
            lo, hi = (int(p) for p in compact.replace("..", "-").split("-"))
            seeds = list(range(lo, hi + 1))
        else:
            seeds = [int(p) for p in compact.split(",") if p]
    except ValueError:
        raise UserError(f"--seeds {text}: expected {SYNTAX}") from None
    if not seeds or min(seeds) < 0 or len(set(seeds)) != len(seeds):
        raise UserError(f"--seeds {text}: need at least one seed, none negative, no repeats; expected {SYNTAX}")
    return check(seeds, f"--seeds {text}")


def check(seeds: list[int], where: str) -> list[int]:
    """Seeds that torch.manual_seed and the data order's generators take (run.seed's range, where a
    study's seeds and --seeds skip the spec's validation: they are set on a validated spec)."""
    big = [s for s in seeds if s > MAX]
    if big:
        raise UserError(f"{where}: seed {big[0]} is out of range; valid: 0 to {MAX} (2^63 - 1)")
    return seeds


def text(seeds: list[int]) -> str:
    """The inverse of `parse`: 0..9 for a run of three or more, else 0,3,7 (a lone number is that seed)."""
    if len(seeds) > 2 and seeds == list(range(seeds[0], seeds[0] + len(seeds))):
        return f"{seeds[0]}..{seeds[-1]}"
    return ",".join(map(str, seeds))
