"""A named registry: the one place a set of physics choices (collision models, face kinds, and
their CUDA twins) is listed, in registration order."""

from __future__ import annotations

from typing import Any, Generic, TypeVar

__all__ = ["Registry"]

T = TypeVar("T")


class Registry(dict[str, T], Generic[T]):
    """Entries by their ``name``; ``entry`` says what they are in messages ('face kind')."""

    def __init__(self, entry: str, unknown: str | None = None) -> None:
        super().__init__()
        self.entry, self.unknown = entry, unknown or entry

    def register(self, item: T) -> T:
        """Add ``item`` under its ``name`` (which must be new)."""
        name = item.name  # type: ignore[attr-defined]
        if name in self:
            raise ValueError(f"{self.entry[0].upper()}{self.entry[1:]} {name!r} is registered "
                             "already.")
        self[name] = item
        return item

    def named(self, name: Any) -> T:
        """The entry called ``name``; a ValueError listing the choices otherwise."""
        try:
            return self[name]
        except (KeyError, TypeError):
            raise ValueError(f"Unknown {self.unknown} {name!r}; use one of "
                             f"{tuple(self)}.") from None
