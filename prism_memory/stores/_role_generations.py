"""The optional vector-generations role of the store contract: :class:`VectorGenerations`.

A *generation* is one embedding model's set of vectors for the entries. The entries' own vectors
(the ones the indexing ledger writes) are the *primary* generation; a model change adds a
*shadow* generation beside it, which backfill workers fill while recall keeps answering from the
active one. Switching recall to another generation, and back, is one statement; *promoting* the
new model afterwards moves its vectors into the entries' own, so the old model can be dropped.
Re-exported by
:mod:`prism_memory.stores.base`; a store that does not implement it simply cannot change models
without an outage (docs/operations.md, "Switching models").
"""

from __future__ import annotations

import abc
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Literal

from ..models import Vector
from ._records import ClaimedEntry

__all__ = [
    "EntryKey",
    "Generation",
    "GenerationProgress",
    "GenerationRole",
    "Promotion",
    "VectorGenerations",
]

GenerationRole = Literal["primary", "shadow"]
"""``primary``: the entries' own vectors (written by the indexing ledger, the import, correct);
``shadow``: vectors of another model kept beside them, one per entry and model."""


@dataclass(frozen=True, slots=True)
class Generation:
    """One embedding model's vectors in a store, as the store registered them."""

    model: str
    width: int
    role: GenerationRole
    active: bool
    """Whether recall answers from this generation (exactly one is active)."""
    started_at: datetime
    switched_at: datetime | None
    """When it last became the active one (``None``: never)."""


@dataclass(frozen=True, slots=True)
class GenerationProgress:
    """How far a generation's backfill is: what :meth:`VectorGenerations.generation_progress`
    returns."""

    model: str
    entries: int
    """Indexed entries the generation must hold a vector for."""
    current: int
    """How many of them hold one of this model at the entry's current revision."""
    leased: int
    """How many more are leased to a backfill worker right now."""

    @property
    def missing(self) -> int:
        """Entries still without a current vector of the model."""
        return max(0, self.entries - self.current)

    @property
    def complete(self) -> bool:
        """Whether every indexed entry holds a current vector of the model."""
        return self.missing == 0


@dataclass(frozen=True, slots=True)
class Promotion:
    """One step of :meth:`VectorGenerations.promote_generation`."""

    model: str
    moved: int
    """Entries whose own vector became the model's in this call."""
    left: int | None
    """Indexed entries whose own vector is still of another model, counted when this call
    reached the end of its walk (it moved fewer than ``limit``); ``None`` after a full batch
    (call again). Non-zero at the end: entries without a current vector of the model yet (run
    the backfill) or written meanwhile by a writer of the old model (call again)."""
    promoted: bool
    """Whether the model is the primary generation now (nothing was left)."""


@dataclass(frozen=True, slots=True, order=True)
class EntryKey:
    """An entry's full key, in the order a backfill walks the store (a resumable cursor)."""

    tenant_id: str
    resource_id: str
    thread_id: str
    id: str


