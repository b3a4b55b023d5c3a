"""Name -> object registries: advantage estimators, policy losses, reward managers, scorers,
tool-call parsers (each registry is created where its entries are defined).

A registry holds entries that all share one signature (documented where the registry is
created), so call sites never branch on a name. Registering a name twice is an error, and
looking up an unknown name raises an error that lists the valid ones.

    ADV = Registry("advantage estimator")

    @ADV.register("grpo")
    def grpo(...): ...

    ADV.get("grpo")      # the function
    ADV.get("gpro")      # UnknownNameError: unknown advantage estimator 'gpro'; valid: gae, grpo
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from enum import Enum
from typing import Generic, TypeVar

T = TypeVar("T")


class UnknownNameError(KeyError, ValueError):
    """A registry lookup for a name that is not registered.

    It is both a ``KeyError`` and a ``ValueError`` so that code written against either of
    verl's conventions catches it.
    """

    def __str__(self) -> str:  # KeyError would quote the whole message
        return str(self.args[0]) if self.args else ""


def _key(name: str | Enum) -> str:
    # A str-Enum member hashes by its member name, not its value: normalise to the value.
    return str(name.value) if isinstance(name, Enum) else str(name)


class Registry(Generic[T]):
    """A mapping from unique names to objects of one kind (``what`` names the kind)."""

    def __init__(self, what: str) -> None:
        self.what = what
        self._entries: dict[str, T] = {}

    def register(self, name: str | Enum) -> Callable[[T], T]:
        """Decorator that registers its target under ``name``; duplicates raise ValueError."""
        key = _key(name)

        def decorator(obj: T) -> T:
            if key in self._entries:
                raise ValueError(
                    f"{self.what} {key!r} is already registered "
                    f"(by {getattr(self._entries[key], '__qualname__', self._entries[key])!r})"
                )
            self._entries[key] = obj
            return obj

        return decorator

    def get(self, name: str | Enum) -> T:
        """Return the entry for ``name`` or raise UnknownNameError listing the valid names."""
        key = _key(name)
        try:
            return self._entries[key]
        except KeyError:
            raise UnknownNameError(
                f"unknown {self.what} {key!r}; valid: {', '.join(sorted(self._entries))}"
            ) from None

    def unregister(self, name: str | Enum) -> T:
        """Remove and return the entry for ``name`` (for tests and interactive sessions)."""
        self.get(name)  # raises with the valid names when absent
        return self._entries.pop(_key(name))

    def names(self) -> list[str]:
        """The registered names, sorted."""
        return sorted(self._entries)

    def __contains__(self, name: object) -> bool:
        return isinstance(name, (str, Enum)) and _key(name) in self._entries

    def __iter__(self) -> Iterator[str]:
        return iter(self.names())
