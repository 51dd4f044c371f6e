"""The dual write of a model change: a memory's ``next_embedder`` writes its new entries' vectors
of the next model too, into the store's shadow generation
(:class:`~prism_memory.stores.base.VectorGenerations`), so that a switch finds them already there.

The indexing queue calls :meth:`NextModelWriter.write` with each embedded batch *before* it
completes the batch (an entry never becomes recallable under the old model without already
holding the new one's vector), also for ``remember(wait=True)``; ``correct`` calls it right after
its write (the new revision must exist first). A failure here never undoes or blocks the primary write: it is logged, and the backfill
(``prism-memory models backfill``) embeds the entry later.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Sequence
from datetime import datetime

from ..embedding import Embedder, embedder_model
from ..errors import DimensionMismatchError, NotFoundError
from ..stores.base import ClaimedEntry, VectorGenerations
from ..windows import embed_whole

__all__ = ["NEXT_MODEL_RECHECK_SECONDS", "NextModelWriter"]

logger = logging.getLogger("prism_memory.indexing")

NEXT_MODEL_RECHECK_SECONDS = 60.0
"""How long a writer trusts "the store has no shadow generation of my model" before asking again
(a migration started after the memory opened is joined within this long)."""


class NextModelWriter:
    """Stores vectors of ``embedder`` (a memory's ``next_embedder``) as the store's generation of
    that model, when it has one: a shadow generation being filled, or -- once a promotion made
    it the primary -- for the entries a writer of the old model still indexes (the store keeps
    them beside those entries' own vectors, and a later promotion moves them)."""

    __slots__ = ("_asked_at", "_clock", "_store", "_target", "batch_size", "embedder", "model")

    def __init__(
        self,
        store: object,
        embedder: Embedder,
        *,
        batch_size: int,
        clock: Callable[[], datetime],
    ) -> None:
        self._store = store if isinstance(store, VectorGenerations) else None
        self.embedder = embedder
        self.model = embedder_model(embedder)
        self.batch_size = batch_size
        self._clock = clock
        self._target: bool | None = None
        """Whether the store has a generation of this model (``None``: ask)."""
        self._asked_at = 0.0

    def forget(self) -> None:
        """Ask the store again before the next write (a search reported an unknown model)."""
        self._target = None

    async def active(self) -> bool:
        """Whether writes go to a generation of this model: the store is a
        :class:`VectorGenerations` with this model registered -- a shadow being filled, or the
        primary it was promoted to, whose vector an old model's write needs beside its own until
        promoted again (asked once, a "no" again after
        :data:`NEXT_MODEL_RECHECK_SECONDS`). :class:`DimensionMismatchError` if that generation
        holds vectors of another width than the embedder makes."""
        store = self._store
        if store is None or self.model is None:
            return False
        stale = time.monotonic() - self._asked_at > NEXT_MODEL_RECHECK_SECONDS
        if self._target is None or (not self._target and stale):
            generations = await store.generations()
            found = next((g for g in generations if g.model == self.model), None)
            if found is not None and found.width != self.embedder.dimensions:
                raise DimensionMismatchError(
                    f"next_embedder makes vectors of width {self.embedder.dimensions}, the "
                    f"store's generation of its model holds width {found.width}: nothing was "
                    "written"
                )
            self._target = found is not None
            self._asked_at = time.monotonic()
        return self._target

    async def write(self, items: Sequence[ClaimedEntry]) -> int:
        """Embed ``items`` with the next model and store them in its shadow generation; how
        many were stored. Never raises (but cancellation): a failure is logged and left to the
        backfill, the primary write stands."""
        if not items:
            return 0
        try:
            if not await self.active():
                return 0
            assert self._store is not None
            assert self.model is not None
            vectors = await embed_whole(
                self.embedder,
                [item.text for item in items],
                batch_size=self.batch_size,
                dimensions=self.embedder.dimensions,
            )
            return await self._store.store_generation_vectors(
                self.model, list(zip(items, vectors, strict=True)), now=self._clock()
            )
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # noqa: BLE001 - the backfill embeds what this could not
            if isinstance(exc, NotFoundError):
                self.forget()  # the generation was dropped meanwhile
            logger.warning(
                "storing %d vectors of the next model failed (%s); the backfill will embed them",
                len(items),
                type(exc).__name__,
            )
            return 0
