"""The deferred-indexing queue: entries are stored first and embedded here, afterwards.

One :class:`IndexingQueue` runs one named asyncio task with a stop event. It leases pending rows from
the store (so concurrent workers on one database never embed a row twice), embeds them in batches,
and stores the vectors. A failed batch is split so that one poisoned row never blocks the rest; each
failure is recorded on its row with the attempt count and retried with exponential backoff, or marked
``failed`` (and reported) once retrying cannot help. Nothing is silently dropped.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import uuid
from collections import deque
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta

from .embedding import Embedder, embed_batched, embedder_model
from .errors import EmbedderError, IndexingError, InvalidVectorError, PrismMemoryError
from .models import IndexingReport, IndexStatus, MemoryIdentity, Vector
from .stores.base import ClaimedEntry, EntryLease, VectorStore

__all__ = ["CLAIM_BATCHES", "IndexingPolicy", "IndexingQueue"]

logger = logging.getLogger("prism_memory.indexing")

CLAIM_BATCHES = 4
"""A worker leases this many embedder batches at a time, so claims and stores are amortised."""


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
    """How often to look for results while callers wait on ``done``."""
    idle_poll_seconds: float = 5.0
    """How often to look for due retries and other writers' rows when idle."""
    drain_seconds: float = 30.0
    """How long ``aclose()`` keeps indexing before it parks the rest."""

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

    def retry_delay(self, attempts: int) -> timedelta:
        """Backoff before attempt ``attempts + 1``."""
        seconds = min(self.retry_max_seconds, self.retry_base_seconds * (2 ** max(0, attempts - 1)))
        return timedelta(seconds=seconds)


@dataclass(slots=True)
class _Waiter:
    ids: frozenset[str]
    future: asyncio.Future[IndexingReport]


