"""The all-scopes indexing worker as a service: ``prism-memory worker --url …``.

One :class:`IndexingWorker` embeds every tenant's pending rows of one ``schema``/``table``:

* **fair across tenants** -- it takes turns: one claim (up to ``batch_size`` × ``CLAIM_BATCHES``
  rows) per tenant with due work, round-robin, so one tenant's backlog cannot starve another's;
* **several per database** -- claims are ``FOR UPDATE SKIP LOCKED`` leases, so workers in any number
  of processes share the work and never embed a row twice;
* **wakes on new work** -- it ``LISTEN``\\s on ``prism_memory_pending`` (revision
  ``prism_memory_0007`` notifies on every statement that leaves rows pending) and otherwise polls
  only every ``poll_seconds`` (for due retries); a lost LISTEN connection is re-opened (with
  backoff) and followed by a look for work, since notifications sent meanwhile are gone. Behind a
  transaction pooler (a store opened with ``pooling="transaction"``), where ``LISTEN`` cannot
  work, it listens on ``listen_url`` (a URL that bypasses the pooler) when given, else it polls
  every ``poll_seconds`` (:data:`POLL_SECONDS_WITHOUT_LISTEN` by default);
* **stops gracefully** -- :meth:`IndexingWorker.stop` lets the batch in hand finish and releases
  every lease the worker still holds;
* **during a model change** -- with ``next_embedder`` (the shadow generation's model) it stores
  each batch's vectors of that model before marking the batch indexed, as a memory's
  ``next_embedder`` does, so the rows it embeds need no backfill;
* logs one line per batch and keeps :class:`WorkerCounts`.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections import deque
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

from sqlalchemy.ext.asyncio import AsyncEngine

from .._clock import utcnow
from ..embedding import Embedder, embedder_model
from ..errors import ConfigurationError, EmbeddingModelMismatchError
from ..indexing import (
    BatchReport,
    ClaimContext,
    ClaimStrategy,
    IndexingPolicy,
    IndexingQueue,
    QueueObserver,
)
from ..indexing.generations import NextModelWriter
from ..stores.base import ClaimedEntry, VectorGenerations
from ._engine import create_engine
from .repositories import IndexingRepository
from .store import PostgresVectorStore

__all__ = [
    "NOTIFY_CHANNEL",
    "POLL_SECONDS",
    "POLL_SECONDS_WITHOUT_LISTEN",
    "IndexingWorker",
    "WorkerCounts",
]

logger = logging.getLogger("prism_memory.worker")

NOTIFY_CHANNEL = "prism_memory_pending"
"""The channel revision ``prism_memory_0007`` notifies; the payload is ``<schema>.<table>``."""

_TENANTS_PER_ROUND = 1000

POLL_SECONDS = 30.0
"""How often a listening worker looks for due work anyway (retries whose backoff ended)."""

POLL_SECONDS_WITHOUT_LISTEN = 1.0
"""How often a worker that cannot ``LISTEN`` (behind a transaction pooler, no ``listen_url``)
looks for work: its only way to see new rows."""


@dataclass(slots=True)
class WorkerCounts:
    """What one worker has done since it started."""

    batches: int = 0
    claimed: int = 0
    indexed: int = 0
    failed: int = 0
    wakeups: int = 0
    reconnects: int = 0


class _TenantTurns(ClaimStrategy):
    """Claims that take turns between tenants: one claim per tenant with due work, round-robin."""

    def __init__(self, worker: IndexingWorker) -> None:
        self._worker = worker
        self._turns: deque[str] = deque()

    async def claim(self, queue: ClaimContext, limit: int) -> list[ClaimedEntry]:
        """The next tenant's claim that finds due rows (a new round when the turns run out)."""
        if not self._turns:
            self._turns.extend(await self._worker.due_tenants())
        while self._turns:
            tenant = self._turns.popleft()
            claimed = await self._worker.claim_for_tenant(tenant, limit=limit)
            if claimed:
                return claimed
        return []


class _Counter(QueueObserver):
    """Keeps the worker's :class:`WorkerCounts` and logs one line per batch."""

    def __init__(self, worker: IndexingWorker) -> None:
        self._worker = worker

    def row_failed(self, item: ClaimedEntry) -> None:
        """Count the failure."""
        self._worker.counts.failed += 1

    def batch_done(self, report: BatchReport) -> None:
        """Count the batch, log it and write the status file."""
        counts = self._worker.counts
        counts.batches += 1
        counts.claimed += report.claimed
        counts.indexed += report.indexed
        logger.info(
            "batch %d: claimed %d, indexed %d, failed %d in %.2fs (totals: %d indexed, %d failed)",
            counts.batches,
            report.claimed,
            report.indexed,
            report.failed,
            report.seconds,
            counts.indexed,
            counts.failed,
        )
        self._worker.write_status()


