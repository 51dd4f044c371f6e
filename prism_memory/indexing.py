"""The deferred-indexing queue: entries are stored first and embedded here, afterwards.

One :class:`IndexingQueue` runs one named asyncio task with a stop event. It leases pending rows from
the store (so concurrent workers on one database never embed a row twice), embeds them in batches,
and stores the vectors. A failed batch is split so that one poisoned row never blocks the rest; each
failure is recorded on its row with the attempt count and retried with exponential backoff, or marked
``failed`` (and reported) once retrying cannot help. Nothing is silently dropped.

Many memories, one queue: every :class:`~prism_memory.Memory` open in one event loop on one vector
store with one embedder (and the same batch size, indexing policy and clock) joins one shared queue
through :func:`join_queue` and holds a :class:`QueueMember`. The first member starts the queue's
task; the last to leave stops it; a member leaving before drains its own thread only. The queue
serves its threads in turns (one embedder batch of each thread's handed-over rows per round), looks
for due retries and other writers' rows once per ``idle_poll_seconds`` with one claim statement for
all its threads (:meth:`~prism_memory.stores.base.VectorStore.claim_pending_in`), and resolves each
member's watchers from its own completions.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
import uuid
import weakref
from collections import deque
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from .embedding import Embedder, embed_batched, embedder_model
from .errors import EmbedderError, IndexingError, InvalidVectorError, PrismMemoryError
from .models import IndexingReport, IndexStatus, MemoryIdentity, Vector
from .stores.base import ClaimedEntry, EntryLease, VectorStore

__all__ = [
    "CLAIM_BATCHES",
    "SHARED_LANES",
    "IndexingPolicy",
    "IndexingQueue",
    "QueueMember",
    "join_queue",
    "wait_for_worker",
]

logger = logging.getLogger("prism_memory.indexing")

CLAIM_BATCHES = 4
"""A worker leases this many embedder batches at a time, so claims and stores are amortised."""

SHARED_LANES = 4
"""A shared queue embeds and stores up to this many claims at once (the next one is taken while
the others wait on the embedder or the database); claims themselves are taken one at a time."""


@dataclass(frozen=True, slots=True)
class IndexingPolicy:
    """How the queue leases, retries and waits."""

    lease_seconds: float = 60.0
    """How long a claimed row stays leased to this worker."""
    max_attempts: int = 5
    """Attempts before a row is marked ``failed`` (a bad vector fails at once)."""
    retry_base_seconds: float = 0.5
    """First retry delay; doubles per attempt."""
    retry_max_seconds: float = 60.0
    """Longest retry delay."""
    busy_poll_seconds: float = 0.05
    """How often to claim and look for results while callers wait on ``done`` for rows the queue
    does not hold (a retry not yet due, another writer's lease)."""
    idle_poll_seconds: float = 5.0
    """How often to look for due retries and other writers' rows when idle: one claim statement
    for all the threads of the memories sharing the queue."""
    drain_seconds: float = 30.0
    """How long ``aclose()`` waits for the memory's own writes to be embedded before it leaves the
    rest pending (for the next start, or ``prism-memory worker``) and says how many."""
    in_process: bool = True
    """Whether a memory embeds its remembered rows itself. ``False`` is **worker-only mode**: rows
    are stored pending and only ``prism-memory worker`` (an
    :class:`~prism_memory.postgres.worker.IndexingWorker`) embeds them; ``done`` and
    ``remember(wait=True)`` wait for the worker, and ``aclose()`` returns at once. Queries
    (``recall``), ``correct`` and ``rebuild_index`` still embed in-process: they need the vector
    to answer."""

    def __post_init__(self) -> None:
        numbers = (
            self.lease_seconds,
            self.retry_base_seconds,
            self.retry_max_seconds,
            self.busy_poll_seconds,
            self.idle_poll_seconds,
            self.drain_seconds,
        )
        if any(not (value > 0) for value in numbers) or self.max_attempts < 1:
            raise PrismMemoryError("IndexingPolicy values must be positive")
        if not isinstance(self.in_process, bool):
            raise PrismMemoryError("IndexingPolicy.in_process must be True or False")

    def retry_delay(self, attempts: int) -> timedelta:
        """Backoff before attempt ``attempts + 1``."""
        seconds = min(self.retry_max_seconds, self.retry_base_seconds * (2 ** max(0, attempts - 1)))
        return timedelta(seconds=seconds)


@dataclass(slots=True)
class _Waiter:
    scope: MemoryIdentity
    ids: frozenset[str]
    future: asyncio.Future[IndexingReport]
    owner: QueueMember | None
    """The member that asked (its watchers fail when it leaves); ``None``: the queue's own."""


@dataclass(slots=True)
class _Thread:
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


_Key = tuple[MemoryIdentity, str]


class IndexingQueue:
    """Embeds pending entries in the background: of one scope, of every scope (``scope=None``), or
    of the threads of the memories sharing it (see :func:`join_queue`).

    Use ``async with`` or :meth:`start` / :meth:`aclose`. :meth:`watch` returns a future resolving to
    an :class:`IndexingReport` once the given ids are indexed or failed.
    """

    def __init__(
        self,
        *,
        store: VectorStore,
        embedder: Embedder,
        scope: MemoryIdentity | None,
        batch_size: int,
        clock: Callable[[], datetime],
        policy: IndexingPolicy | None = None,
        name: str | None = None,
    ) -> None:
        self._store = store
        self._embedder = embedder
        self._model = embedder_model(embedder)
        self._fixed = scope
        self._all_scopes = scope is None
        self._batch_size = batch_size
        self._clock = clock
        self._policy = policy or IndexingPolicy()
        self.worker_id = f"{name or 'prism-indexer'}-{uuid.uuid4().hex[:12]}"
        self._task: asyncio.Task[None] | None = None
        self._stop = asyncio.Event()
        self._wake = asyncio.Event()
        self._draining = False
        self._lanes = 1
        self._batch_lock = asyncio.Semaphore(1)
        """A lane per batch in hand (one, or :data:`SHARED_LANES` on a shared queue)."""
        self._batches: set[asyncio.Task[None]] = set()
        """Batches handed off to finish beside the worker loop (a shared queue's other lanes)."""
        self._flying: dict[MemoryIdentity, int] = {}
        """Rows per thread taken into a batch and not yet finished."""
        self._landed = asyncio.Event()
        """Set whenever a batch or a claim finishes."""
        self._claiming = 0
        """Claim statements in flight: rows they lease are in no one's hands until they return."""
        self._threads: dict[MemoryIdentity, _Thread] = {}
        """Per thread, least recently served first (claims and turns follow this order)."""
        if scope is not None:
            self._threads[scope] = _Thread(members=1)  # a scope-bound queue serves it for good
        self._ready: deque[MemoryIdentity] = deque()
        """Threads with adopted rows, in turn order."""
        self._waiters: list[_Waiter] = []
        self._in_hand: set[_Key] = set()
        """Rows leased to this queue and not yet settled: nothing to claim or ask the store about."""
        self._settled: dict[_Key, tuple[IndexStatus, str | None]] = {}
        """Rows this queue indexed itself, so a waiter resolves without asking the store."""
        self._probe: dict[MemoryIdentity, None] = {}
        """Threads to claim from until a claim comes back short (a sweep's, or newly joined)."""
        self._next_sweep = 0.0
        """When (``time.monotonic``) the next idle look for due rows is; the first is at once."""
        self._took_adopted = False
        self._leased = False
        """Whether this queue may hold a lease in the store (one was handed out or claimed since
        the last release): closing releases leases only then."""
        self._members = 0
        self._drains: set[asyncio.Task[int]] = set()
        self._shared_key: tuple[int, ...] | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self.indexed_total = 0
        """Rows this queue has indexed since it was created."""

    @property
    def running(self) -> bool:
        """Whether the worker task is alive."""
        return self._task is not None and not self._task.done()

    @property
    def members(self) -> int:
        """How many members (memories, see :class:`QueueMember`) share this queue now."""
        return self._members

    async def start(self) -> None:
        """Start the worker task (idempotent). It first picks up rows left pending earlier."""
        if self.running:
            return
        self._stop.clear()
        self._draining = False
        self._task = asyncio.create_task(self._run(), name=self.worker_id)

    async def __aenter__(self) -> IndexingQueue:
        await self.start()
        return self

    async def __aexit__(self, *_: object) -> None:
        await self.aclose()

    def lease(self, ids: Iterable[str]) -> EntryLease:
        """A lease on the first of ``ids`` -- as many as one claim takes -- for rows written now and
        handed to :meth:`adopt` (see :meth:`VectorStore.put_entries`); the rest stay free for any
        worker to claim, so other workers still share a large write."""
        return self._lease(self._fixed, ids)

    def _lease(self, scope: MemoryIdentity | None, ids: Iterable[str]) -> EntryLease:
        first = list(dict.fromkeys(ids))[: self._batch_size * CLAIM_BATCHES]
        self._leased = True
        if scope is not None:
            self._touch(scope)
        return EntryLease(
            worker_id=self.worker_id,
            until=self._clock() + timedelta(seconds=self._policy.lease_seconds),
            ids=frozenset(first),
        )

    def adopt(self, items: Iterable[ClaimedEntry]) -> None:
        """Embed ``items`` -- rows stored leased to this worker -- next, without claiming them.
        Threads take turns: one embedder batch of each thread's adopted rows per round."""
        added = False
        for item in items:
            thread = self._thread(item.scope)
            thread.swept = None
            thread.handed += 1
            thread.adopted.append(item)
            self._in_hand.add((item.scope, item.id))
            if not thread.ready:
                thread.ready = True
                self._ready.append(item.scope)
            added = True
        if added:
            self.wake()

    def wake(self) -> None:
        """Tell the worker new rows are pending."""
        self._wake.set()

    def watch(self, ids: Sequence[str]) -> asyncio.Future[IndexingReport]:
        """A future that resolves once every id in ``ids`` is indexed or failed (or gone)."""
        if self._fixed is None:
            raise PrismMemoryError(
                "an all-scopes or shared queue cannot watch ids (a QueueMember can)"
            )
        return self._watch(self._fixed, ids, None)

    async def run_until_idle(self) -> int:
        """Embed until nothing is claimable right now; return how many rows were indexed meanwhile
        (by this call or by the background task, which takes turns with it batch by batch)."""
        if self._fixed is not None:
            return await self._run_thread_until_idle(self._fixed)
        before = self.indexed_total
        while True:
            self._next_sweep = 0.0  # look in every thread each time
            _, claimed = await self._process(None)
            if claimed == 0:
                break
        await self._landing()
        await self._resolve_waiters()
        return self.indexed_total - before

    async def aclose(self, *, drain: bool = True) -> None:
        """Stop the worker. With ``drain`` it first indexes what is claimable (up to the policy's
        ``drain_seconds``); anything left stays pending in the store (durably, on a durable store)
        and its watchers get an :class:`IndexingError`."""
        _forget_shared(self)
        task, self._task = self._task, None
        if task is not None:
            self._draining = drain
            self._stop.set()
            self._wake.set()
            try:
                await asyncio.wait_for(asyncio.shield(task), timeout=self._policy.drain_seconds)
            except TimeoutError:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task
        drains = [*self._drains, *self._batches]
        for side in drains:
            side.cancel()
        if drains:
            await asyncio.wait(drains)
        for thread in self._threads.values():  # their leases are released below
            thread.adopted.clear()
            thread.ready = False
        self._ready.clear()
        self._in_hand.clear()
        if self._leased:  # a queue that never leased a row has nothing to release
            with contextlib.suppress(PrismMemoryError):
                await self._store.release_claims(self.worker_id)
                self._leased = False
        with contextlib.suppress(PrismMemoryError):
            await self._resolve_waiters()
        self._fail_waiters(None)

    # ---- members -----------------------------------------------------------------------------

    def _join(self, scope: MemoryIdentity) -> QueueMember:
        thread = self._thread(scope)
        thread.members += 1
        self._members += 1
        if thread.members == 1:
            self._probe[scope] = None  # pick up what the thread left pending earlier
            self.wake()
        return QueueMember(self, scope)

    async def _leave(self, member: QueueMember, *, drain: bool) -> None:
        """``member`` leaves: the last one stops the queue (as :meth:`aclose`); any other one first
        indexes what its thread has claimable (within ``drain_seconds``, in turns with the other
        threads), then its watchers still waiting get an :class:`IndexingError`."""
        self._members -= 1
        try:
            if self._members <= 0:
                await self.aclose(drain=drain)
                return
            if drain:
                side = asyncio.create_task(
                    self._run_thread_until_idle(member.scope, skip_swept=True),
                    name=f"prism-drain-{self.worker_id}",
                )
                self._drains.add(side)
                side.add_done_callback(self._drain_done)
                # past the bound the drain goes on in the background (the queue keeps serving
                # the other members); asyncio.wait neither cancels it nor raises its error
                await asyncio.wait({side}, timeout=self._policy.drain_seconds)
            with contextlib.suppress(PrismMemoryError):
                await self._resolve_waiters()
            self._fail_waiters(member)
        finally:
            thread = self._threads.get(member.scope)
            if thread is not None:
                thread.members -= 1
                if thread.members <= 0 and not thread.adopted:
                    del self._threads[member.scope]

    def _drain_done(self, task: asyncio.Task[int]) -> None:
        self._drains.discard(task)
        if not task.cancelled() and task.exception() is not None:
            logger.warning("draining a closed memory's thread failed: %s", task.exception())

    def _watch(
        self, scope: MemoryIdentity, ids: Sequence[str], owner: QueueMember | None
    ) -> asyncio.Future[IndexingReport]:
        future: asyncio.Future[IndexingReport] = asyncio.get_running_loop().create_future()
        if not ids:
            future.set_result(IndexingReport(indexed=()))
            return future
        self._touch(scope)
        self._waiters.append(_Waiter(scope, frozenset(ids), future, owner))
        self.wake()
        return future

    def _fail_waiters(self, owner: QueueMember | None) -> None:
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

    def _touch(self, scope: MemoryIdentity) -> None:
        """Rows of ``scope`` may have become pending through this queue: not swept any more."""
        thread = self._threads.get(scope)
        if thread is not None:
            thread.swept = None
            thread.handed += 1

    def _thread(self, scope: MemoryIdentity) -> _Thread:
        thread = self._threads.get(scope)
        if thread is None:
            thread = self._threads[scope] = _Thread()
        return thread

    async def _run_thread_until_idle(
        self, scope: MemoryIdentity, *, skip_swept: bool = False
    ) -> int:
        """Embed ``scope``'s adopted and claimable rows until none is left; count what the queue
        indexed of that thread meanwhile. ``skip_swept``: no claim for a thread swept clean within
        ``idle_poll_seconds`` (a leaving member's drain)."""
        thread = self._thread(scope)
        before = thread.indexed
        while True:
            if skip_swept and not thread.adopted and self._swept(thread, time.monotonic()):
                break
            _, claimed = await self._process(scope)
            if claimed == 0:
                break
        # rows of the thread another lane is finishing, or another lane's claim may be leasing
        # (it skipped them as locked and has not returned yet)
        while self._flying.get(scope) or self._claiming:
            self._landed.clear()
            if self._flying.get(scope) or self._claiming:
                await self._landed.wait()
        await self._resolve_waiters()
        self.wake()  # the background task may have watchers to resolve from what this settled
        return thread.indexed - before

    # ---- the worker --------------------------------------------------------------------------

    async def _run(self) -> None:
        while True:
            claimed = 0
            self._wake.clear()
            try:
                _, claimed = await self._process_batch()
                await self._resolve_waiters()
            except asyncio.CancelledError:
                raise
            except PrismMemoryError as exc:
                # one line, no traceback: a driver error's chained cause holds the whole statement
                logger.warning("indexing iteration failed; retrying: %s", str(exc)[:500])
                await asyncio.sleep(self._policy.busy_poll_seconds)
            except Exception:
                logger.exception("indexing iteration failed; retrying")
                await asyncio.sleep(self._policy.busy_poll_seconds)
            if self._stop.is_set() and (not self._draining or claimed == 0):
                await self._landing()
                return
            # after a batch handed over by remember() nothing else is known to be due: wait for
            # the next wake-up instead of spending a claim round trip on an empty queue
            if claimed and (self._has_adopted() or self._waiters or not self._took_adopted):
                continue
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), timeout=self._idle_timeout())

    def _idle_timeout(self) -> float:
        """How long to sleep when nothing is in hand: a busy poll while a watcher waits for rows
        this queue does not hold; else until the next sweep (one per ``idle_poll_seconds``)."""
        if self._all_scopes:
            return self._policy.idle_poll_seconds
        if self._unaccounted():
            return self._policy.busy_poll_seconds
        if self._probe:
            return 0.0
        return max(0.0, self._next_sweep - time.monotonic())

    def _has_adopted(self) -> bool:
        return any(
            thread is not None and thread.adopted for thread in map(self._threads.get, self._ready)
        )

    async def _process_batch(self) -> tuple[int, int]:
        """Claim up to :data:`CLAIM_BATCHES` embedder batches, embed them, store the vectors in one
        statement; return ``(indexed, claimed)``."""
        return await self._process(None, hand_off=self._lanes > 1)

    async def _process(
        self, scope: MemoryIdentity | None, *, hand_off: bool = False
    ) -> tuple[int, int]:
        """One batch: adopted rows first (of ``scope``, or in turns), else a claim; embedded and
        stored here, or (``hand_off``) in a task of its own while the caller takes the next one
        (``indexed`` is then reported as 0)."""
        await self._batch_lock.acquire()
        handed = False
        try:
            limit = self._batch_size * CLAIM_BATCHES
            claimed = self._take_adopted(limit, scope)
            if scope is None:
                self._took_adopted = bool(claimed)
            if not claimed:
                self._claiming += 1
                try:
                    claimed = await (
                        self._claim(limit) if scope is None else self._claim_in([scope], limit)
                    )
                except BaseException:
                    self._leased = True  # a claim that failed may still have committed
                    raise
                finally:
                    self._claiming -= 1
                    self._landed.set()
                self._leased = self._leased or bool(claimed)
            if not claimed:
                return 0, 0
            keys = [(item.scope, item.id) for item in claimed]
            self._in_hand.update(keys)
            for item in claimed:
                self._flying[item.scope] = self._flying.get(item.scope, 0) + 1
            if hand_off:
                task = asyncio.create_task(self._finish_apart(claimed))
                self._batches.add(task)
                task.add_done_callback(self._batches.discard)
                handed = True
                return 0, len(claimed)
            return await self._finish(claimed), len(claimed)
        finally:
            if not handed:
                self._batch_lock.release()

    async def _finish(self, claimed: Sequence[ClaimedEntry]) -> int:
        """Embed and store ``claimed`` (taken into a batch by :meth:`_process`); count them."""
        try:
            done: list[tuple[ClaimedEntry, Vector]] = []
            for start in range(0, len(claimed), self._batch_size):
                done.extend(await self._embed_items(claimed[start : start + self._batch_size]))
            indexed = 0
            if done:
                indexed = await self._store.complete_indexing(
                    done, worker_id=self.worker_id, now=self._clock(), model=self._model
                )
                self._count(done, indexed)
            return indexed
        finally:
            self._in_hand.difference_update((item.scope, item.id) for item in claimed)
            for item in claimed:
                left = self._flying.get(item.scope, 0) - 1
                if left > 0:
                    self._flying[item.scope] = left
                else:
                    self._flying.pop(item.scope, None)
            self._landed.set()

    async def _finish_apart(self, claimed: Sequence[ClaimedEntry]) -> None:
        """:meth:`_finish` in a lane of its own; then the watchers it settled are resolved."""
        try:
            await self._finish(claimed)
            await self._resolve_waiters()
        except asyncio.CancelledError:
            raise
        except PrismMemoryError as exc:
            logger.warning("indexing batch failed; its rows stay pending: %s", str(exc)[:500])
        except Exception:
            logger.exception("indexing batch failed; its rows stay pending")
        finally:
            self._batch_lock.release()
            self.wake()  # a lane is free, and watchers may wait on what just landed

    async def _landing(self) -> None:
        """Wait for the batches finishing in other lanes."""
        while self._batches:
            await asyncio.wait(set(self._batches))

    def _count(self, done: Sequence[tuple[ClaimedEntry, Vector]], indexed: int) -> None:
        self.indexed_total += indexed
        if indexed == len(done):
            for item, _ in done:
                thread = self._threads.get(item.scope)
                if thread is not None:
                    thread.indexed += 1
            if self._waiters:
                self._settled.update(((item.scope, item.id), ("indexed", None)) for item, _ in done)
            return
        scopes = {item.scope for item, _ in done}
        if len(scopes) == 1:  # some leases were lost; which rows is unknown, the thread is not
            thread = self._threads.get(scopes.pop())
            if thread is not None:
                thread.indexed += indexed

    def _take_adopted(self, limit: int, scope: MemoryIdentity | None) -> list[ClaimedEntry]:
        """Up to ``limit`` adopted rows: of ``scope``, or one embedder batch per thread in turns."""
        if scope is not None:
            thread = self._threads.get(scope)
            if thread is None:
                return []
            return [thread.adopted.popleft() for _ in range(min(limit, len(thread.adopted)))]
        taken: list[ClaimedEntry] = []
        while self._ready and len(taken) < limit:
            key = self._ready.popleft()
            thread = self._threads.get(key)
            if thread is None:
                continue
            count = min(self._batch_size, limit - len(taken), len(thread.adopted))
            taken.extend(thread.adopted.popleft() for _ in range(count))
            if thread.adopted:
                self._ready.append(key)
            else:
                thread.ready = False
                if thread.members <= 0:  # its memory has left and this was its last row
                    del self._threads[key]
        return taken

    async def _claim(self, limit: int) -> list[ClaimedEntry]:
        """Lease up to ``limit`` due rows (a service worker overrides this to take turns between
        tenants). An all-scopes queue claims from any scope. Otherwise the claim covers the
        threads whose watchers wait for rows this queue does not hold, and -- once per
        ``idle_poll_seconds`` (a sweep, for due retries and other writers' rows), for newly joined
        threads, and while stopping -- every member's thread, least recently served first."""
        if self._all_scopes:
            return await self._store.claim_pending(
                None,
                limit=limit,
                worker_id=self.worker_id,
                lease_seconds=self._policy.lease_seconds,
                now=self._clock(),
            )
        moment = time.monotonic()
        if moment >= self._next_sweep:
            self._next_sweep = moment + self._policy.idle_poll_seconds
            self._probe = {key: None for key, thread in self._threads.items() if thread.members}
        elif self._stop.is_set():  # draining: every member's thread not swept clean just now
            self._probe = {
                key: None
                for key, thread in self._threads.items()
                if thread.members and not self._swept(thread, moment)
            }
        wanted = dict(self._probe)
        wanted.update(dict.fromkeys(self._unaccounted()))
        order = [key for key in self._threads if key in wanted]
        order += [key for key in wanted if key not in self._threads]
        claimed = await self._claim_in(order, limit)
        if len(claimed) < limit:
            self._probe.clear()
        for key in dict.fromkeys(item.scope for item in claimed):
            thread = self._threads.pop(key, None)  # served: to the back of the order
            if thread is not None:
                self._threads[key] = thread
        return claimed

    async def _claim_in(self, scopes: Sequence[MemoryIdentity], limit: int) -> list[ClaimedEntry]:
        """One claim statement over ``scopes`` (at most one embedder batch from each of many)."""
        if not scopes:
            return []
        lease, now = self._policy.lease_seconds, self._clock()
        started = time.monotonic()
        handed = {key: thread.handed for key in scopes if (thread := self._threads.get(key))}
        if len(scopes) == 1:
            claimed = await self._store.claim_pending(
                scopes[0], limit=limit, worker_id=self.worker_id, lease_seconds=lease, now=now
            )
        else:
            claimed = await self._store.claim_pending_in(
                scopes,
                limit=limit,
                per_scope=self._batch_size,
                worker_id=self.worker_id,
                lease_seconds=lease,
                now=now,
            )
        found = {item.scope for item in claimed}
        for key, count in handed.items():  # nothing due, and nothing handed over meanwhile
            thread = self._threads.get(key)
            if key not in found and thread is not None and thread.handed == count:
                thread.swept = started
        return claimed

    def _swept(self, thread: _Thread, moment: float) -> bool:
        """Whether a claim found nothing due in ``thread`` within the last ``idle_poll_seconds``
        and no row of it was handed to this queue since."""
        return thread.swept is not None and moment - thread.swept < self._policy.idle_poll_seconds

    def _unaccounted(self) -> list[MemoryIdentity]:
        """Threads with a watcher waiting for a row this queue neither holds nor has settled."""
        threads: dict[MemoryIdentity, None] = {}
        for waiter in self._waiters:
            if waiter.scope in threads or waiter.future.done():
                continue
            if any(
                (waiter.scope, entry_id) not in self._in_hand
                and (waiter.scope, entry_id) not in self._settled
                for entry_id in waiter.ids
            ):
                threads[waiter.scope] = None
        return list(threads)

    async def _embed_items(
        self, items: Sequence[ClaimedEntry]
    ) -> list[tuple[ClaimedEntry, Vector]]:
        """Embed one embedder batch; if it fails, isolate the poisoned rows one at a time."""
        try:
            vectors = await self._embed([item.text for item in items])
            return list(zip(items, vectors, strict=True))
        except Exception as exc:  # noqa: BLE001 - embedder errors are recorded per row below
            if len(items) == 1:
                await self._fail(items[0], exc)
                return []
        done: list[tuple[ClaimedEntry, Vector]] = []
        for item in items:
            try:
                done.append((item, (await self._embed([item.text]))[0]))
            except Exception as item_exc:  # noqa: BLE001 - recorded on the row
                await self._fail(item, item_exc)
        return done

    async def _embed(self, texts: list[str]) -> Vector:
        return await embed_batched(
            self._embedder, texts, batch_size=self._batch_size, dimensions=self._embedder.dimensions
        )

    async def _fail(self, item: ClaimedEntry, exc: BaseException) -> None:
        attempts = item.attempts + 1
        refused = isinstance(exc, EmbedderError) and not exc.transient  # e.g. a bad API key
        permanent = (
            isinstance(exc, InvalidVectorError) or refused or attempts >= self._policy.max_attempts
        )
        now = self._clock()
        retry_at = None if permanent else now + self._policy.retry_delay(attempts)
        self._touch(item.scope)  # due again later (or failed): the thread is not swept clean
        message = f"{type(exc).__name__}: {exc}"[:1000]
        logger.warning(
            "embedding entry %s failed (attempt %d, %s): %s",
            item.id,
            attempts,
            "giving up" if permanent else "will retry",
            message,
        )
        await self._store.fail_indexing(
            item, worker_id=self.worker_id, error=message, retry_at=retry_at, now=now
        )

    async def _resolve_waiters(self) -> None:
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
                if (scope, entry_id) not in self._settled and (scope, entry_id) not in self._in_hand
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


