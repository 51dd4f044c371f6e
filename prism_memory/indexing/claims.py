"""Which due rows an indexing queue leases when it holds no handed-over rows: the claim strategies.

A queue embeds the rows handed to it first (:meth:`~prism_memory.IndexingQueue.adopt`); otherwise it
asks its :class:`ClaimStrategy` for the next claim. :class:`AllScopes` claims from any scope (the
all-scopes queue); :class:`ThreadTurns` claims for the queue's threads, least recently served first,
sweeping them once per ``idle_poll_seconds`` (a scope-bound or shared queue). A service supplies its
own strategy -- ``prism-memory worker`` takes turns between tenants
(:class:`~prism_memory.postgres.worker.IndexingWorker`).
"""

from __future__ import annotations

import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime

from ..models import MemoryIdentity
from ..stores.base import ClaimedEntry, IndexingLedger
from .policy import IndexingPolicy
from .threads import Threads

__all__ = ["AllScopes", "ClaimContext", "ClaimStrategy", "ThreadTurns", "claim_in"]


@dataclass(frozen=True, slots=True)
class ClaimContext:
    """What a claim strategy may use of the queue asking it (one per queue)."""

    store: IndexingLedger
    worker_id: str
    """The queue's lease owner id."""
    batch_size: int
    policy: IndexingPolicy
    clock: Callable[[], datetime]
    threads: Threads
    """The queue's threads (its members', and those it was handed rows of)."""
    unaccounted: Callable[[], list[MemoryIdentity]]
    """Threads with a watcher waiting for a row the queue neither holds nor has settled."""
    stopping: Callable[[], bool]
    """Whether the queue is stopping (draining what is claimable)."""


class ClaimStrategy(ABC):
    """How a queue claims due rows: one strategy object per queue, asked for one claim at a time
    (never two at once from the worker loop; a thread's own drain claims apart, :func:`claim_in`)."""

    @abstractmethod
    async def claim(self, queue: ClaimContext, limit: int) -> list[ClaimedEntry]:
        """Lease up to ``limit`` due rows to ``queue.worker_id`` for ``policy.lease_seconds``."""

    def idle_seconds(self, queue: ClaimContext) -> float:
        """How long the queue sleeps, with nothing in hand, before it claims again unwoken."""
        return queue.policy.idle_poll_seconds

    def joined(self, scope: MemoryIdentity) -> None:  # noqa: B027 - optional, a no-op here
        """A first member joined ``scope``: pick up what it left pending earlier."""

    def rescan(self) -> None:  # noqa: B027 - optional, a no-op here
        """Look in every thread on the next claim (``run_until_idle``)."""


class AllScopes(ClaimStrategy):
    """Claim from any scope (an all-scopes queue, ``scope=None``)."""

    async def claim(self, queue: ClaimContext, limit: int) -> list[ClaimedEntry]:
        """One claim over every scope of the store."""
        return await queue.store.claim_pending(
            None,
            limit=limit,
            worker_id=queue.worker_id,
            lease_seconds=queue.policy.lease_seconds,
            now=queue.clock(),
        )


class ThreadTurns(ClaimStrategy):
    """Claim for the queue's threads: those whose watchers wait for rows the queue does not hold,
    and -- once per ``idle_poll_seconds`` (a sweep, for due retries and other writers' rows), for
    newly joined threads, and while stopping -- every member's thread, least recently served
    first, in one claim statement."""

    def __init__(self) -> None:
        self._probe: dict[MemoryIdentity, None] = {}
        """Threads to claim from until a claim comes back short (a sweep's, or newly joined)."""
        self._next_sweep = 0.0
        """When (``time.monotonic``) the next idle look for due rows is; the first is at once."""

    def joined(self, scope: MemoryIdentity) -> None:
        """Claim from ``scope`` until a claim comes back short."""
        self._probe[scope] = None

    def rescan(self) -> None:
        """The next claim is a sweep."""
        self._next_sweep = 0.0

    async def claim(self, queue: ClaimContext, limit: int) -> list[ClaimedEntry]:
        """One claim over the threads due now (see the class docs)."""
        threads = queue.threads
        moment = time.monotonic()
        if moment >= self._next_sweep:
            self._next_sweep = moment + queue.policy.idle_poll_seconds
            self._probe = {key: None for key, thread in threads.items() if thread.members}
        elif queue.stopping():  # draining: every member's thread not swept clean just now
            self._probe = {
                key: None
                for key, thread in threads.items()
                if thread.members and not threads.swept(thread, moment)
            }
        wanted = dict(self._probe)
        wanted.update(dict.fromkeys(queue.unaccounted()))
        order = [key for key in threads if key in wanted]
        order += [key for key in wanted if key not in threads]
        claimed = await claim_in(queue, order, limit)
        if len(claimed) < limit:
            self._probe.clear()
        threads.served([item.scope for item in claimed])
        return claimed

    def idle_seconds(self, queue: ClaimContext) -> float:
        """A busy poll while a watcher waits for rows the queue does not hold; else until the next
        sweep (one per ``idle_poll_seconds``)."""
        if queue.unaccounted():
            return queue.policy.busy_poll_seconds
        if self._probe:
            return 0.0
        return max(0.0, self._next_sweep - time.monotonic())


async def claim_in(
    queue: ClaimContext, scopes: Sequence[MemoryIdentity], limit: int
) -> list[ClaimedEntry]:
    """One claim statement over ``scopes`` (at most one embedder batch from each of many); a
    thread it finds nothing due in, and was handed nothing meanwhile, counts as swept."""
    if not scopes:
        return []
    lease, now = queue.policy.lease_seconds, queue.clock()
    started = time.monotonic()
    threads = queue.threads
    handed = {key: thread.handed for key in scopes if (thread := threads.get(key))}
    if len(scopes) == 1:
        claimed = await queue.store.claim_pending(
            scopes[0], limit=limit, worker_id=queue.worker_id, lease_seconds=lease, now=now
        )
    else:
        claimed = await queue.store.claim_pending_in(
            scopes,
            limit=limit,
            per_scope=queue.batch_size,
            worker_id=queue.worker_id,
            lease_seconds=lease,
            now=now,
        )
    found = {item.scope for item in claimed}
    for key, count in handed.items():  # nothing due, and nothing handed over meanwhile
        thread = threads.get(key)
        if key not in found and thread is not None and thread.handed == count:
            thread.swept = started
    return claimed