class IndexingWorker:
    """Embed every tenant's pending rows of one store until :meth:`stop` (see the module docs)."""

    def __init__(
        self,
        store: PostgresVectorStore,
        embedder: Embedder,
        *,
        batch_size: int = 32,
        poll_seconds: float | None = None,
        policy: IndexingPolicy | None = None,
        name: str = "prism-worker",
        status_file: str | Path | None = None,
        listen_url: str | None = None,
        next_embedder: Embedder | None = None,
    ) -> None:
        base = policy or IndexingPolicy()
        self._listen_url = listen_url
        self.listening = listen_url is not None or store.pooling == "session"
        """Whether the worker wakes on ``NOTIFY`` (else it only polls)."""
        if poll_seconds is None:
            poll_seconds = POLL_SECONDS if self.listening else POLL_SECONDS_WITHOUT_LISTEN
        self._lease_seconds = base.lease_seconds
        self.store = store
        self._indexing = IndexingRepository(store.executor, store.tables)
        self.counts = WorkerCounts()
        self._model = embedder_model(embedder)
        if next_embedder is not None and embedder_model(next_embedder) in (None, self._model):
            raise ConfigurationError(
                "next_embedder must name its model (embedder.model), another than the embedder's"
            )
        self._status_file = Path(status_file) if status_file is not None else None
        self._queue = IndexingQueue(
            store=store,
            embedder=embedder,
            scope=None,
            batch_size=batch_size,
            clock=utcnow,
            policy=replace(base, idle_poll_seconds=poll_seconds),
            name=name,
            claims=_TenantTurns(self),
            observer=_Counter(self),
            next_writer=None
            if next_embedder is None
            else NextModelWriter(store, next_embedder, batch_size=batch_size, clock=utcnow),
        )
        names = store.tables.names
        self._payload = f"{names.schema}.{names.entries}"
        self._listener: Any = None
        self._listen_engine: AsyncEngine | None = None
        self._relisten_task: asyncio.Task[None] | None = None
        self._stopping = False

    @property
    def worker_id(self) -> str:
        """This worker's lease owner id (``claimed_by`` on the rows it holds)."""
        return self._queue.worker_id

    async def due_tenants(self) -> list[str]:
        """Tenants with pending rows, in order (at most 1,000 per round).

        A loose index scan over ``<table>_pending_tenant_idx``: one index probe per tenant, however
        long any tenant's backlog is. A tenant whose rows are all leased or waiting for a retry is
        listed too; its claim simply comes back empty. Refused to a role row-level security holds
        (it would find no tenant): the worker runs as a BYPASSRLS role.
        """
        self.store.executor.tenancy.refuse_store_wide("the worker's turn over tenants")
        return await self._indexing.due_tenants(_TENANTS_PER_ROUND)

    async def claim_for_tenant(self, tenant_id: str, *, limit: int) -> list[ClaimedEntry]:
        """Lease up to ``limit`` of ``tenant_id``'s due rows for this worker."""
        now = utcnow()
        return await self._indexing.claim(
            None,
            tenant_id=tenant_id,
            limit=limit,
            worker_id=self.worker_id,
            lease_seconds=self._lease_seconds,
            now=now,
        )

    def _notified(self, _conn: Any, _pid: int, _channel: str, payload: str) -> None:
        if payload == self._payload:
            self.counts.wakeups += 1
            self._queue.wake()

    async def _listen(self) -> None:
        engine = self.store.engine
        if self._listen_url is not None:
            if self._listen_engine is None:
                self._listen_engine = create_engine(self._listen_url, pooled=False)
            engine = self._listen_engine
        connection = await engine.connect()
        try:
            raw: Any = await connection.get_raw_connection()
            driver = raw.driver_connection
            await driver.add_listener(NOTIFY_CHANNEL, self._notified)
            driver.add_termination_listener(self._listener_lost)
        except BaseException:
            await connection.close()
            raise
        self._listener = connection

    def _listener_lost(self, _conn: Any) -> None:
        if self._stopping:
            return
        logger.warning("worker %s lost its LISTEN connection; reconnecting", self.worker_id)
        self._queue.wake()  # look now, and on the fallback poll until listening again
        self._relisten_task = asyncio.get_running_loop().create_task(self._relisten())

    async def _relisten(self) -> None:
        lost, self._listener = self._listener, None
        if lost is not None:
            with contextlib.suppress(Exception):
                await lost.invalidate()
            with contextlib.suppress(Exception):
                await lost.close()
        delay = 0.5
        while not self._stopping:
            try:
                await self._listen()
            except Exception as exc:  # noqa: BLE001 - logged; the fallback poll keeps working
                logger.warning("worker %s could not LISTEN again: %s", self.worker_id, exc)
                await asyncio.sleep(delay)
                delay = min(delay * 2, 30.0)
                continue
            self.counts.reconnects += 1
            self._queue.wake()  # notifications sent while nobody listened are lost
            logger.info("worker %s listening again on %s", self.worker_id, NOTIFY_CHANNEL)
            return

    async def check_model(self) -> None:
        """Refuse an embedder whose model is not the one the table's vectors hold.

        Raises :class:`~prism_memory.errors.EmbeddingModelMismatchError` when any row holds a
        vector another model made (rows without a recorded model do not count): the worker would
        add vectors recall cannot compare with them. While a model change runs, the models of the
        store's vector generations are not foreign to a worker of one of them (a promotion makes
        rows' own vectors the new model's one batch at a time). A model switch re-embeds first (docs/
        operations.md, "Switching models"). An embedder without ``model`` is not checked.
        """
        if self._model is None:
            return
        foreign = await self.store.embedding_models(None) - {self._model}
        if foreign and self._model in (generations := await self._generation_models()):
            # a model change runs: the own vectors of its generations may be of either model
            foreign -= generations
        if foreign:
            raise EmbeddingModelMismatchError(
                f"{self._payload} holds vectors made by {sorted(foreign)}; this worker's embedder is "
                f"{self._model!r}, and would mix them. Run the worker with that model, or switch "
                "models first (docs/operations.md, 'Switching models')"
            )

    async def _generation_models(self) -> set[str]:
        store = self.store
        if not isinstance(store, VectorGenerations):
            return set()
        return {generation.model for generation in await store.generations()}

    async def start(self) -> None:
        """Check the embedder's model (:meth:`check_model`), listen for new work and start the
        indexing task."""
        self._stopping = False
        await self.check_model()
        if self.listening:
            await self._listen()
            logger.info(
                "worker %s listening on %s for %s", self.worker_id, NOTIFY_CHANNEL, self._payload
            )
        else:
            logger.info(
                "worker %s polling for %s (behind a transaction pooler: no LISTEN)",
                self.worker_id,
                self._payload,
            )
        await self._queue.start()

    async def stop(self) -> None:
        """Finish the batch in hand, release every lease still held, stop listening."""
        self._stopping = True
        await self._queue.aclose(drain=False)
        if self._relisten_task is not None:
            self._relisten_task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._relisten_task
            self._relisten_task = None
        if self._listener is not None:
            connection, self._listener = self._listener, None
            with contextlib.suppress(Exception):
                raw: Any = await connection.get_raw_connection()
                raw.driver_connection.remove_termination_listener(self._listener_lost)
                await raw.driver_connection.remove_listener(NOTIFY_CHANNEL, self._notified)
            await connection.close()
        if self._listen_engine is not None:
            engine, self._listen_engine = self._listen_engine, None
            await engine.dispose()
        self.write_status()
        logger.info(
            "worker %s stopped: %d batches, %d indexed, %d failed",
            self.worker_id,
            self.counts.batches,
            self.counts.indexed,
            self.counts.failed,
        )

    async def run(self, stop: asyncio.Event) -> WorkerCounts:
        """Run until ``stop`` is set, then stop gracefully; return the counts."""
        await self.start()
        try:
            await stop.wait()
        finally:
            await self.stop()
        return self.counts

    def write_status(self) -> None:
        """Write the counts as JSON to ``status_file`` (when given), atomically."""
        if self._status_file is None:
            return
        temporary = self._status_file.with_suffix(self._status_file.suffix + ".tmp")
        temporary.write_text(json.dumps({"worker_id": self.worker_id, **asdict(self.counts)}))
        temporary.replace(self._status_file)
