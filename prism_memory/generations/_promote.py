"""Retiring the old model: promote the active generation batch by batch until it is the primary
(:meth:`~prism_memory.stores.base.VectorGenerations.promote_generation`), resumable."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass

from .. import _telemetry as otel
from .._clock import utcnow
from ..errors import ValidationError
from ..stores._role_generations import VectorGenerations

__all__ = ["MAX_PROMOTION_BATCH", "PromotionReport", "promote_to_primary"]

MAX_PROMOTION_BATCH = 10_000
"""The most entries one statement of :func:`promote_to_primary` moves."""

_LOCKED_RETRY_SECONDS = 0.2
"""How long a run waits before walking again when rows another transaction held were skipped."""


@dataclass(frozen=True, slots=True)
class PromotionReport:
    """What one :func:`promote_to_primary` run did."""

    model: str
    moved: int
    """Entries whose own vector became the model's in this run."""
    promoted: bool
    """Whether the model is the primary generation now."""
    left: int
    """Indexed entries whose own vector is still of another model when the run ended: entries
    without a current vector of the model (run the backfill, then promote again). Only a model
    that was already the primary can be ``promoted`` with entries left (written since by a writer
    of the old model)."""
    seconds: float

    @property
    def rate(self) -> float:
        """Entries moved per second."""
        return self.moved / self.seconds if self.seconds > 0 else 0.0


@otel.traced("update_memory", "generations.promote_to_primary", count=lambda r: r.moved)
async def promote_to_primary(
    store: VectorGenerations,
    model: str,
    *,
    batch_size: int = 1000,
    on_progress: Callable[[int], None] | None = None,
) -> PromotionReport:
    """Promote the active generation ``model`` until it is the primary, ``batch_size`` entries
    per statement; ``on_progress`` gets the entries moved so far after each batch.

    Stops when the store reports the model promoted, or when a whole walk moved nothing and
    entries are left (they have no current vector of the model yet: the report says how many).
    Rows another transaction holds are skipped and walked again. Cancel-safe: each batch is one
    step of the store; a new run continues where it stopped.
    """
    if isinstance(batch_size, bool) or not isinstance(batch_size, int):
        raise ValidationError("batch_size must be an integer")
    if not 1 <= batch_size <= MAX_PROMOTION_BATCH:
        raise ValidationError(f"batch_size must be between 1 and {MAX_PROMOTION_BATCH}")
    started = time.monotonic()
    moved = 0
    moved_this_walk = 0
    while True:
        step = await store.promote_generation(model, limit=batch_size, now=utcnow())
        moved += step.moved
        moved_this_walk += step.moved
        if on_progress is not None:
            on_progress(moved)
        if step.left is None:  # a full batch: more may follow
            continue
        if step.promoted:  # left: entries still without a vector of it (promoting it again)
            return PromotionReport(model, moved, True, step.left, time.monotonic() - started)
        if not moved_this_walk:  # a whole walk moved nothing: those left have no vector yet
            return PromotionReport(model, moved, False, step.left, time.monotonic() - started)
        moved_this_walk = 0  # rows written or held meanwhile: walk once more
        await asyncio.sleep(_LOCKED_RETRY_SECONDS)
