"""Who waits on an indexing queue: the futures :meth:`~prism_memory.IndexingQueue.watch` hands out,
the rows the queue settled for them, and :func:`wait_for_worker` for rows someone else embeds."""

from __future__ import annotations

import asyncio
from collections.abc import Collection, Sequence
from dataclasses import dataclass

from ..errors import IndexingError
from ..models import IndexingReport, IndexStatus, MemoryIdentity
from ..stores.base import ClaimedEntry, IndexingLedger
from .policy import IndexingPolicy

__all__ = ["Waiters", "wait_for_worker"]

_Key = tuple[MemoryIdentity, str]


@dataclass(slots=True)
class _Waiter:
    scope: MemoryIdentity
    ids: frozenset[str]
    future: asyncio.Future[IndexingReport]
    owner: object | None
    """The member that asked (its watchers fail when it leaves); ``None``: the queue's own."""


class Waiters:
    """The watchers of one queue and what it settled for them.

    ``held`` is the queue's set of rows leased to it and not yet settled (it changes as the queue
    works): nothing to ask the store about, and a watcher waiting only for such rows needs no claim.
    """

    def __init__(self, store: IndexingLedger, held: Collection[_Key]) -> None:
        self._store = store
        self._held = held
        self._waiters: list[_Waiter] = []
        self._settled: dict[_Key, tuple[IndexStatus, str | None]] = {}
        """Rows the queue indexed itself, so a waiter resolves without asking the store."""

    def __bool__(self) -> bool:
        """Whether anyone waits (or a resolved watcher is not yet cleared)."""
        return bool(self._waiters)

    def add(
        self, scope: MemoryIdentity, ids: Sequence[str], owner: object | None
    ) -> asyncio.Future[IndexingReport]:
        """A future for ``ids`` of ``scope``; resolved at once when ``ids`` is empty."""
        future: asyncio.Future[IndexingReport] = asyncio.get_running_loop().create_future()
        if not ids:
            future.set_result(IndexingReport(indexed=()))
            return future
        self._waiters.append(_Waiter(scope, frozenset(ids), future, owner))
        return future

    def settle(self, items: Sequence[ClaimedEntry]) -> None:
        """``items`` were indexed by the queue (kept only while someone waits)."""
        if self._waiters:
            self._settled.update(((item.scope, item.id), ("indexed", None)) for item in items)

    def unaccounted(self) -> list[MemoryIdentity]:
        """Threads with a watcher waiting for a row this queue neither holds nor has settled."""
        threads: dict[MemoryIdentity, None] = {}
        for waiter in self._waiters:
            if waiter.scope in threads or waiter.future.done():
                continue
            if any(
                (waiter.scope, entry_id) not in self._held
                and (waiter.scope, entry_id) not in self._settled
                for entry_id in waiter.ids
            ):
                threads[waiter.scope] = None
        return list(threads)

    def fail(self, owner: object | None) -> None:
        """Fail the watchers still waiting (``owner``'s, or every one for ``None``)."""
        remaining: list[_Waiter] = []
        for waiter in self._waiters:
            if owner is not None and waiter.owner is not owner:
                remaining.append(waiter)
                continue
            if not waiter.future.done():
                waiter.future.set_exception(
                    IndexingError(
                        "memory closed before these entries were indexed; they remain pending",
                        dict.fromkeys(waiter.ids, "pending at close"),
                    )
                )
                waiter.future.exception()  # retrieved here, so asyncio does not log it as lost
        self._waiters = remaining

    async def resolve(self) -> None:
        """Resolve every watcher whose rows are all indexed, failed or gone."""
        if not self._waiters:
            return
        wanted: dict[MemoryIdentity, set[str]] = {}
        considered = {id(waiter) for waiter in self._waiters}
        for waiter in self._waiters:
            if not waiter.future.done():
                wanted.setdefault(waiter.scope, set()).update(waiter.ids)
        status: dict[_Key, tuple[IndexStatus, str | None]] = {}
        asked: set[_Key] = set()  # rows the store was asked about: absent from its answer = gone
        for scope, ids in wanted.items():
            unknown = [
                entry_id
                for entry_id in sorted(ids)
                if (scope, entry_id) not in self._settled and (scope, entry_id) not in self._held
            ]
            if unknown:
                found = await self._store.index_status(scope, unknown)
                asked.update((scope, entry_id) for entry_id in unknown)
                status.update(((scope, entry_id), state) for entry_id, state in found.items())
        remaining: list[_Waiter] = []
        for waiter in self._waiters:
            if waiter.future.done():
                continue
            if id(waiter) not in considered:  # it came while the store was asked: next time
                remaining.append(waiter)
                continue
            # what this queue settled meanwhile (other lanes finish while the store is asked)
            # wins; a row neither settled nor looked up is still in hand, or lost its lease
            states = {
                entry_id: self._settled.get(key) or status.get(key)
                for entry_id in waiter.ids
                for key in [(waiter.scope, entry_id)]
            }
            if any(
                (state is None and (waiter.scope, entry_id) not in asked)
                or (state is not None and state[0] == "pending")
                for entry_id, state in states.items()
            ):
                remaining.append(waiter)
                continue
            waiter.future.set_result(
                IndexingReport(
                    indexed=tuple(sorted(i for i, s in states.items() if s and s[0] == "indexed")),
                    failed={
                        i: s[1] or "failed"
                        for i, s in sorted(states.items())
                        if s and s[0] == "failed"
                    },
                )
            )
        self._waiters = remaining
        still = {(waiter.scope, entry_id) for waiter in remaining for entry_id in waiter.ids}
        self._settled = {key: s for key, s in self._settled.items() if key in still}


async def wait_for_worker(
    store: IndexingLedger, scope: MemoryIdentity, ids: Sequence[str], policy: IndexingPolicy
) -> IndexingReport:
    """Wait until every one of ``ids`` is indexed or failed (or gone) by someone else -- a
    worker-only memory's ``done``: it asks the store every ``busy_poll_seconds`` at first, backing
    off to ``idle_poll_seconds``."""
    delay = policy.busy_poll_seconds
    while True:
        found = await store.index_status(scope, ids)
        if all(state != "pending" for state, _ in found.values()):
            return IndexingReport(
                indexed=tuple(sorted(i for i, (s, _) in found.items() if s == "indexed")),
                failed={i: e or "failed" for i, (s, e) in sorted(found.items()) if s == "failed"},
            )
        await asyncio.sleep(delay)
        delay = min(delay * 2, policy.idle_poll_seconds)
