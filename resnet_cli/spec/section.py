"""The base of every spec section: strict types, no unknown keys, frozen."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict


class _Section(BaseModel):
    # strict: "20" is not an int and 20.5 is not a depth; extra: a misspelt key is an error.
    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)