class VectorGenerations(abc.ABC):
    """Vectors of more than one embedding model per entry, and which model recall answers from.

    An entry's vector *of a model* is its own vector when its recorded ``embedding_model`` is
    that model (an own vector that records no model counts as the primary's), else its vector of
    that model kept beside it, *current* while it was made from the entry's current revision.
    Every method below, and a search, reads vectors by that rule, so an entry answers the same
    wherever its vector of a model lives: before, during and after a promotion.

    Eight abstract methods. A store that implements this role also honours
    :attr:`SearchRequest.model <prism_memory.stores.base.SearchRequest.model>` in
    :meth:`~prism_memory.stores.base.EntryStore.search` and reports
    :attr:`SearchResult.active_model <prism_memory.stores.base.SearchResult.active_model>` read in
    the same snapshot as the candidates, so a recall never ranks a query of one model against
    another model's vectors, even while a switch lands. Deleting an entry deletes its vectors of
    every generation; a new text (a correction's revision) makes its shadow vectors stale until
    re-embedded (a stale vector is never ranked).
    """

    @abc.abstractmethod
    async def start_generation(
        self, *, primary: str, primary_width: int, model: str, width: int, now: datetime
    ) -> Generation:
        """Register ``model`` (vectors of ``width``) as a shadow generation beside ``primary``,
        the model of the entries' own vectors, which is registered too (active) if it was not.

        Idempotent for the same model and width. :class:`~prism_memory.errors.ConflictError`
        (nothing changed) if ``model`` is registered with another width, is the primary, or
        another shadow generation exists (one migration at a time), or if the primary registered
        is not ``primary``.
        """

    @abc.abstractmethod
    async def generations(self) -> list[Generation]:
        """Every registered generation, the primary first (empty: the store never had one)."""

    @abc.abstractmethod
    async def claim_generation(
        self,
        model: str,
        *,
        limit: int,
        worker_id: str,
        lease_seconds: float,
        now: datetime,
        after: EntryKey | None = None,
    ) -> list[ClaimedEntry]:
        """Lease up to ``limit`` indexed entries that hold no current vector of the generation
        ``model``, and whose vector of it is not leased to another worker, ordered by
        :class:`EntryKey` and only those after ``after``.

        A write made while a migration runs needs nothing more: the next claim finds it (also a
        write of the old model after a promotion, claimed for the new primary).
        :class:`~prism_memory.errors.NotFoundError` if ``model`` is not a registered generation.
        """

    @abc.abstractmethod
    async def store_generation_vectors(
        self, model: str, items: Sequence[tuple[ClaimedEntry, Vector]], *, now: datetime
    ) -> int:
        """Store each item's vector as its entry's vector of the generation ``model`` (kept
        beside its own), only while the entry still has the item's revision and its own vector
        is not of ``model`` (another is skipped: the text changed, or it needs none), replacing
        a vector of the same entry and model and releasing its lease; the number stored. The
        items may come from :meth:`claim_generation` or from an indexing claim (a memory that
        embeds its new writes with both models).

        :class:`~prism_memory.errors.NotFoundError` if ``model`` is not a registered generation,
        :class:`~prism_memory.errors.DimensionMismatchError` (nothing stored) if a vector is not
        of its width; all or nothing.
        """

    @abc.abstractmethod
    async def generation_progress(self, model: str, *, now: datetime) -> GenerationProgress:
        """How many indexed entries hold a current vector of the generation ``model`` (see
        :class:`GenerationProgress`). :class:`~prism_memory.errors.NotFoundError` if ``model`` is
        not registered."""

    @abc.abstractmethod
    async def switch_generation(
        self, model: str, *, force: bool, now: datetime, max_lag_seconds: float = 0.0
    ) -> Generation:
        """Make ``model`` the generation recall answers from, for the whole store, in one atomic
        step; switching back to the primary is the rollback.

        Refused with :class:`~prism_memory.errors.GenerationNotReadyError` (nothing changed)
        while an indexed entry written (``written_at``: its current text) at or before
        ``now - max_lag_seconds`` has no current vector of ``model``, unless ``force``. Entries
        without one -- those written within ``max_lag_seconds`` (the lag a running backfill
        follower is allowed), or any after ``force`` -- are not recalled until the backfill
        reaches them: recall only ranks vectors of the active model. ``max_lag_seconds`` (0 by
        default: every indexed entry) is checked by
        :func:`~prism_memory.stores.base.check_max_lag`.
        :class:`~prism_memory.errors.NotFoundError` if ``model`` is not registered.
        """

    @abc.abstractmethod
    async def promote_generation(self, model: str, *, limit: int, now: datetime) -> Promotion:
        """Make the active shadow generation ``model`` the entries' own vectors, ``limit``
        entries per call, so that the old primary can be dropped; call until
        :attr:`Promotion.promoted`.

        Each call swaps, for up to ``limit`` indexed entries whose own vector is of another model
        and that hold a current vector of ``model`` (in :class:`EntryKey` order, locked rows
        skipped): their vector of ``model`` becomes their own, and the own vector they had is
        kept as their vector of its model. Recall answers the same throughout (the rule above).
        When the call reaches the end of its walk and no indexed entry's own vector is of
        another model, ``model`` becomes the primary generation and the old primary a shadow one
        (still a rollback away: :meth:`switch_generation`; :meth:`drop_generation` retires it).

        :class:`~prism_memory.errors.NotFoundError` if ``model`` is not registered,
        :class:`~prism_memory.errors.ConflictError` (nothing changed) unless it is the active
        generation, :class:`~prism_memory.errors.DimensionMismatchError` (nothing changed) if
        the entries' own vectors cannot hold its width (a pinned column of another width). A
        primary ``model`` (already promoted) is never refused and reports ``promoted``: it moves
        the entries a writer of the old model added since, when they hold a vector of it.
        """

    @abc.abstractmethod
    async def drop_generation(self, model: str) -> int:
        """Delete the shadow generation ``model`` -- its vectors and its registration -- and
        return how many vectors went. :class:`~prism_memory.errors.ConflictError` (nothing
        changed) while it is the active one, if it is the primary, or while an entry's own
        vector is of it (written by a writer of that model after a promotion: promote again);
        :class:`~prism_memory.errors.NotFoundError` if it is not registered."""
