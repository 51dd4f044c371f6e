"""The deferred-indexing queue: entries are stored first and embedded here, afterwards.

One :class:`IndexingQueue` runs one named asyncio task with a stop event. It leases pending rows from
the store (so concurrent workers on one database never embed a row twice), embeds them in batches,
and stores the vectors. A failed batch is split so that one poisoned row never blocks the rest; each
failure is recorded on its row with the attempt count and retried with exponential backoff, or marked
``failed`` (and reported) once retrying cannot help. Nothing is silently dropped.

The package keeps one concern per module:

* :mod:`.policy` -- :class:`IndexingPolicy`, how the queue leases, retries and waits;
* :mod:`.queue` -- the worker loop (:class:`IndexingQueue`) and a memory's seat on it
  (:class:`QueueMember`);
* :mod:`.claims` -- what the loop claims when it holds no handed-over rows: a
  :class:`ClaimStrategy` passed in (:class:`AllScopes`, :class:`ThreadTurns`, or a service's own);
* :mod:`.threads` -- the queue's per-thread book: handed-over rows in turns, members, sweeps;
* :mod:`.lanes` -- what the queue has in hand: its lanes, leased rows, claims and batches in flight;
* :mod:`.rows` -- embedding one batch's rows and recording failures (:class:`QueueObserver`);
* :mod:`.waiters` -- the futures :meth:`IndexingQueue.watch` hands out, and :func:`wait_for_worker`;
* :mod:`.shared` -- many memories, one queue: :func:`join_queue` and the per-loop registry.
"""

from __future__ import annotations

from .claims import AllScopes, ClaimContext, ClaimStrategy, ThreadTurns
from .policy import CLAIM_BATCHES, SHARED_LANES, IndexingPolicy
from .queue import IndexingQueue, QueueMember
from .rows import BatchReport, QueueObserver
from .shared import join_queue
from .waiters import wait_for_worker

__all__ = [
    "CLAIM_BATCHES",
    "SHARED_LANES",
    "AllScopes",
    "BatchReport",
    "ClaimContext",
    "ClaimStrategy",
    "IndexingPolicy",
    "IndexingQueue",
    "QueueMember",
    "QueueObserver",
    "ThreadTurns",
    "join_queue",
    "wait_for_worker",
]
