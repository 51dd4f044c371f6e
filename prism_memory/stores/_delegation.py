"""One method of a role object, reached through the object that holds it: :func:`via`.

The compatibility stores (:class:`~prism_memory.stores.memory.InMemoryVectorStore`,
:class:`~prism_memory.postgres.PostgresVectorStore`, the store a
:class:`~prism_memory.stores.backend.MemoryBackend` makes) are each one object of every role, as
before the roles were objects of their own. They write no forwarding method: each role method
is ``name = via("role_attribute", Role.name)``, so ``store.name`` *is* the role object's bound
method (one attribute lookup, no call of its own) and mypy reads the role's signature.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

__all__ = ["via"]

F = TypeVar("F", bound=Callable[..., Any])


class _Via:
    """The descriptor :func:`via` makes: on an instance, ``getattr(instance.<attr>, name)``."""

    def __init__(self, attr: str, method: Callable[..., Any]) -> None:
        self.attr = attr
        self.name: str = method.__name__
        self.__doc__ = method.__doc__

    def __set_name__(self, owner: type, name: str) -> None:
        if name != self.name:
            raise TypeError(f"via() of {self.name!r} is bound to the name {name!r}")

    def __get__(self, instance: object, owner: type | None = None) -> Any:
        if instance is None:
            return self
        return getattr(getattr(instance, self.attr), self.name)

    def __repr__(self) -> str:
        return f"via({self.attr!r}, {self.name!r})"


def via(attr: str, method: F) -> F:
    """The method ``method`` (a role's, e.g. ``EntryStore.search``) of the object in the holder's
    attribute ``attr``: typed as ``method``, so a caller sees the role's signature."""
    made: Any = _Via(attr, method)
    return made  # type: ignore[no-any-return]


def forwarded(cls: type, name: str) -> str | None:
    """The attribute ``cls.name`` forwards to (:func:`via`), or ``None`` if ``cls`` defines (or
    inherits) it as a method of its own. A class lists in ``_forwards`` the methods it writes
    that still only call their role object's (a wider signature, say): they count as forwarded
    to the role object of the :func:`via` they replace."""
    for klass in cls.__mro__:
        if name in vars(klass):
            found = vars(klass)[name]
            if isinstance(found, _Via):
                return found.attr
            if name not in vars(klass).get("_forwards", ()):
                return None
            # a forwarding method of the class's own: the role of the via() it replaces
    return None
