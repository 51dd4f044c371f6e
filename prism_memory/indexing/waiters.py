"""Who waits on an indexing queue: the futures :meth:`~prism_memory.IndexingQueue.watch` hands out,
the rows the queue settled for them, and :func:`wait_for_worker` for rows someone else embeds."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Collection, Sequence
from dataclasses import dataclass, field

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
    left: set[str] = field(default_factory=set)
    """Its ids whose outcome is not known yet."""
    states: dict[str, tuple[IndexStatus, str | None] | None] = field(default_factory=dict)
    """The outcomes known (``None``: the row is gone)."""
    due: float = 0.0
    """When the store is next asked about all of :attr:`left` this queue does not hold."""
    interval: float = 0.0
    """The wait before the ask after that (doubling, see :meth:`Waiters.resolve`)."""


class Waiters:
    """The watchers of one queue and what it settled for them.

    ``held`` is the queue's set of rows leased to it and not yet settled (it changes as the queue
    works): nothing to ask the store about, and a watcher waiting only for such rows needs no claim.

    What it costs stays linear in the rows watched. A watcher learns what this queue indexed from
    the batches themselves (:meth:`settle`); the store is asked at once only about the rows a batch
    took and did not settle (:meth:`landed`: failed, or lost their lease), and about the rest --
    rows another worker may embed -- on a backoff: after ``busy_poll_seconds``, doubling up to
    ``idle_poll_seconds``, and never sooner than ten times what the last such ask took. Asking
    about every watched row after every batch made a 33,000-row ``remember`` quadratic (the worker
    stalled in ``index_status``).
    """

    def __init__(
        self,
        store: IndexingLedger,
        held: Collection[_Key],
        policy: IndexingPolicy | None = None,
    ) -> None:
        self._store = store
        self._held = held
        policy = policy or IndexingPolicy()
        self._first_interval = policy.busy_poll_seconds
        self._max_interval = policy.idle_poll_seconds
        self._waiters: list[_Waiter] = []
        self._by_key: dict[_Key, list[_Waiter]] = {}
        """Who waits for which row (so what a batch settles reaches its watchers directly)."""
        self._fresh: dict[_Key, tuple[IndexStatus, str | None] | None] = {}
        """Rows batches settled (their state) or let go unsettled (``None``: ask the store) since
        the last :meth:`resolve` -- kept only while someone waits."""

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
        wanted = frozenset(ids)
        waiter = _Waiter(scope, wanted, future, owner, left=set(wanted))
        self._waiters.append(waiter)
        for entry_id in wanted:
            self._by_key.setdefault((scope, entry_id), []).append(waiter)
        return future

    def settle(self, items: Sequence[ClaimedEntry]) -> None:
        """``items`` were indexed by the queue (kept only while someone waits)."""
        if self._waiters:
            self._fresh.update(((item.scope, item.id), ("indexed", None)) for item in items)

    def landed(self, items: Sequence[ClaimedEntry]) -> None:
        """``items`` left the queue's hands (after :meth:`settle` for those it indexed): the
        store is asked about any not settled at the next :meth:`resolve`."""
        if self._waiters:
            for item in items:
                self._fresh.setdefault((item.scope, item.id), None)

    def unaccounted(self) -> list[MemoryIdentity]:
        """Threads with a watcher waiting for a row this queue neither holds nor has settled."""
        threads: dict[MemoryIdentity, None] = {}
        for waiter in self._waiters:
            if waiter.scope in threads or waiter.future.done():
                continue
            if any(
                (waiter.scope, entry_id) not in self._held
                and self._fresh.get((waiter.scope, entry_id)) is None
                for entry_id in waiter.left
            ):
                threads[waiter.scope] = None
        return list(threads)

    def fail(self, owner: object | None, why: str = "memory closed") -> None:
        """Fail the watchers still waiting (``owner``'s, or every one for ``None``) because of
        ``why``."""
        remaining: list[_Waiter] = []
        for waiter in self._waiters:
            if owner is not None and waiter.owner is not owner:
                remaining.append(waiter)
                continue
            self._forget(waiter)
            if not waiter.future.done():
                waiter.future.set_exception(
                    IndexingError(
                        f"{why} before these entries were indexed; they remain pending",
                        dict.fromkeys(waiter.ids, "pending at close"),
                    )
                )
                waiter.future.exception()  # retrieved here, so asyncio does not log it as lost
        self._waiters = remaining
        if not self._waiters:
            self._fresh.clear()

    async def resolve(self, *, full: bool = False) -> None:
        """Resolve every watcher whose rows are all indexed, failed or gone: from what the
        batches settled, and the store's answer about the rows they let go unsettled and (on
        the watcher's backoff, or every row with ``full``) those this queue does not hold."""
        if not self._waiters:
            self._fresh.clear()
            return
        fresh, self._fresh = self._fresh, {}
        asks: dict[MemoryIdentity, set[str]] = {}
        for key, state in fresh.items():
            if state is None:  # let go unsettled: ask the store, if anyone waits for it
                if any(key[1] in w.left for w in self._by_key.get(key, ())):
                    asks.setdefault(key[0], set()).add(key[1])
            else:
                self._learn(key, state)
        now = time.monotonic()
        whole = [w for w in self._waiters if not w.future.done() and (full or now >= w.due)]
        for waiter in whole:  # every row it waits for that this queue does not hold
            unheld = (i for i in waiter.left if (waiter.scope, i) not in self._held)
            asks.setdefault(waiter.scope, set()).update(unheld)
        started = time.monotonic()
        answers: dict[_Key, tuple[IndexStatus, str | None] | None] = {}
        for scope, ids in asks.items():
            if ids:
                found = await self._store.index_status(scope, sorted(ids))
                answers.update(((scope, i), found.get(i)) for i in ids)
        took = time.monotonic() - started
        for waiter in whole:
            waiter.interval = (
                self._first_interval
                if waiter.interval == 0.0
                else min(waiter.interval * 2, self._max_interval)
            )
            waiter.due = time.monotonic() + max(waiter.interval, 10 * took)
        # what the queue settled while the store was asked wins over the store's answer
        for key, state in list(self._fresh.items()):
            if state is not None:
                self._learn(key, state)
        for key, answer in answers.items():
            if answer is None or answer[0] != "pending":
                self._learn(key, answer)
        remaining: list[_Waiter] = []
        for waiter in self._waiters:
            if waiter.future.done():
                self._forget(waiter)
                continue
            if waiter.left:
                remaining.append(waiter)
                continue
            self._forget(waiter)
            states = waiter.states
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
        if not remaining:
            self._fresh.clear()

    def _learn(self, key: _Key, state: tuple[IndexStatus, str | None] | None) -> None:
        """Row ``key``'s outcome (``None``: gone), for every watcher still waiting for it."""
        for waiter in self._by_key.get(key, ()):
            if key[1] in waiter.left:
                waiter.states[key[1]] = state
                waiter.left.discard(key[1])

    def _forget(self, waiter: _Waiter) -> None:
        """Drop ``waiter`` from the index of who waits for which row."""
        for entry_id in waiter.ids:
            key = (waiter.scope, entry_id)
            watching = self._by_key.get(key)
            if watching is None:
                continue
            watching[:] = [w for w in watching if w is not waiter]
            if not watching:
                del self._by_key[key]


async def wait_for_worker(
    store: IndexingLedger, scope: MemoryIdentity, ids: Sequence[str], policy: IndexingPolicy
) -> IndexingReport:
    """Wait until every one of ``ids`` is indexed or failed (or gone) by someone else -- a
    worker-only memory's ``done``: it asks the store every ``busy_poll_seconds`` at first, backing
    off to ``idle_poll_seconds``, about the rows still pending."""
    delay = policy.busy_poll_seconds
    known: dict[str, tuple[IndexStatus, str | None]] = {}
    left = list(dict.fromkeys(ids))  # each poll asks only about the rows still pending
    while True:
        found = await store.index_status(scope, left)
        known.update((i, state) for i, state in found.items() if state[0] != "pending")
        left = [i for i, (state, _) in found.items() if state == "pending"]
        if not left:
            return IndexingReport(
                indexed=tuple(sorted(i for i, (s, _) in known.items() if s == "indexed")),
                failed={i: e or "failed" for i, (s, e) in sorted(known.items()) if s == "failed"},
            )
        await asyncio.sleep(delay)
        delay = min(delay * 2, policy.idle_poll_seconds)