class QueueMember:
    """One memory's seat on a shared :class:`IndexingQueue` (see :func:`join_queue`): it leases,
    hands over and watches the rows of its own thread, and :meth:`aclose` leaves the queue."""

    def __init__(self, queue: IndexingQueue, scope: MemoryIdentity) -> None:
        self.queue = queue
        self.scope = scope
        self._left = False

    @property
    def worker_id(self) -> str:
        """The shared queue's lease owner id."""
        return self.queue.worker_id

    @property
    def running(self) -> bool:
        """Whether this member is still on a running queue."""
        return not self._left and self.queue.running

    async def start(self) -> None:
        """Make sure the shared queue's task runs (idempotent)."""
        if self._left:
            raise PrismMemoryError("this member has left its indexing queue")
        await self.queue.start()

    def lease(self, ids: Iterable[str]) -> EntryLease:
        """As :meth:`IndexingQueue.lease`: new rows are written leased to the shared queue."""
        return self.queue._lease(self.scope, ids)

    def adopt(self, items: Iterable[ClaimedEntry]) -> None:
        """As :meth:`IndexingQueue.adopt`."""
        self.queue.adopt(items)

    def wake(self) -> None:
        """Tell the shared queue new rows are pending."""
        self.queue._touch(self.scope)
        self.queue.wake()

    def watch(self, ids: Sequence[str]) -> asyncio.Future[IndexingReport]:
        """A future that resolves once every id of this member's thread in ``ids`` is indexed or
        failed (or gone); it fails with :class:`IndexingError` if this member leaves first."""
        return self.queue._watch(self.scope, ids, self)

    async def run_until_idle(self) -> int:
        """Embed this thread's pending rows until none is claimable; return how many were indexed
        meanwhile (by this call or the shared task)."""
        return await self.queue._run_thread_until_idle(self.scope)

    async def aclose(self, *, drain: bool = True) -> None:
        """Leave the queue (idempotent). The last member stops it as :meth:`IndexingQueue.aclose`
        does; any other one first, with ``drain``, indexes what its thread has claimable (within
        the policy's ``drain_seconds``); then its watchers still waiting get an
        :class:`IndexingError`. Its rows not yet indexed stay stored: pending for the next start,
        or indexed later by the queue still serving the other members if it already holds them."""
        if self._left:
            return
        self._left = True
        await self.queue._leave(self, drain=drain)


