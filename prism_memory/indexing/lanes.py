"""What an indexing queue has in hand: its lanes (the batches it embeds at once), the rows leased to
it, the rows of each thread taken into a batch, the claims in flight, and the batches finishing
beside its loop."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Coroutine, Iterator, Sequence
from typing import Any

from ..models import MemoryIdentity
from ..stores.base import ClaimedEntry

__all__ = ["Lanes"]

_Key = tuple[MemoryIdentity, str]


class Lanes:
    """The batches of one queue: at most ``size`` in hand at once, and the rows in them.

    ``held`` holds the rows leased to the queue and not yet settled (handed-over rows from when the
    queue adopts them): nothing to claim or ask the store about.
    """

    __slots__ = ("_apart", "_claiming", "_flying", "_free", "_landed", "held", "size")

    def __init__(self, size: int) -> None:
        self.size = size
        self.held: set[_Key] = set()
        self._free = asyncio.Semaphore(size)
        """A lane per batch in hand."""
        self._apart: set[asyncio.Task[None]] = set()
        """Batches handed off to finish beside the worker loop (a shared queue's other lanes)."""
        self._flying: dict[MemoryIdentity, int] = {}
        """Rows per thread taken into a batch and not yet finished."""
        self._landed = asyncio.Event()
        """Set whenever a batch or a claim finishes."""
        self._claiming = 0
        """Claim statements in flight: rows they lease are in no one's hands until they return."""

    async def acquire(self) -> None:
        """Wait for a free lane and take it."""
        await self._free.acquire()

    def release(self) -> None:
        """Free the lane of a batch that finished (or never started)."""
        self._free.release()

    @contextlib.contextmanager
    def claiming(self) -> Iterator[None]:
        """Around one claim statement, which may lease rows until it returns."""
        self._claiming += 1
        try:
            yield
        finally:
            self._claiming -= 1
            self._landed.set()

    def take(self, claimed: Sequence[ClaimedEntry]) -> None:
        """``claimed`` goes into a batch: held, and in flight for its threads."""
        self.held.update((item.scope, item.id) for item in claimed)
        for item in claimed:
            self._flying[item.scope] = self._flying.get(item.scope, 0) + 1

    def land(self, claimed: Sequence[ClaimedEntry]) -> None:
        """The batch of ``claimed`` finished, whatever became of its rows."""
        self.held.difference_update((item.scope, item.id) for item in claimed)
        for item in claimed:
            left = self._flying.get(item.scope, 0) - 1
            if left > 0:
                self._flying[item.scope] = left
            else:
                self._flying.pop(item.scope, None)
        self._landed.set()

    def apart(self, batch: Coroutine[Any, Any, None]) -> None:
        """Finish ``batch`` in a task of its own (it releases its lane itself)."""
        task = asyncio.create_task(batch)
        self._apart.add(task)
        task.add_done_callback(self._apart.discard)

    def apart_tasks(self) -> list[asyncio.Task[None]]:
        """The batches finishing beside the loop now."""
        return list(self._apart)

    async def landing(self) -> None:
        """Wait for the batches finishing beside the loop."""
        while self._apart:
            await asyncio.wait(set(self._apart))

    async def settled(self, scope: MemoryIdentity) -> None:
        """Wait until no batch holds rows of ``scope`` and no claim is in flight (another lane's
        claim may be leasing them: it skipped them as locked and has not returned yet)."""
        while self._flying.get(scope) or self._claiming:
            self._landed.clear()
            if self._flying.get(scope) or self._claiming:
                await self._landed.wait()
