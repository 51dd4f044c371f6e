"""The indexing queue's worker loop: one :class:`IndexingQueue` runs one named asyncio task with a
stop event. It embeds the rows handed to it (:meth:`IndexingQueue.adopt`) in turns between threads,
otherwise asks its claim strategy (:mod:`.claims`) for a lease on due rows, embeds them in batches
and stores the vectors. A failed batch is split so that one poisoned row never blocks the rest; each
failure is recorded on its row with the attempt count and retried with exponential backoff, or
marked ``failed`` (and reported) once retrying cannot help. Nothing is silently dropped. Watchers
are kept by :class:`~.waiters.Waiters`; a memory's seat on a shared queue is a :class:`QueueMember`.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
import uuid
from collections.abc import Awaitable, Callable, Iterable, Sequence
from datetime import datetime, timedelta
from typing import Any, Protocol

from .. import _telemetry as otel
from .._windowed import OwnVector
from ..embedding import Embedder, embedder_model
from ..errors import InvalidVectorError, PrismMemoryError, StoreClosedError
from ..models import IndexingReport, MemoryIdentity
from ..stores.base import ClaimedEntry, EntryLease, IndexingLedger
from .claims import AllScopes, ClaimContext, ClaimStrategy, ThreadTurns, claim_in
from .generations import NextModelWriter
from .lanes import Lanes
from .policy import CLAIM_BATCHES, IndexingPolicy
from .rows import BatchReport, QueueObserver, RowEmbedder
from .threads import Threads
from .waiters import Waiters

__all__ = ["IndexingQueue", "QueueMember", "QueueSeats"]

logger = logging.getLogger("prism_memory.indexing")


class IndexingQueue:
    """Embeds pending entries in the background: of one scope, of every scope (``scope=None``), or
    of the threads of the memories sharing it (see :func:`~prism_memory.indexing.join_queue`).

    Use ``async with`` or :meth:`start` / :meth:`aclose`. :meth:`watch` returns a future resolving to
    an :class:`IndexingReport` once the given ids are indexed or failed. ``claims`` decides what it
    claims (:class:`~.claims.ThreadTurns` for a scope, :class:`~.claims.AllScopes` for ``None``);
    ``lanes`` batches may be in hand at once; ``observer`` is told of each batch;
    ``next_writer`` stores each batch's vectors of a migration's next model before the batch
    completes (:class:`~.generations.NextModelWriter`).
    """

    def __init__(
        self,
        *,
        store: IndexingLedger,
        embedder: Embedder,
        scope: MemoryIdentity | None,
        batch_size: int,
        clock: Callable[[], datetime],
        policy: IndexingPolicy | None = None,
        name: str | None = None,
        claims: ClaimStrategy | None = None,
        lanes: int = 1,
        observer: QueueObserver | None = None,
        next_writer: NextModelWriter | None = None,
    ) -> None:
        if lanes < 1:
            raise PrismMemoryError("an indexing queue needs at least one lane")
        self._store = store
        self._model = embedder_model(embedder)
        self._fixed = scope
        self._batch_size = batch_size
        self._clock = clock
        self._policy = policy = policy or IndexingPolicy()
        if claims is None:
            claims = AllScopes() if scope is None else ThreadTurns()
        self._claims = claims
        self.worker_id = f"{name or 'prism-indexer'}-{uuid.uuid4().hex[:12]}"
        self._task: asyncio.Task[None] | None = None
        self._stop = asyncio.Event()
        self._wake = asyncio.Event()
        self._draining = False
        self._closed = False
        self._lanes = Lanes(lanes)
        self._threads = Threads(
            batch_size=batch_size, idle_poll_seconds=self._policy.idle_poll_seconds
        )
        if scope is not None:
            self._threads.thread(scope, members=1)  # a scope-bound queue serves it for good
        self._waiters = Waiters(store, self._lanes.held, self._policy)
        self._context = ClaimContext(
            store=store,
            worker_id=self.worker_id,
            batch_size=batch_size,
            policy=self._policy,
            clock=clock,
            threads=self._threads,
            unaccounted=self._waiters.unaccounted,
            stopping=self._stop.is_set,
        )
        self._rows = RowEmbedder(
            store, embedder, batch_size, policy, clock, self.worker_id, self._threads, observer
        )
        self._observer = observer
        self._next = next_writer
        self._took_adopted = False
        self._leased = False
        """Whether this queue may hold a lease in the store (one was handed out or claimed since
        the last release): closing releases leases only then."""
        self._members = 0
        self._drains: set[asyncio.Task[int]] = set()
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

    @property
    def closed(self) -> bool:
        """Whether :meth:`aclose` was called: a shared queue is then handed to no new member."""
        return self._closed

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
        handed to :meth:`adopt` (see :meth:`EntryStore.put_entries`); the rest stay free for any
        worker to claim, so other workers still share a large write."""
        return self.lease_in(self._fixed, ids)

    def lease_in(self, scope: MemoryIdentity | None, ids: Iterable[str]) -> EntryLease:
        """:meth:`lease` for rows of ``scope``'s thread (a member's), which takes its turn next."""
        first = list(dict.fromkeys(ids))[: self._batch_size * CLAIM_BATCHES]
        self._leased = True
        if scope is not None:
            self._threads.touch(scope)
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
            self._threads.adopt(item)
            self._lanes.held.add((item.scope, item.id))
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
        return self.watch_in(self._fixed, ids, None)

    async def run_until_idle(self) -> int:
        """Embed until nothing is claimable right now; return how many rows were indexed meanwhile
        (by this call or by the background task, which takes turns with it batch by batch)."""
        if self._fixed is not None:
            return await self.run_thread_until_idle(self._fixed)
        before = self.indexed_total
        while True:
            self._claims.rescan()  # look in every thread each time
            _, claimed = await self._process(None)
            if claimed == 0:
                break
        await self._lanes.landing()
        await self._waiters.resolve(full=True)
        return self.indexed_total - before

    async def aclose(self, *, drain: bool = True) -> None:
        """Stop the worker. With ``drain`` it first indexes what is claimable (up to the policy's
        ``drain_seconds``); anything left stays pending in the store (durably, on a durable store)
        and its watchers get an :class:`IndexingError`."""
        self._closed = True
        task, self._task = self._task, None
        if task is not None:
            self._draining = drain
            self._stop.set()
            self._wake.set()
            await _stop_within(task, self._policy.drain_seconds)
        await _cancel_all([*self._drains, *self._lanes.apart_tasks()])
        self._threads.drop_adopted()  # their leases are released below
        self._lanes.held.clear()
        if self._leased:  # a queue that never leased a row has nothing to release
            with contextlib.suppress(PrismMemoryError):
                await self._store.release_claims(self.worker_id)
                self._leased = False
        with contextlib.suppress(PrismMemoryError):
            await self._waiters.resolve(full=True)
        self._waiters.fail(None)

    # ---- members -----------------------------------------------------------------------------

    def join(self, scope: MemoryIdentity) -> QueueMember:
        """A seat for one memory of ``scope`` on this queue (see :class:`QueueMember`): the queue's
        claims cover the thread while it has members."""
        thread = self._threads.thread(scope)
        thread.members += 1
        self._members += 1
        if thread.members == 1:
            self._claims.joined(scope)  # pick up what the thread left pending earlier
            self.wake()
        return QueueMember(self, scope)

    async def leave(self, member: QueueMember, *, drain: bool) -> None:
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
                    self.run_thread_until_idle(member.scope, skip_swept=True),
                    name=f"prism-drain-{self.worker_id}",
                )
                self._drains.add(side)
                side.add_done_callback(self._drains.discard)
                side.add_done_callback(_drain_done)
                # past the bound the drain goes on in the background (the queue keeps serving
                # the other members); asyncio.wait neither cancels it nor raises its error
                await asyncio.wait({side}, timeout=self._policy.drain_seconds)
            with contextlib.suppress(PrismMemoryError):
                await self._waiters.resolve(full=True)
            self._waiters.fail(member)
        finally:
            self._threads.left(member.scope)

    def wake_thread(self, scope: MemoryIdentity) -> None:
        """Tell the worker new rows of ``scope``'s thread are pending (it looks there next)."""
        self._threads.touch(scope)
        self.wake()

    def watch_in(
        self, scope: MemoryIdentity, ids: Sequence[str], owner: QueueMember | None
    ) -> asyncio.Future[IndexingReport]:
        """:meth:`watch` for ids of ``scope``'s thread; the future fails with
        :class:`IndexingError` when ``owner`` (if any) leaves first."""
        future = self._waiters.add(scope, ids, owner)
        if ids:
            self._threads.touch(scope)
            self.wake()
        return future

    async def run_thread_until_idle(
        self, scope: MemoryIdentity, *, skip_swept: bool = False
    ) -> int:
        """Embed ``scope``'s adopted and claimable rows until none is left; count what the queue
        indexed of that thread meanwhile. ``skip_swept``: no claim for a thread swept clean within
        ``idle_poll_seconds`` (a leaving member's drain)."""
        thread = self._threads.thread(scope)
        before = thread.indexed
        while True:
            if skip_swept and not thread.adopted and self._threads.swept(thread, time.monotonic()):
                break
            _, claimed = await self._process(scope)
            if claimed == 0:
                break
        await self._lanes.settled(scope)  # rows of the thread another lane has in hand
        await self._waiters.resolve(full=True)
        self.wake()  # the background task may have watchers to resolve from what this settled
        return thread.indexed - before

    # ---- the worker --------------------------------------------------------------------------

    async def _run(self) -> None:
        while True:
            claimed = 0
            self._wake.clear()
            try:
                _, claimed = await self._process_batch()
                await self._waiters.resolve()
            except asyncio.CancelledError:
                raise
            except StoreClosedError:  # under an open memory: retrying forever cannot help
                logger.warning("indexing stopped: the store was closed; its rows stay pending")
                self._waiters.fail(None, "the store closed")
                return
            except PrismMemoryError as exc:
                # one line, no traceback: a driver error's chained cause holds the whole statement
                logger.warning("indexing iteration failed; retrying: %s", str(exc)[:500])
                await asyncio.sleep(self._policy.busy_poll_seconds)
            except Exception:
                logger.exception("indexing iteration failed; retrying")
                await asyncio.sleep(self._policy.busy_poll_seconds)
            if self._stop.is_set() and (not self._draining or claimed == 0):
                await self._lanes.landing()
                return
            # after a batch handed over by remember() nothing else is known to be due: wait for
            # the next wake-up instead of spending a claim round trip on an empty queue
            if claimed and (self._threads.has_adopted() or self._waiters or not self._took_adopted):
                continue
            with contextlib.suppress(TimeoutError):
                timeout = self._claims.idle_seconds(self._context)
                await asyncio.wait_for(self._wake.wait(), timeout=timeout)

    async def _process_batch(self) -> tuple[int, int]:
        """Claim up to :data:`CLAIM_BATCHES` embedder batches, embed them, store the vectors in one
        statement; return ``(indexed, claimed)`` and tell the observer."""
        started, failures = time.monotonic(), self._rows.failures
        indexed, claimed = await self._process(None, hand_off=self._lanes.size > 1)
        if claimed and self._observer is not None:
            seconds = time.monotonic() - started
            self._observer.batch_done(
                BatchReport(claimed, indexed, self._rows.failures - failures, seconds)
            )
        return indexed, claimed

    async def _process(
        self, scope: MemoryIdentity | None, *, hand_off: bool = False
    ) -> tuple[int, int]:
        """One batch: adopted rows first (of ``scope``, or in turns), else a claim; embedded and
        stored here, or (``hand_off``) in a task of its own while the caller takes the next one
        (``indexed`` is then reported as 0)."""
        await self._lanes.acquire()
        handed = False
        try:
            limit = self._batch_size * CLAIM_BATCHES
            claimed = self._threads.take_adopted(limit, scope)
            if scope is None:
                self._took_adopted = bool(claimed)
            if not claimed:
                try:
                    with self._lanes.claiming():
                        claimed = await (
                            self._claims.claim(self._context, limit)
                            if scope is None
                            else claim_in(self._context, [scope], limit)
                        )
                except BaseException:
                    self._leased = True  # a claim that failed may still have committed
                    raise
                self._leased = self._leased or bool(claimed)
            if not claimed:
                return 0, 0
            self._lanes.take(claimed)
            if hand_off:
                self._lanes.apart(self._finish_apart(claimed))
                handed = True
                return 0, len(claimed)
            return await self._finish(claimed), len(claimed)
        finally:
            if not handed:
                self._lanes.release()

    async def _finish(self, claimed: Sequence[ClaimedEntry]) -> int:
        """Embed and store ``claimed`` (taken into a batch by :meth:`_process`); count them. Traced
        as one span linked to the ``remember`` calls that handed the rows over."""
        if otel.tracer() is None:
            return await self._embed_and_store(claimed)
        return await _traced_batch(self._store, claimed, lambda: self._embed_and_store(claimed))

    async def _embed_and_store(self, claimed: Sequence[ClaimedEntry]) -> int:
        try:
            done: list[tuple[ClaimedEntry, OwnVector]] = []
            for start in range(0, len(claimed), self._batch_size):
                done.extend(await self._rows.embed(claimed[start : start + self._batch_size]))
            indexed = 0
            if done and self._next is not None:  # the next model's first: see NextModelWriter
                await self._next.write([item for item, _ in done])
            if done:
                try:
                    indexed = await self._store.complete_indexing(
                        done, worker_id=self.worker_id, now=self._clock(), model=self._model
                    )
                except InvalidVectorError as exc:
                    # the store refused these vectors (a width other than the one it holds):
                    # retrying cannot help, so the rows fail and their watchers are answered
                    # instead of the rows staying pending -- and `wait=True` waiting -- for ever
                    await self._rows.refused([item for item, _ in done], exc)
                    return 0
                self._count(done, indexed)
            return indexed
        finally:
            self._lanes.land(claimed)
            self._waiters.landed(claimed)

    async def _finish_apart(self, claimed: Sequence[ClaimedEntry]) -> None:
        """:meth:`_finish` in a lane of its own; then the watchers it settled are resolved."""
        try:
            await self._finish(claimed)
            await self._waiters.resolve()
        except asyncio.CancelledError:
            raise
        except PrismMemoryError as exc:
            logger.warning("indexing batch failed; its rows stay pending: %s", str(exc)[:500])
        except Exception:
            logger.exception("indexing batch failed; its rows stay pending")
        finally:
            self._lanes.release()  # a loop waiting for a lane takes it; an idle one is woken
            # only for watchers still waiting or rows handed over (not for an empty claim)
            if self._waiters or self._threads.has_adopted():
                self.wake()

    def _count(self, done: Sequence[tuple[ClaimedEntry, OwnVector]], indexed: int) -> None:
        self.indexed_total += indexed
        if indexed:
            _metered(self._store, indexed)
        items = [item for item, _ in done]
        self._threads.count(items, indexed)
        if indexed == len(done):
            self._waiters.settle(items)