_SHARED: weakref.WeakValueDictionary[tuple[int, ...], IndexingQueue] = weakref.WeakValueDictionary()
"""The shared queues by (event loop, store, embedder, batch size, policy, clock) identities; a
queue is dropped when its last member leaves (or, unclosed, when nothing references it)."""


def join_queue(
    *,
    store: VectorStore,
    embedder: Embedder,
    scope: MemoryIdentity,
    batch_size: int,
    clock: Callable[[], datetime],
    policy: IndexingPolicy | None = None,
) -> QueueMember:
    """Join the indexing queue every memory of this event loop shares on ``store`` with
    ``embedder`` (the same object, hence the same model: a row is never embedded by another
    model), batch size, policy and clock -- one task, one claim statement per sweep; the first
    member creates it, the last to leave stops it. Call :meth:`QueueMember.start` to run it."""
    policy = policy or IndexingPolicy()
    loop = asyncio.get_running_loop()
    key = (id(loop), id(store), id(embedder), batch_size, hash(policy), id(clock))
    queue = _SHARED.get(key)
    if queue is None or not (
        queue._loop is loop
        and queue._store is store
        and queue._embedder is embedder
        and queue._clock is clock
        and queue._policy == policy
    ):
        queue = IndexingQueue(
            store=store,
            embedder=embedder,
            scope=None,
            batch_size=batch_size,
            clock=clock,
            policy=policy,
        )
        queue._all_scopes = False
        queue._lanes = SHARED_LANES
        queue._batch_lock = asyncio.Semaphore(SHARED_LANES)
        queue._loop = loop
        queue._shared_key = key
        _SHARED[key] = queue
    return queue._join(scope)


async def wait_for_worker(
    store: VectorStore, scope: MemoryIdentity, ids: Sequence[str], policy: IndexingPolicy
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


def _forget_shared(queue: IndexingQueue) -> None:
    """Take a stopping queue out of the registry, so the next memory starts a fresh one."""
    key = queue._shared_key
    if key is not None and _SHARED.get(key) is queue:
        del _SHARED[key]