class IndexingQueue:
    """Embeds a scope's pending entries in the background (``scope=None``: every scope).

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
        self._scope = scope
        self._batch_size = batch_size
        self._clock = clock
        self._policy = policy or IndexingPolicy()
        self.worker_id = f"{name or 'prism-indexer'}-{uuid.uuid4().hex[:12]}"
        self._task: asyncio.Task[None] | None = None
        self._stop = asyncio.Event()
        self._wake = asyncio.Event()
        self._draining = False
        self._batch_lock = asyncio.Lock()
        self._waiters: list[_Waiter] = []
        self._adopted: deque[ClaimedEntry] = deque()
        self._took_adopted = False
        self._settled: dict[str, tuple[IndexStatus, str | None]] = {}
        """Ids this queue indexed itself, so a waiter resolves without asking the store."""
        self.indexed_total = 0
        """Rows this queue has indexed since it was created."""

    @property
    def running(self) -> bool:
        """Whether the worker task is alive."""
        return self._task is not None and not self._task.done()

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
        first = list(dict.fromkeys(ids))[: self._batch_size * CLAIM_BATCHES]
        return EntryLease(
            worker_id=self.worker_id,
            until=self._clock() + timedelta(seconds=self._policy.lease_seconds),
            ids=frozenset(first),
        )

    def adopt(self, items: Iterable[ClaimedEntry]) -> None:
        """Embed ``items`` -- rows stored leased to this worker -- next, without claiming them."""
        before = len(self._adopted)
        self._adopted.extend(items)
        if len(self._adopted) > before:
            self.wake()

    def wake(self) -> None:
        """Tell the worker new rows are pending."""
        self._wake.set()

    def watch(self, ids: Sequence[str]) -> asyncio.Future[IndexingReport]:
        """A future that resolves once every id in ``ids`` is indexed or failed (or gone)."""
        if self._scope is None:
            raise PrismMemoryError("an all-scopes queue cannot watch ids")
        future: asyncio.Future[IndexingReport] = asyncio.get_running_loop().create_future()
        if not ids:
            future.set_result(IndexingReport(indexed=()))
            return future
        self._waiters.append(_Waiter(frozenset(ids), future))
        self.wake()
        return future

    async def run_until_idle(self) -> int:
        """Embed until nothing is claimable right now; return how many rows were indexed meanwhile
        (by this call or by the background task, which takes turns with it batch by batch)."""
        before = self.indexed_total
        while True:
            _, claimed = await self._process_batch()
            if claimed == 0:
                break
        await self._resolve_waiters()
        return self.indexed_total - before

    async def aclose(self, *, drain: bool = True) -> None:
        """Stop the worker. With ``drain`` it first indexes what is claimable (up to the policy's
        ``drain_seconds``); anything left stays pending in the store (durably, on a durable store)
        and its watchers get an :class:`IndexingError`."""
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
        with contextlib.suppress(PrismMemoryError):
            await self._store.release_claims(self.worker_id)
        with contextlib.suppress(PrismMemoryError):
            await self._resolve_waiters()
        for waiter in self._waiters:
            if not waiter.future.done():
                waiter.future.set_exception(
                    IndexingError(
                        "memory closed before these entries were indexed; they remain pending",
                        dict.fromkeys(waiter.ids, "pending at close"),
                    )
                )
                waiter.future.exception()  # retrieved here, so asyncio does not log it as lost
        self._waiters.clear()

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
                return
            # after a batch handed over by remember() nothing else is known to be due: wait for
            # the next wake-up instead of spending a claim round trip on an empty queue
            if claimed and (self._adopted or self._waiters or not self._took_adopted):
                continue
            timeout = (
                self._policy.busy_poll_seconds if self._waiters else self._policy.idle_poll_seconds
            )
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), timeout=timeout)

    async def _process_batch(self) -> tuple[int, int]:
        """Claim up to :data:`CLAIM_BATCHES` embedder batches, embed them, store the vectors in one
        statement; return ``(indexed, claimed)``."""
        async with self._batch_lock:
            limit = self._batch_size * CLAIM_BATCHES
            claimed = [self._adopted.popleft() for _ in range(min(limit, len(self._adopted)))]
            self._took_adopted = bool(claimed)
            if not claimed:
                claimed = await self._claim(limit)
            if not claimed:
                return 0, 0
            done: list[tuple[ClaimedEntry, Vector]] = []
            for start in range(0, len(claimed), self._batch_size):
                done.extend(await self._embed_items(claimed[start : start + self._batch_size]))
            indexed = 0
            if done:
                indexed = await self._store.complete_indexing(
                    done, worker_id=self.worker_id, now=self._clock(), model=self._model
                )
                self.indexed_total += indexed
                if indexed == len(done) and self._waiters:
                    self._settled.update((item.id, ("indexed", None)) for item, _ in done)
            return indexed, len(claimed)

    async def _claim(self, limit: int) -> list[ClaimedEntry]:
        """Lease up to ``limit`` due rows of this queue's scope (a service worker overrides this to
        take turns between tenants)."""
        return await self._store.claim_pending(
            self._scope,
            limit=limit,
            worker_id=self.worker_id,
            lease_seconds=self._policy.lease_seconds,
            now=self._clock(),
        )

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
        if not self._waiters or self._scope is None:
            return
        wanted = set().union(*(waiter.ids for waiter in self._waiters))
        status = {i: self._settled[i] for i in wanted if i in self._settled}
        unknown = sorted(wanted - status.keys())
        if unknown:
            status.update(await self._store.index_status(self._scope, unknown))
        remaining: list[_Waiter] = []
        for waiter in self._waiters:
            if waiter.future.done():
                continue
            states = {entry_id: status.get(entry_id) for entry_id in waiter.ids}
            if any(state is not None and state[0] == "pending" for state in states.values()):
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
        still = set().union(*(waiter.ids for waiter in remaining))
        self._settled = {i: s for i, s in self._settled.items() if i in still}
