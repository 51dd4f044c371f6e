"""What an indexing queue holds per thread: the rows handed over to it, in turns between threads,
its members, and when a claim last found the thread swept clean."""

from __future__ import annotations

from collections import deque
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field

from ..models import MemoryIdentity
from ..stores.base import ClaimedEntry

__all__ = ["Thread", "Threads"]


@dataclass(slots=True)
class Thread:
    """What a queue holds for one thread."""

    adopted: deque[ClaimedEntry] = field(default_factory=deque)
    """Rows stored leased to this queue, to embed without claiming."""
    members: int = 0
    """Members (memories) open on this thread; the queue's claims cover threads with members."""
    indexed: int = 0
    """Rows of this thread the queue indexed."""
    ready: bool = False
    """Whether the thread is in the queue's turns for its adopted rows."""
    swept: float | None = None
    """When (``time.monotonic``) a claim over this thread last found nothing due, if no row of it
    was handed to the queue since (``None``: unknown). Stopping skips a thread swept within the
    policy's ``idle_poll_seconds``: a memory whose rows were all written indexed closes without a
    claim round trip."""
    handed: int = 0
    """Bumped whenever rows of this thread may have become pending through this queue (a lease,
    a watch, a failure to retry): a claim in flight meanwhile does not count as a sweep."""


class Threads:
    """A queue's threads, least recently served first (claims and turns follow this order), and
    the turns its adopted rows are embedded in: one embedder batch of each thread per round."""

    def __init__(self, *, batch_size: int, idle_poll_seconds: float) -> None:
        self._batch_size = batch_size
        self._idle_poll_seconds = idle_poll_seconds
        self._threads: dict[MemoryIdentity, Thread] = {}
        self._ready: deque[MemoryIdentity] = deque()
        """Threads with adopted rows, in turn order."""

    def __iter__(self) -> Iterator[MemoryIdentity]:
        return iter(self._threads)

    def __contains__(self, scope: object) -> bool:
        return scope in self._threads

    def items(self) -> Iterator[tuple[MemoryIdentity, Thread]]:
        """Each thread with what the queue holds for it, in order."""
        return iter(list(self._threads.items()))

    def get(self, scope: MemoryIdentity) -> Thread | None:
        """What the queue holds for ``scope``, if anything."""
        return self._threads.get(scope)

    def thread(self, scope: MemoryIdentity, *, members: int = 0) -> Thread:
        """What the queue holds for ``scope``, created if new."""
        thread = self._threads.get(scope)
        if thread is None:
            thread = self._threads[scope] = Thread(members=members)
        return thread

    def touch(self, scope: MemoryIdentity) -> None:
        """Rows of ``scope`` may have become pending through this queue: not swept any more."""
        thread = self._threads.get(scope)
        if thread is not None:
            thread.swept = None
            thread.handed += 1

    def adopt(self, item: ClaimedEntry) -> None:
        """Queue ``item`` (stored leased to this queue) in its thread's turn."""
        thread = self.thread(item.scope)
        thread.swept = None
        thread.handed += 1
        thread.adopted.append(item)
        if not thread.ready:
            thread.ready = True
            self._ready.append(item.scope)

    def has_adopted(self) -> bool:
        """Whether any thread in the turns still has adopted rows."""
        return any(self._threads[key].adopted for key in self._ready)

    def take_adopted(self, limit: int, scope: MemoryIdentity | None) -> list[ClaimedEntry]:
        """Up to ``limit`` adopted rows: of ``scope``, or one embedder batch per thread in turns."""
        if scope is not None:
            thread = self._threads.get(scope)
            if thread is None:
                return []
            return [thread.adopted.popleft() for _ in range(min(limit, len(thread.adopted)))]
        taken: list[ClaimedEntry] = []
        while self._ready and len(taken) < limit:
            key = self._ready.popleft()
            thread = self._threads[key]
            count = min(self._batch_size, limit - len(taken), len(thread.adopted))
            taken.extend(thread.adopted.popleft() for _ in range(count))
            if thread.adopted:
                self._ready.append(key)
            else:
                thread.ready = False
                if thread.members <= 0:  # its memory has left and this was its last row
                    del self._threads[key]
        return taken

    def count(self, items: Sequence[ClaimedEntry], indexed: int) -> None:
        """``indexed`` of ``items`` got their vectors stored: credit their threads."""
        if indexed == len(items):
            for item in items:
                thread = self._threads.get(item.scope)
                if thread is not None:
                    thread.indexed += 1
            return
        scopes = {item.scope for item in items}
        if len(scopes) == 1:  # some leases were lost; which rows is unknown, the thread is not
            thread = self._threads.get(scopes.pop())
            if thread is not None:
                thread.indexed += indexed

    def drop_adopted(self) -> None:
        """Forget every adopted row (the queue is closing; their leases are released)."""
        for thread in self._threads.values():
            thread.adopted.clear()
            thread.ready = False
        self._ready.clear()

    def served(self, scopes: list[MemoryIdentity]) -> None:
        """``scopes`` were served: to the back of the order."""
        for key in dict.fromkeys(scopes):
            thread = self._threads.pop(key, None)
            if thread is not None:
                self._threads[key] = thread

    def swept(self, thread: Thread, moment: float) -> bool:
        """Whether a claim found nothing due in ``thread`` within the last ``idle_poll_seconds``
        and no row of it was handed to this queue since."""
        return thread.swept is not None and moment - thread.swept < self._idle_poll_seconds

    def left(self, scope: MemoryIdentity) -> None:
        """A member of ``scope`` left: the thread goes once it has no member and no adopted row."""
        thread = self._threads.get(scope)
        if thread is not None:
            thread.members -= 1
            if thread.members <= 0 and not thread.adopted:
                del self._threads[scope]
                if thread.ready:  # a scoped take emptied it while its turn was queued
                    self._ready.remove(scope)
