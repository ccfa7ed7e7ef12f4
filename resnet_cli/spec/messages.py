"""How a validation error becomes the one line a user reads: the spec's, a study file's and a
degrade section's errors all go through here, so a misspelt key or a wrong type reads the same
wherever it was written.

A model may name itself for the "valid keys in ..." part with a `noun` class variable ("a row");
otherwise the dotted path of the section is used.
"""

from __future__ import annotations

import difflib
import typing

from pydantic import BaseModel, ValidationError


def unknown_key(source: str, path: str, valid: list[str], where: str) -> str:
    """The one message for a misspelt key: the nearest valid key first, as git and pip suggest a
    mistyped command, then all of them."""
    parent, _, key = path.rpartition(".")
    close = difflib.get_close_matches(key, valid, n=1)
    hint = f"did you mean '{f'{parent}.' if parent else ''}{close[0]}'? " if close else ""
    return f"{source}: unknown key '{path}'; {hint}valid keys in {where}: {', '.join(valid)}"


def one_line(err: ValidationError, source: str, root: type[BaseModel], prefix: tuple[str, ...] = ()) -> str:
    """The first error of `err` (raised validating `root`, found under `prefix` in the file) as one
    line; `[+N more]` when pydantic found more."""
    e = err.errors(include_url=False)[0]
    loc = tuple(str(p) for p in e["loc"])
    path = ".".join((*prefix, *loc))
    if e["type"] == "extra_forbidden":
        section = _section_for(root, loc[:-1])
        where = getattr(section, "noun", None) or ".".join((*prefix, *loc[:-1])) or "the top level"
        return unknown_key(source, path, list(section.model_fields) if section else [], where)
    msg = e["msg"]
    if msg.startswith("Value error, "):
        return f"{source}: {msg[len('Value error, '):]}"
    got = e.get("input")
    shown = f" (got {got!r})" if not isinstance(got, (dict, list)) else ""
    more = f" [+{len(err.errors()) - 1} more]" if len(err.errors()) > 1 else ""
    return f"{source}: {path or getattr(root, 'noun', None) or 'spec'}: {msg}{shown}{more}"


def _section_for(root: type[BaseModel], loc: tuple[str, ...]) -> type[BaseModel] | None:
    """The model class at `loc` below `root`, through fields, lists and dicts of models (a list's
    index or a dict's key in `loc` is skipped: the item's class was chosen at its field)."""
    cls: type[BaseModel] | None = root
    skip = False
    for key in loc:
        if skip:
            skip = False
            continue
        field = cls.model_fields.get(key) if cls is not None else None
        if field is None:
            return None
        cls = _model_in(field.annotation)
        skip = _is_container(field.annotation)
    return cls


def _is_container(annotation) -> bool:
    origin = typing.get_origin(annotation)
    if origin in (list, dict):
        return True
    return any(_is_container(arg) for arg in typing.get_args(annotation)) if origin is not None else False


def _model_in(annotation) -> type[BaseModel] | None:
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    for arg in typing.get_args(annotation):
        found = _model_in(arg)
        if found is not None:
            return found
    return None
