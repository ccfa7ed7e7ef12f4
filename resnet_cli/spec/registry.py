"""A name -> object registry: one per variant axis, so a table row is data, not a new class."""

from __future__ import annotations

from typing import Callable, Generic, TypeVar

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

    def __getitem__(self, name: str) -> T:
        try:
            return self._items[name]
        except KeyError:
            raise KeyError(f"unknown {self.axis} '{name}'; valid: {', '.join(self._items)}") from None

    def __contains__(self, name: str) -> bool:
        return name in self._items

    def names(self) -> tuple[str, ...]:
        return tuple(self._items)
