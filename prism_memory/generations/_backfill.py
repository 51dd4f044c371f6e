"""The backfill of a shadow generation: claim, embed, store, over the whole store, resumable."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime

from .. import _telemetry as otel
from .._clock import utcnow
from ..embedding import Embedder, embedder_model
from ..errors import EmbeddingModelMismatchError, ValidationError
from ..limits import CEILINGS
from ..models import Vector
from ..stores._records import ClaimedEntry
from ..stores._role_generations import EntryKey, VectorGenerations
from ..windows import embed_whole

__all__ = ["BackfillProgress", "BackfillReport", "backfill_generation"]

MAX_BACKFILL_BATCH = 1000
"""The most entries one claim of :func:`backfill_generation` leases."""


@dataclass(frozen=True, slots=True)
class BackfillProgress:
    """What :func:`backfill_generation` hands its ``on_progress`` callback after each batch."""

    done: int
    """Indexed entries holding a current vector of the model (as counted at the start of the
    pass, plus what this run stored since)."""
    total: int
    """Indexed entries the generation must cover (counted at the start of the pass)."""
    rate: float
    """Vectors this run stored per second, since it started."""
    eta: float | None
    """Seconds left at that rate (``None`` before the first vector is stored)."""


@dataclass(frozen=True, slots=True)
class BackfillReport:
    """What one :func:`backfill_generation` run did."""

    model: str
    claimed: int
    """Entries it leased."""
    stored: int
    """Vectors it stored (a claimed entry whose text changed meanwhile is skipped: the next
    pass claims it again at its new revision)."""
    passes: int
    """Walks over the store from the first entry (the last one claimed nothing)."""
    seconds: float
    remaining: int
    """Indexed entries still without a current vector of the model when it ended (another
    worker may hold some of them)."""

    @property
    def rate(self) -> float:
        """Vectors stored per second."""
        return self.stored / self.seconds if self.seconds > 0 else 0.0


def _checked(model: str, embedder: Embedder, batch_size: int, lease_seconds: float) -> None:
    if embedder_model(embedder) != model:
        raise EmbeddingModelMismatchError(
            "the embedder's model is not the generation's model: backfill a generation with the "
            "embedder of its model (docs/operations.md, 'Switching models')"
        )
    if isinstance(batch_size, bool) or not isinstance(batch_size, int):
        raise ValidationError("batch_size must be an integer")
    if not 1 <= batch_size <= MAX_BACKFILL_BATCH:
        raise ValidationError(f"batch_size must be between 1 and {MAX_BACKFILL_BATCH}")
    if not lease_seconds > 0:
        raise ValidationError("lease_seconds must be positive")


async def _store(
    store: VectorGenerations,
    model: str,
    items: Sequence[tuple[ClaimedEntry, Vector]],
    now: datetime,
) -> int:
    """Store a batch already embedded, even when the caller is cancelled meanwhile (the
    embedding is paid for); the cancellation is raised once the batch is stored."""
    task = asyncio.ensure_future(store.store_generation_vectors(model, items, now=now))
    try:
        return await asyncio.shield(task)
    except asyncio.CancelledError:
        if not task.done():
            await asyncio.wait({task})
        raise


@otel.traced("update_memory", "generations.backfill_generation", count=lambda r: r.stored)
async def backfill_generation(
    store: VectorGenerations,
    model: str,
    embedder: Embedder,
    *,
    batch_size: int = 64,
    worker_id: str | None = None,
    lease_seconds: float = 60.0,
    follow: bool = False,
    poll_seconds: float = 5.0,
    on_progress: Callable[[BackfillProgress], None] | None = None,
    clock: Callable[[], datetime] | None = None,
) -> BackfillReport:
    """Embed every indexed entry that lacks a current vector of the shadow generation ``model``
    with ``embedder`` (whose model must be ``model``) and store it, ``batch_size`` entries at a
    time, walking the store in :class:`~prism_memory.stores.base.EntryKey` order.

    When a walk reaches the last entry it starts again from the first (to catch entries written
    or corrected meanwhile) until a whole walk claims nothing; with ``follow`` it then keeps
    polling every ``poll_seconds`` until cancelled. Several workers may run at once: each claim
    leases its entries for ``lease_seconds``. Cancelling it is safe: a batch already embedded is
    stored first, and the leases of a batch not yet embedded expire by themselves.
    ``on_progress`` gets a :class:`BackfillProgress` after each batch.

    :class:`~prism_memory.errors.EmbeddingModelMismatchError` if ``embedder`` is of another
    model; :class:`~prism_memory.errors.NotFoundError` if ``model`` is not a shadow generation.
    """
    _checked(model, embedder, batch_size, lease_seconds)
    now = clock or utcnow
    worker = worker_id or f"backfill-{uuid.uuid4().hex[:12]}"
    embed_batch = min(batch_size, CEILINGS["embed_batch"])
    started = time.perf_counter()
    claimed = stored = passes = 0
    progress = await store.generation_progress(model, now=now())
    base, total = progress.current, progress.entries

    def report(remaining: int) -> BackfillReport:
        elapsed = time.perf_counter() - started
        return BackfillReport(model, claimed, stored, passes, elapsed, remaining)

    def tell() -> None:
        if on_progress is None:
            return
        rate = stored / max(time.perf_counter() - started, 1e-9)
        done = min(total, base + stored)
        eta = (total - done) / rate if rate > 0 else None
        on_progress(BackfillProgress(done=done, total=total, rate=rate, eta=eta))

    tell()  # where it starts: a progress bar's rate then counts this run's vectors only
    cursor: EntryKey | None = None
    claimed_this_pass = 0
    passes = 1
    while True:
        batch = await store.claim_generation(
            model,
            limit=batch_size,
            worker_id=worker,
            lease_seconds=lease_seconds,
            now=now(),
            after=cursor,
        )
        if not batch:
            if claimed_this_pass == 0 and not follow:
                progress = await store.generation_progress(model, now=now())
                return report(progress.missing)
            if claimed_this_pass == 0:
                await asyncio.sleep(poll_seconds)
            else:
                passes += 1
            cursor, claimed_this_pass = None, 0
            progress = await store.generation_progress(model, now=now())
            base, total = progress.current - stored, progress.entries
            continue
        claimed += len(batch)
        claimed_this_pass += len(batch)
        cursor = max(
            EntryKey(e.scope.tenant_id, e.scope.resource_id, e.scope.thread_id, e.id) for e in batch
        )
        vectors = await embed_whole(
            embedder, [entry.text for entry in batch], batch_size=embed_batch
        )
        stored += await _store(store, model, list(zip(batch, vectors, strict=True)), now())
        tell()