async def _stop_within(task: asyncio.Task[None], seconds: float) -> None:
    """Wait up to ``seconds`` for ``task`` to end, then cancel it."""
    try:
        await asyncio.wait_for(asyncio.shield(task), timeout=seconds)
    except TimeoutError:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


async def _cancel_all(tasks: Sequence[asyncio.Task[Any]]) -> None:
    """Cancel ``tasks`` and wait until they ended."""
    for task in tasks:
        task.cancel()
    if tasks:
        await asyncio.wait(tasks)


def _drain_done(task: asyncio.Task[int]) -> None:
    """A leaving member's drain ended: its failure is logged (no one awaits it)."""
    if not task.cancelled() and task.exception() is not None:
        logger.warning("draining a closed memory's thread failed: %s", task.exception())


async def _traced_batch(
    store: IndexingLedger, claimed: Sequence[ClaimedEntry], work: Callable[[], Awaitable[int]]
) -> int:
    """``work`` (a batch's embedding and storing) in one span, linked to the ``remember`` calls
    that handed its rows over."""
    attributes = {
        "gen_ai.operation.name": "update_memory",
        "gen_ai.memory.store.id": otel.store_id(store),
        "gen_ai.memory.record.count": len(claimed),
        "code.function.name": "indexing.index_batch",
    }
    with otel.start("update_memory", attributes, links=otel.link_for(claimed)) as span:
        try:
            indexed = await work()
        except BaseException as exc:
            otel.set_error(span, exc)
            raise
        span.set_attribute("prism_memory.indexed", indexed)
        return indexed


