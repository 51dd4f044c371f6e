"""Embedding the rows of one batch: a failed embedder batch is split so that one poisoned row never
blocks the rest; each failure is recorded on its row with the attempt count and retried with
exponential backoff, or marked ``failed`` once retrying cannot help. A :class:`QueueObserver`
is told of each failure and each batch."""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime

from .. import _telemetry as otel
from .._windowed import OwnVector
from ..embedding import Embedder
from ..errors import EmbedderError, InvalidVectorError
from ..stores.base import ClaimedEntry, IndexingLedger
from ..windows import embed_entries
from .policy import IndexingPolicy
from .threads import Threads

__all__ = ["BatchReport", "QueueObserver", "RowEmbedder"]

logger = logging.getLogger("prism_memory.indexing")


@dataclass(frozen=True, slots=True)
class BatchReport:
    """One batch the worker loop finished (see :class:`QueueObserver`)."""

    claimed: int
    """Rows taken into the batch."""
    indexed: int
    """Rows whose vectors were stored (0 for a batch handed to another lane)."""
    failed: int
    """Rows whose failure was recorded meanwhile."""
    seconds: float


class QueueObserver:
    """Told what a queue's worker loop does (``prism-memory worker`` counts and logs it); the
    methods do nothing here and run on the queue's task, so they must not block."""

    def row_failed(self, item: ClaimedEntry) -> None:
        """A failure of ``item`` was recorded (to retry, or ``failed``)."""

    def batch_done(self, report: BatchReport) -> None:
        """The worker loop finished a batch that claimed or adopted rows."""


@dataclass(slots=True)
class RowEmbedder:
    """Embeds a queue's rows and records their failures (on the store, and to the observer)."""

    store: IndexingLedger
    embedder: Embedder
    batch_size: int
    policy: IndexingPolicy
    clock: Callable[[], datetime]
    worker_id: str
    threads: Threads
    observer: QueueObserver | None
    failures: int = 0
    """Failures recorded since the queue was created."""

    async def embed(self, items: Sequence[ClaimedEntry]) -> list[tuple[ClaimedEntry, OwnVector]]:
        """Embed one embedder batch; if it fails, isolate the poisoned rows one at a time."""
        try:
            vectors = await self._embed([item.text for item in items])
            return list(zip(items, vectors, strict=True))
        except Exception as exc:  # noqa: BLE001 - embedder errors are recorded per row below
            if len(items) == 1:
                await self._fail(items[0], exc)
                return []
        done: list[tuple[ClaimedEntry, OwnVector]] = []
        for item in items:
            try:
                done.append((item, (await self._embed([item.text]))[0]))
            except Exception as item_exc:  # noqa: BLE001 - recorded on the row
                await self._fail(item, item_exc)
        return done

    async def refused(self, items: Sequence[ClaimedEntry], exc: InvalidVectorError) -> None:
        """The store refused the vectors of ``items``: each is marked ``failed`` (no retry)."""
        for item in items:
            await self._fail(item, exc)

    async def _embed(self, texts: list[str]) -> list[OwnVector]:
        return await embed_entries(
            self.embedder, texts, batch_size=self.batch_size, dimensions=self.embedder.dimensions
        )

    async def _fail(self, item: ClaimedEntry, exc: BaseException) -> None:
        attempts = item.attempts + 1
        refused = isinstance(exc, EmbedderError) and not exc.transient  # e.g. a bad API key
        permanent = (
            isinstance(exc, InvalidVectorError) or refused or attempts >= self.policy.max_attempts
        )
        now = self.clock()
        retry_at = None if permanent else now + self.policy.retry_delay(attempts)
        self.threads.touch(item.scope)  # due again later (or failed): the thread is not swept
        message = f"{type(exc).__name__}: {exc}"[:1000]
        logger.warning(
            "embedding entry %s failed (attempt %d, %s): %s",
            item.id,
            attempts,
            "giving up" if permanent else "will retry",
            message,
        )
        await self.store.fail_indexing(
            item, worker_id=self.worker_id, error=message, retry_at=retry_at, now=now
        )
        self.failures += 1
        meters = otel.instruments()
        if meters is not None:
            store = {"gen_ai.memory.store.id": otel.store_id(self.store)}
            (meters.failures if permanent else meters.retries).add(1, store)
            if permanent:
                meters.pending.add(-1, store)
        if self.observer is not None:
            self.observer.row_failed(item)
