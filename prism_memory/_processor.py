""":class:`WorkingMemoryProcessor`: a host-invoked updater over a memory's public working-memory
calls (:mod:`prism_memory.memory` re-exports it)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, Protocol

from ._memory.core import maybe_await
from .errors import ConfigurationError
from .models import WorkingMemoryRecord

__all__ = ["WorkingDocument", "WorkingMemoryProcessor"]


class WorkingDocument(Protocol):
    """What the processor calls: :meth:`Memory.get_working
    <prism_memory.memory.Memory.get_working>` and :meth:`Memory.update_working
    <prism_memory.memory.Memory.update_working>`."""

    async def get_working(self) -> WorkingMemoryRecord | None: ...

    async def update_working(
        self, data: Mapping[str, Any], *, expected_version: int | None = None
    ) -> WorkingMemoryRecord: ...


class WorkingMemoryProcessor:
    """Explicit, host-invoked working-memory updater. It never runs by itself.

    ``extract(current_data, *args, **kwargs)`` returns the new document (or ``None`` for "no change");
    :meth:`process` writes it with optimistic concurrency against the version it read.
    """

    def __init__(self, memory: WorkingDocument, extract: Callable[..., Any]) -> None:
        if not callable(extract):
            raise ConfigurationError("extract must be callable")
        self._memory = memory
        self._extract = extract

    async def process(self, *args: Any, **kwargs: Any) -> WorkingMemoryRecord | None:
        """Run ``extract`` over the current document and write its result, if any."""
        current = await self._memory.get_working()
        data = dict(current.data) if current is not None else {}
        proposed = await maybe_await(self._extract(data, *args, **kwargs))
        if proposed is None:
            return current
        return await self._memory.update_working(
            proposed, expected_version=current.version if current is not None else 0
        )
