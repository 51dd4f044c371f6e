"""Many memories, one queue: the shared queues of each event loop, behind :func:`join_queue`.

Every :class:`~prism_memory.Memory` open in one event loop on one vector store with one embedder
(and the same batch size, indexing policy and clock) joins one shared queue and holds a
:class:`~.queue.QueueMember`. The first member starts the queue's task; the last to leave stops it;
a member leaving before drains its own thread only. The queue serves its threads in turns (one
embedder batch of each thread's handed-over rows per round), looks for due retries and other
writers' rows once per ``idle_poll_seconds`` with one claim statement for all its threads
(:meth:`~prism_memory.stores.base.IndexingLedger.claim_pending_in`), and resolves each member's
watchers from its own completions.
"""

from __future__ import annotations

import asyncio
import weakref
from collections.abc import Callable
from datetime import datetime

from ..embedding import Embedder
from ..models import MemoryIdentity
from ..stores.base import IndexingLedger
from .claims import ThreadTurns
from .generations import NextModelWriter
from .policy import SHARED_LANES, IndexingPolicy
from .queue import IndexingQueue, QueueMember

__all__ = ["SharedQueues", "join_queue"]

_Key = tuple[int, int, int, int, IndexingPolicy, int, int]


class SharedQueues:
    """The shared queues by (event loop, store, embedder, batch size, policy, clock); a queue is
    handed out until it is closed (its last member left), and dropped once nothing references it."""

    def __init__(self) -> None:
        self._queues: weakref.WeakValueDictionary[_Key, IndexingQueue] = (
            weakref.WeakValueDictionary()
        )
        self._made_for: weakref.WeakKeyDictionary[IndexingQueue, tuple[object, ...]] = (
            weakref.WeakKeyDictionary()
        )
        """What each queue was made for: the very objects, not just their ids."""

    def queue(
        self,
        *,
        store: IndexingLedger,
        embedder: Embedder,
        batch_size: int,
        clock: Callable[[], datetime],
        policy: IndexingPolicy,
        next_writer: NextModelWriter | None = None,
    ) -> IndexingQueue:
        """The open shared queue of the running event loop for these, made if there is none
        (memories with another ``next_writer`` embedder share none)."""
        loop = asyncio.get_running_loop()
        following = None if next_writer is None else next_writer.embedder
        key = (id(loop), id(store), id(embedder), batch_size, policy, id(clock), id(following))
        made_for = (loop, store, embedder, clock, following)
        queue = self._queues.get(key)
        made = None if queue is None else self._made_for.get(queue)
        if (
            queue is None
            or queue.closed
            or made is None
            or any(mine is not theirs for mine, theirs in zip(made, made_for, strict=True))
        ):
            queue = IndexingQueue(
                store=store,
                embedder=embedder,
                scope=None,
                batch_size=batch_size,
                clock=clock,
                policy=policy,
                claims=ThreadTurns(),
                lanes=SHARED_LANES,
                next_writer=next_writer,
            )
            self._queues[key] = queue
            self._made_for[queue] = made_for
        return queue


_SHARED = SharedQueues()
"""This process's shared queues (one registry; each entry is per event loop)."""


def join_queue(
    *,
    store: IndexingLedger,
    embedder: Embedder,
    scope: MemoryIdentity,
    batch_size: int,
    clock: Callable[[], datetime],
    policy: IndexingPolicy | None = None,
    next_writer: NextModelWriter | None = None,
) -> QueueMember:
    """Join the indexing queue every memory of this event loop shares on ``store`` with
    ``embedder`` (the same object, hence the same model: a row is never embedded by another
    model), batch size, policy and clock -- one task, one claim statement per sweep; the first
    member creates it, the last to leave stops it. Call :meth:`QueueMember.start` to run it.
    ``next_writer`` (a memory's ``next_embedder``) dual-writes each batch's vectors of the next
    model; memories share a queue only with the same next embedder too."""
    queue = _SHARED.queue(
        store=store,
        embedder=embedder,
        batch_size=batch_size,
        clock=clock,
        policy=policy or IndexingPolicy(),
        next_writer=next_writer,
    )
    return queue.join(scope)
