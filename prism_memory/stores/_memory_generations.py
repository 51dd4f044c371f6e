"""The in-memory store's vector generations: the registry, the backfill claims and leases of the
vectors kept beside the entries' own, progress, the switch, the promotion and the drop.

:class:`_InMemoryGenerations` is an object over the store's state (:class:`_InMemoryState`),
which :class:`~prism_memory.stores.memory.InMemoryVectorStore` delegates to. The shadow vectors
and their leases live on each thread (:class:`~prism_memory.stores._memory_rows._Thread`), so
deleting an entry drops them with it. No method awaits anything, so each call is one
uninterrupted step on the event loop: concurrent callers never see half of one.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterator, Sequence
from dataclasses import replace
from datetime import datetime, timedelta

from ..embedding import assert_finite_vector
from ..errors import (
    ConflictError,
    DimensionMismatchError,
    GenerationNotReadyError,
    NotFoundError,
    ValidationError,
)
from ..models import MemoryIdentity, Vector
from ._memory_rows import _frozen_vector, _InMemoryState, _key, _Row, _ScopeKey, _Thread
from .base import (
    ClaimedEntry,
    EntryKey,
    Generation,
    GenerationProgress,
    Promotion,
    VectorGenerations,
    check_claim,
    check_limit,
    check_max_lag,
    not_ready_message,
)


def _check_width(width: int, name: str) -> None:
    if isinstance(width, bool) or not isinstance(width, int) or width < 1:
        raise ValidationError(f"{name} must be a positive integer")


class _InMemoryGenerations(VectorGenerations):
    """The :class:`~prism_memory.stores.base.VectorGenerations` role of the in-memory store."""

    __slots__ = ("_state",)

    def __init__(self, state: _InMemoryState) -> None:
        self._state = state

    def _registered(self, model: str) -> Generation:
        generation = self._state.generations.get(model)
        if generation is None:
            raise NotFoundError("the model is not a registered vector generation")
        return generation

    def _vector_of(self, thread: _Thread, row: _Row, model: str) -> Vector | None:
        return thread.vector_of(model, row, self._state.primary_model())

    def _indexed(self) -> Iterator[tuple[_ScopeKey, _Thread, _Row]]:
        for key, thread in self._state.threads.items():
            for row in thread.rows.values():
                if row.record.status == "indexed":
                    yield key, thread, row

    async def start_generation(
        self, *, primary: str, primary_width: int, model: str, width: int, now: datetime
    ) -> Generation:
        """Register ``model`` as the shadow generation beside ``primary`` (see
        :meth:`VectorGenerations.start_generation`)."""
        _check_width(primary_width, "primary_width")
        _check_width(width, "width")
        registry = self._state.generations
        if model == primary:
            raise ConflictError("the new generation's model is the primary's model")
        current = next(iter(registry.values()), None)
        if current is not None and current.model != primary:
            raise ConflictError("another model is registered as the primary generation")
        existing = registry.get(model)
        if existing is not None:
            if existing.width != width:
                raise ConflictError("the model is registered with another width")
            return existing
        if any(g.role == "shadow" for g in registry.values()):
            raise ConflictError("another shadow generation exists (one migration at a time)")
        if current is None:
            registry[primary] = Generation(
                model=primary,
                width=primary_width,
                role="primary",
                active=True,
                started_at=now,
                switched_at=None,
            )
        shadow = Generation(
            model=model, width=width, role="shadow", active=False, started_at=now, switched_at=None
        )
        registry[model] = shadow
        return shadow

    async def generations(self) -> list[Generation]:
        """Every registered generation, the primary first."""
        return list(self._state.generations.values())

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
        """Lease up to ``limit`` indexed entries without a current vector of ``model``, in
        :class:`EntryKey` order after ``after`` (see :meth:`VectorGenerations.claim_generation`)."""
        check_claim(limit, lease_seconds)
        self._registered(model)
        until = now + timedelta(seconds=lease_seconds)
        claimed: list[ClaimedEntry] = []
        start = None if after is None else (after.tenant_id, after.resource_id, after.thread_id)
        for key in sorted(self._state.threads):
            if len(claimed) >= limit:
                break
            if start is not None and key < start:
                continue
            thread = self._state.threads[key]
            ids = sorted(thread.rows)
            if start is not None and key == start:
                assert after is not None
                ids = ids[bisect.bisect_right(ids, after.id) :]
            for entry_id in ids:
                if len(claimed) >= limit:
                    break
                row = thread.rows[entry_id]
                record = row.record
                if record.status != "indexed" or self._vector_of(thread, row, model) is not None:
                    continue
                lease = thread.shadow_leases.get(entry_id)
                if lease is not None and lease[0] != worker_id and lease[1] > now:
                    continue
                thread.shadow_leases[entry_id] = (worker_id, until)
                claimed.append(
                    ClaimedEntry(
                        scope=MemoryIdentity(
                            tenant_id=key[0], resource_id=key[1], thread_id=key[2]
                        ),
                        id=record.id,
                        revision=record.revision,
                        text=record.text,
                        attempts=record.attempts,
                        lease_until=until,
                    )
                )
        return claimed

    async def store_generation_vectors(
        self, model: str, items: Sequence[tuple[ClaimedEntry, Vector]], *, now: datetime
    ) -> int:
        """Store each vector where its entry still has the item's revision, all widths checked
        first (see :meth:`VectorGenerations.store_generation_vectors`)."""
        generation = self._registered(model)
        primary = self._state.primary_model()
        checked = [
            _frozen_vector(
                assert_finite_vector(vector, f"vectors[{at}]", expected_length=generation.width)
            )
            for at, (_, vector) in enumerate(items)
        ]
        stored = 0
        for (item, _), vector in zip(items, checked, strict=True):
            thread = self._state.thread(_key(item.scope))
            row = None if thread is None else thread.rows.get(item.id)
            if thread is None or row is None:
                continue
            if row.record.revision != item.revision:
                thread.shadow_leases.pop(item.id, None)  # leased for a text it no longer has
                continue
            if thread.own_is(model, row, primary):
                continue  # its own vector is of the model: it needs none beside it
            thread.shadow.setdefault(model, {})[item.id] = (item.revision, vector)
            thread.shadow_leases.pop(item.id, None)
            thread.shadow_indexes.pop(model, None)
            stored += 1
        return stored

    async def generation_progress(self, model: str, *, now: datetime) -> GenerationProgress:
        """How many indexed entries hold a current vector of ``model``, and how many more are
        leased (see :class:`GenerationProgress`)."""
        self._registered(model)
        entries = current = leased = 0
        for _, thread, row in self._indexed():
            entries += 1
            if self._vector_of(thread, row, model) is not None:
                current += 1
                continue
            lease = thread.shadow_leases.get(row.record.id)
            if lease is not None and lease[1] > now:
                leased += 1
        return GenerationProgress(model=model, entries=entries, current=current, leased=leased)

    async def switch_generation(
        self, model: str, *, force: bool, now: datetime, max_lag_seconds: float = 0.0
    ) -> Generation:
        """Make ``model`` the active generation for the whole store, refused while an indexed
        entry written ``max_lag_seconds`` or more before ``now`` lacks a current vector of it,
        unless ``force`` (see :meth:`VectorGenerations.switch_generation`)."""
        lag = check_max_lag(max_lag_seconds)
        horizon = now - timedelta(seconds=lag)
        target = self._registered(model)
        if target.active:
            return target
        if not force:
            missing = recent = 0
            for _, thread, row in self._indexed():
                if self._vector_of(thread, row, model) is None:
                    if lag and row.record.written_at > horizon:
                        recent += 1
                    else:
                        missing += 1
            if missing:
                raise GenerationNotReadyError(
                    not_ready_message(missing, recent, max_lag_seconds),
                    missing=missing,
                    recent=recent,
                )
        registry = self._state.generations
        for name, generation in registry.items():
            if name == model:
                registry[name] = replace(generation, active=True, switched_at=now)
            elif generation.active:
                registry[name] = replace(generation, active=False)
        return registry[model]

    async def promote_generation(self, model: str, *, limit: int, now: datetime) -> Promotion:
        """Swap up to ``limit`` entries' own vector for their current vector of the active
        ``model``, in :class:`EntryKey` order, and make ``model`` the primary generation once no
        indexed entry's own vector is of another model (see
        :meth:`VectorGenerations.promote_generation`).

        A primary ``model`` (already promoted) is never refused: it moves the entries a writer of
        the old model added since, if they hold a vector of it, and reports ``promoted``.
        """
        check_limit(limit)
        target = self._registered(model)
        state = self._state
        promoted = target.role == "primary"
        if not promoted:
            if not target.active:
                raise ConflictError("only the active generation can be promoted (switch first)")
            if state.dimension is not None and target.width != state.dimension:
                raise DimensionMismatchError(
                    "the store is pinned to another width than the generation's"
                )
        primary = state.primary_model()
        moved = 0
        for key in sorted(state.threads):
            if moved >= limit:
                break
            thread = state.threads[key]
            for entry_id in sorted(thread.rows):
                if moved >= limit:
                    break
                row = thread.rows[entry_id]
                vector = self._vector_of(thread, row, model)
                if vector is None or thread.own_is(model, row, primary) or row.vector is None:
                    continue
                record = row.record
                had = primary if record.embedding_model is None else record.embedding_model
                # kept as the entry's vector of its model; an unregistered model has no
                # generation to keep it in (as on PostgreSQL)
                if had in state.generations:
                    thread.shadow.setdefault(had, {})[entry_id] = (record.revision, row.vector)
                thread.shadow.get(model, {}).pop(entry_id, None)
                moved_row = replace(row, record=replace(record, embedding_model=model))
                moved_row.vector, moved_row.windows = vector, None  # the old model's windows go
                state.set_row(key, thread, moved_row)
                moved += 1
        if moved >= limit:
            return Promotion(model=model, moved=moved, left=None, promoted=promoted)
        left = sum(
            1
            for _, thread, row in self._indexed()
            if row.vector is None or not thread.own_is(model, row, primary)
        )
        if left == 0 and not promoted:
            self._swap(target)
            promoted = True
        return Promotion(model=model, moved=moved, left=left, promoted=promoted)

    def _swap(self, target: Generation) -> None:
        """Make ``target`` the primary generation and the old primary a shadow one, in one step
        (the active flags stay), and the store's width the new primary's."""
        state = self._state
        registry = state.generations
        swapped = {target.model: replace(target, role="primary")}
        for name, generation in registry.items():
            if name != target.model:
                role = "shadow" if generation.role == "primary" else generation.role
                swapped[name] = replace(generation, role=role)
        state.generations = swapped
        state.width = target.width
        for thread in state.threads.values():
            thread.shadow_indexes.clear()  # an own vector of no recorded model changed model

    async def drop_generation(self, model: str) -> int:
        """Delete the shadow generation ``model``'s vectors and registration (see
        :meth:`VectorGenerations.drop_generation`)."""
        generation = self._registered(model)
        if generation.role == "primary":
            raise ConflictError("the primary generation cannot be dropped")
        if generation.active:
            raise ConflictError("the active generation cannot be dropped (switch back first)")
        primary = self._state.primary_model()
        if any(
            thread.own_is(model, row, primary)
            for thread in self._state.threads.values()
            for row in thread.rows.values()
        ):
            raise ConflictError(
                "an entry's own vector is of the generation's model (promote the primary again)"
            )
        dropped = 0
        for thread in self._state.threads.values():
            dropped += len(thread.shadow.pop(model, {}))
            thread.shadow_leases.clear()
            thread.shadow_indexes.pop(model, None)
        del self._state.generations[model]
        return dropped