def _metered(store: IndexingLedger, indexed: int) -> None:
    """Count ``indexed`` rows off the pending gauge, when metrics are on."""
    meters = otel.instruments()
    if meters is not None:
        meters.pending.add(-indexed, {"gen_ai.memory.store.id": otel.store_id(store)})


class QueueSeats(Protocol):
    """What a :class:`QueueMember` asks of its queue, and all it may: the public seat methods of
    :class:`IndexingQueue`, each for the member's own thread."""

    @property
    def worker_id(self) -> str:
        """The queue's lease owner id."""
        ...

    @property
    def running(self) -> bool:
        """Whether the queue's task is alive."""
        ...

    async def start(self) -> None:
        """Start the queue's task (idempotent)."""

    def adopt(self, items: Iterable[ClaimedEntry]) -> None:
        """Embed these rows, stored leased to the queue, next."""

    def lease_in(self, scope: MemoryIdentity | None, ids: Iterable[str]) -> EntryLease:
        """A lease for rows of ``scope`` written now."""
        ...

    def wake_thread(self, scope: MemoryIdentity) -> None:
        """New rows of ``scope`` are pending."""

    def watch_in(
        self, scope: MemoryIdentity, ids: Sequence[str], owner: QueueMember | None
    ) -> asyncio.Future[IndexingReport]:
        """A future resolving once ``ids`` of ``scope`` are indexed or failed."""
        ...

    async def run_thread_until_idle(
        self, scope: MemoryIdentity, *, skip_swept: bool = False
    ) -> int:
        """Embed ``scope``'s claimable rows until none is left."""
        ...

    async def leave(self, member: QueueMember, *, drain: bool) -> None:
        """``member`` leaves the queue."""


