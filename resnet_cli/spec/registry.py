"""A name -> object registry: one per variant axis, so a table row is data, not a new class.

`one_of(registry)` is the spec's field type for a name on such an axis. It checks against the
registry as it is when a spec is validated (not a `Literal` frozen at import), so a row registered
later, from a plug-in or a test, validates at once; the error reads as pydantic's own for a
Literal: "Input should be 'a', 'b' or 'c' (got 'd')".
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Annotated, Any, Callable, Generic, TypeVar

from pydantic import PlainValidator
from pydantic_core import PydanticCustomError

T = TypeVar("T")


class Registry(Generic[T]):
    def __init__(self, axis: str):
        self.axis = axis
        self._items: dict[str, T] = {}

    def register(self, name: str) -> Callable[[T], T]:
        def add(obj: T) -> T:
            if name in self._items:
                raise ValueError(f"{self.axis} '{name}' is registered twice")
            self._items[name] = obj
            return obj

        return add

    def unregister(self, name: str) -> T:
        """Remove a row (a test's toy entry, in its teardown); unknown names raise as lookups do."""
        obj = self[name]
        del self._items[name]
        return obj

    def __getitem__(self, name: str) -> T:
        try:
            return self._items[name]
        except KeyError:
            raise KeyError(f"unknown {self.axis} '{name}'; valid: {', '.join(self._items)}") from None

    def __contains__(self, name: object) -> bool:
        return name in self._items

    def __iter__(self) -> Iterator[str]:
        return iter(tuple(self._items))

    def __len__(self) -> int:
        return len(self._items)

    def names(self) -> tuple[str, ...]:
        return tuple(self._items)

    def items(self) -> tuple[tuple[str, T], ...]:
        return tuple(self._items.items())


def choices(names: tuple[str, ...]) -> str:
    """'a', 'b' or 'c': pydantic's wording for a Literal's values."""
    quoted = [repr(n) for n in names]
    return quoted[0] if len(quoted) == 1 else f"{', '.join(quoted[:-1])} or {quoted[-1]}"


class OneOf:
    """The validator behind `one_of`; its `registry` tells a reader of the schema (the spec fuzzer,
    the docs) where the valid values live."""

    def __init__(self, registry: Registry):
        self.registry = registry

    def __call__(self, value: Any) -> str:
        if isinstance(value, str) and value in self.registry:
            return value
        raise PydanticCustomError("literal_error", "Input should be {expected}",
                                  {"expected": choices(self.registry.names())})


def one_of(registry: Registry) -> Any:
    """A spec field type: a str naming a row of `registry`, checked against it at validation."""
    return Annotated[str, PlainValidator(OneOf(registry))]


class Column(Mapping):
    """One column of a registry's rows as a read-only mapping name -> value, read live (a row
    registered later is in it): the shape of the parallel dicts such tables replaced, for the code
    that indexes them. `where` leaves out the rows the column does not apply to."""

    def __init__(self, registry: Registry, get: Callable[[Any], Any], where: Callable[[Any], bool] = lambda row: True):
        self._registry, self._get, self._where = registry, get, where

    def __getitem__(self, name: str) -> Any:
        if name not in self._registry or not self._where(self._registry[name]):
            raise KeyError(name)
        return self._get(self._registry[name])

    def __iter__(self) -> Iterator[str]:
        return (n for n, row in self._registry.items() if self._where(row))

    def __len__(self) -> int:
        return sum(1 for _ in self)
