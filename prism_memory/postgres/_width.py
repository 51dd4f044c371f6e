"""The width of the entries' vectors on PostgreSQL (:class:`VectorWidth`), which every write
checks against and recall's search reads: shared by the entries, the ledger and governance."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable

from .._windowed import OwnVector, WindowedVector, checked_own
from .repositories import EntryRepository

__all__ = ["VectorWidth"]


class VectorWidth:
    """The width of the entries' vectors: the pinned ``dimension``, else the width of the first
    vector stored (an unpinned table keeps one width), read once and remembered -- unless the
    store registered vector generations: then the width of the vectors' model's generation, or
    the primary's (``registry``), for a promotion may have changed the entries' own width."""

    __slots__ = ("dimension", "registry", "value")

    def __init__(
        self,
        dimension: int | None,
        registry: Callable[[str | None], Awaitable[int | None]] | None = None,
    ) -> None:
        self.dimension = dimension
        self.registry = registry
        self.value = dimension

    async def known(self, entries: EntryRepository, model: str | None = None) -> int | None:
        """The width vectors of ``model`` must have, read through ``entries`` while it is not
        known yet."""
        if self.registry is not None:
            registered = await self.registry(model)
            if registered is not None:
                return registered
        if self.value is None:
            self.value = await entries.any_width()
        return self.value

    def learn(self, width: int | None) -> None:
        """Remember the width of vectors just stored (the first ones of an unpinned table)."""
        if self.value is None and width is not None:
            self.value = width

    @staticmethod
    def check(
        vectors: Iterable[tuple[object, str]], width: int | None
    ) -> tuple[list[OwnVector], int | None]:
        """Every own vector (and its later windows, :class:`~prism_memory.windows.WindowedVector`)
        finite and of ``width`` (the first one's when ``None``), each named by its label in an
        error; the checked vectors and their width."""
        checked: list[OwnVector] = []
        for vector, label in vectors:
            main, windows = checked_own(vector, label, width)
            width = main.shape[0]
            checked.append(main if windows is None else WindowedVector(main, windows))
        return checked, width