class QueueMember:
    """One memory's seat on a shared :class:`IndexingQueue` (see
    :func:`~prism_memory.indexing.join_queue`): it leases, hands over and watches the rows of its
    own thread, and :meth:`aclose` leaves the queue."""

    def __init__(self, queue: QueueSeats, scope: MemoryIdentity) -> None:
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
        return self.queue.lease_in(self.scope, ids)

    def adopt(self, items: Iterable[ClaimedEntry]) -> None:
        """As :meth:`IndexingQueue.adopt`."""
        self.queue.adopt(items)

    def wake(self) -> None:
        """Tell the shared queue new rows are pending."""
        self.queue.wake_thread(self.scope)

    def watch(self, ids: Sequence[str]) -> asyncio.Future[IndexingReport]:
        """A future that resolves once every id of this member's thread in ``ids`` is indexed or
        failed (or gone); it fails with :class:`IndexingError` if this member leaves first."""
        return self.queue.watch_in(self.scope, ids, self)

    async def run_until_idle(self) -> int:
        """Embed this thread's pending rows until none is claimable; return how many were indexed
        meanwhile (by this call or the shared task)."""
        return await self.queue.run_thread_until_idle(self.scope)

    async def aclose(self, *, drain: bool = True) -> None:
        """Leave the queue (idempotent). The last member stops it as :meth:`IndexingQueue.aclose`
        does; any other one first, with ``drain``, indexes what its thread has claimable (within
        the policy's ``drain_seconds``); then its watchers still waiting get an
        :class:`IndexingError`. Its rows not yet indexed stay stored: pending for the next start,
        or indexed later by the queue still serving the other members if it already holds them."""
        if self._left:
            return
        self._left = True
        await self.queue.leave(self, drain=drain)
