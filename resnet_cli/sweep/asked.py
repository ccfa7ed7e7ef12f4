"""What a results directory was asked for beyond its study file: the seeds and the `--set` items
(the recipe) that `resnet ablate` ran there. The one place that decides both

- the default output folder of a changed recipe: a study run with `--set optim.epochs=2` is not
  the study as shipped, so its runs get their own folder (`runs/ablate/STUDY-PRESET-set-...`)
  instead of colliding with the finished study's; and
- what `resnet report` judges a directory by: the seeds and recipe asked for it (asked.json beside
  claims.json), not the study file's defaults, so a study run deliberately smaller reads as
  complete when every run asked for has finished.

asked.json is written before the first run and again at each start; the seeds are the union of
every start's (seeds added later are asked for too; claims.json says which seeds its claims were
recorded at). Keys that may change on resume (spec.RESUME_FREE: threads, device) are not recipe.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..errors import write_atomically
from ..spec import RESUME_FREE
from ..spec.yamlio import flat_dotted

FILE = "asked.json"


def recipe(sets: Iterable[str], overrides: Iterable[tuple[str, Any]] = ()) -> list[str]:
    """The items that change what a run computes, as `key=value` text, in the order given: the
    `--set` items and flag overrides minus the resume-free keys (where a run executes, not what)."""
    items = [(str(k), json.dumps(v, default=str)) for k, v in overrides]
    items += [(s.split("=", 1)[0].strip(), s.split("=", 1)[1].strip() if "=" in s else "") for s in sets]
    return [f"{k}={v}" for k, v in items if k not in RESUME_FREE]


def changed(before: dict, after: dict) -> list[str]:
    """The dotted keys in which two spec trees differ, as `key=value` (after's value), resume-free
    keys left out: a flag that sets what the config already has changes no recipe."""
    a, b = flat_dotted(before), flat_dotted(after)
    keys = sorted(k for k in {*a, *b} if a.get(k) != b.get(k) and k not in RESUME_FREE)
    return [f"{k}={json.dumps(b.get(k), default=str)}" for k in keys]


def folder_suffix(items: list[str]) -> str:
    """'' for the recipe as shipped; else '-set-' + the items made readable, and a short hash of them
    so two recipes whose readable forms are cut to the same text still get two folders."""
    if not items:
        return ""
    text = ",".join(items)
    readable = "".join(ch if ch.isalnum() or ch in ".+" else "-" for ch in text).strip("-")
    while "--" in readable:
        readable = readable.replace("--", "-")
    digest = hashlib.sha256(text.encode()).hexdigest()[:6]
    return f"-set-{readable[:40].rstrip('-.')}-{digest}"


@dataclass(frozen=True)
class Asked:
    study: str
    preset: str
    source: str | None
    seeds: tuple[int, ...]
    sets: tuple[str, ...]  # the --set items as given (resume-free ones left out)


def record(results: Path, study: str, preset: str, source: str, seeds: Iterable[int], sets: Iterable[str]) -> Asked:
    """Write (or widen) asked.json: this start's seeds joined to those asked before, its recipe."""
    old = read(results, study, preset)
    merged = sorted({*(old.seeds if old else ()), *map(int, seeds)})
    asked = Asked(study, preset, source, tuple(merged), tuple(recipe(sets)))
    body = {"study": study, "preset": preset, "source": source, "seeds": list(asked.seeds), "sets": list(asked.sets)}
    write_atomically(Path(results) / FILE, json.dumps(body, indent=2) + "\n")
    return asked


def read(folder: Path, study: str, preset: str) -> Asked | None:
    """asked.json of this study and preset in `folder` (None: none, another study's, or damaged)."""
    try:
        body = json.loads((Path(folder) / FILE).read_text(encoding="utf-8"))
        if (body.get("study"), body.get("preset")) != (study, preset):
            return None
        return Asked(study, preset, body.get("source"), tuple(int(s) for s in body["seeds"]),
                     tuple(str(s) for s in body.get("sets") or ()))
    except (OSError, ValueError, TypeError, KeyError, AttributeError):
        return None


def find(paths: Iterable[Path], study: str, preset: str, depth: int = 3) -> tuple[Asked, Path] | None:
    """asked.json in a folder holding (up to `depth` levels above) any of these run directories."""
    tried: set[Path] = set()
    for path in paths:
        for folder in list(Path(path).parents)[:depth]:
            if folder not in tried:
                tried.add(folder)
                if (found := read(folder, study, preset)) is not None:
                    return found, folder
    return None


def words(asked_sets: Iterable[str], seeds: Iterable[int] | None = None) -> str:
    """The recipe as flags, for headers and captions: '--set optim.epochs=2, seeds 0..1'."""
    from ..spec.seeds import text as seeds_text

    parts = [f"--set {s}" for s in asked_sets]
    if seeds is not None:
        parts.append(f"seeds {seeds_text(list(seeds))}")
    return ", ".join(parts)
