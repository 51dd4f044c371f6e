"""Vector generations on PostgreSQL (revision ``prism_memory_0011``): what
:class:`~prism_memory.postgres.PostgresVectorStore` hands its
:class:`~prism_memory.stores.base.VectorGenerations` calls to, the registry it caches to
choose a search's vectors, and the width of the entries' vectors (:class:`VectorWidth`: the pinned
one, the one first stored, or the generation's), which every write checks against and recall's
search reads."""

from __future__ import annotations

import time
from collections.abc import Iterable, Sequence
from datetime import datetime, timedelta

from .._windowed import OwnVector, WindowedVector, checked_own
from ..embedding import assert_finite_vector
from ..errors import (
    ConflictError,
    DimensionMismatchError,
    GenerationNotReadyError,
    NotFoundError,
    ValidationError,
)
from ..models import Vector
from ..stores.base import (
    ClaimedEntry,
    EntryKey,
    Generation,
    GenerationProgress,
    Promotion,
    VectorGenerations,
    check_lease,
    check_limit,
    check_max_lag,
    not_ready_message,
)
from ._executor import Executor
from .repositories import EntryRepository
from .repositories.generations import GenerationRepository, generation_from_row
from .tables import MAX_DIMENSION, PrismTables

__all__ = ["PostgresGenerations", "VectorWidth"]

_MISS_SECONDS = 30.0
"""How long a model found unregistered is not looked up again (a search naming a model the store
never registered -- a store that never migrated -- costs no registry read per recall), and how
long the registry as last read is trusted (another process may have dropped a generation)."""


def _check_model(model: object, what: str) -> str:
    if not isinstance(model, str) or not model.strip():
        raise ValidationError(f"{what} must be a non-empty string")
    return model


def _check_width(width: object, what: str) -> int:
    if isinstance(width, bool) or not isinstance(width, int) or not 1 <= width <= MAX_DIMENSION:
        raise ValidationError(f"{what} must be an integer in [1, {MAX_DIMENSION}]")
    return width


class PostgresGenerations(VectorGenerations):
    """:class:`~prism_memory.stores.base.VectorGenerations` on ``<table>_generations`` and
    ``<table>_vectors``, and the registry as last read (:meth:`vectors_of`)."""

    def __init__(self, executor: Executor, tables: PrismTables, pinned: int | None) -> None:
        self._executor = executor
        self._tables = tables
        self._pinned = pinned
        self._repository = GenerationRepository(executor, tables)
        self._known: dict[str, Generation] = {}
        self._read_at = 0.0
        self._misses: dict[str, float] = {}

    # ---- the cache a search reads ----------------------------------------------------------

    def _remember(self, found: Sequence[Generation]) -> None:
        self._known = {generation.model: generation for generation in found}
        self._read_at = time.monotonic()
        self._misses.clear()

    async def _cached(self, model: str) -> Generation | None:
        """``model``'s generation as last read; the registry is read again when the cache is
        older than :data:`_MISS_SECONDS` and knows generations, or does not know ``model``
        (then at most every :data:`_MISS_SECONDS` for one model)."""
        now = time.monotonic()
        if self._known and now - self._read_at >= _MISS_SECONDS:
            self._remember(await self._repository.registry())
        generation = self._known.get(model)
        if generation is None:
            missed = self._misses.get(model)
            if missed is not None and now - missed < _MISS_SECONDS:
                return None
            self._remember(await self._repository.registry())
            generation = self._known.get(model)
            if generation is None:
                self._misses[model] = now
        return generation

    async def vectors_of(self, model: str | None) -> Generation | None:
        """The generation a search of ``model`` ranks by the rule (each row's vector of it: its
        own or the one kept beside it; :meth:`~prism_memory.postgres.statements.RecallSql.search`'s
        ``by_model``): the registered ``model`` -- ``None`` naming the primary -- while the store
        holds more than one generation; ``None`` when a search ranks the entries' own vectors
        (no generations, one, or an unregistered model). A search without a model reads the
        registry as last cached (it never triggers a read)."""
        if model is None:
            model = next((g.model for g in self._known.values() if g.role == "primary"), None)
            if model is None:
                return None
        generation = await self._cached(model)
        return generation if generation is not None and len(self._known) > 1 else None

    async def width_of(self, model: str | None) -> int | None:
        """The width a write of ``model``'s vectors is checked against: its generation's, or
        the primary generation's when the store has generations and ``model`` is not one of
        them (``None``: the store never registered any)."""
        if model is not None:
            generation = await self._cached(model)
            if generation is not None:
                return generation.width
        primary = next((g for g in self._known.values() if g.role == "primary"), None)
        return None if primary is None else primary.width

    def observe(self, active_model: str | None) -> None:
        """A search reported ``active_model``: forget the cache if it does not know it."""
        if active_model is not None and active_model not in self._known:
            self._known = {}
            self._misses.clear()

    async def _registered(self, model: str) -> Generation | None:
        self._remember(await self._repository.registry())
        return self._known.get(model)

    async def _registered_or_raise(self, model: str) -> Generation:
        generation = await self._registered(_check_model(model, "model"))
        if generation is None:
            raise NotFoundError("the model is not a registered generation of this store")
        return generation

    # ---- VectorGenerations -----------------------------------------------------------------

    async def start_generation(
        self, *, primary: str, primary_width: int, model: str, width: int, now: datetime
    ) -> Generation:
        """Register ``model`` as the shadow generation beside ``primary`` (see
        :meth:`VectorGenerations.start_generation`), under a lock of the registry."""
        _check_model(primary, "primary")
        _check_model(model, "model")
        _check_width(primary_width, "primary_width")
        _check_width(width, "width")
        async with self._executor.unit("start_generation") as unit:
            repository = GenerationRepository(unit, self._tables)
            await repository.lock()
            found = await repository.registry()
            by_model = {generation.model: generation for generation in found}
            registered = next((g for g in found if g.role == "primary"), None)
            if registered is not None and registered.model != primary:
                raise ConflictError("another model is registered as the primary generation")
            if model == primary:
                raise ConflictError("the model is the primary generation's")
            mine = by_model.get(model)
            if mine is not None and mine.width != width:
                raise ConflictError("the model is registered with another width")
            if mine is None:
                if any(g.role == "shadow" for g in found):
                    raise ConflictError(
                        "another shadow generation exists (one migration at a time: switch "
                        "to it or drop it first)"
                    )
                if registered is None:
                    active = not any(g.active for g in found)
                    await repository.register(
                        primary, primary_width, "primary", active=active, now=now
                    )
                await repository.register(model, width, "shadow", active=False, now=now)
                found = await repository.registry()
        self._remember(found)
        return self._known[model]

    async def generations(self) -> list[Generation]:
        """Every registered generation, the primary first."""
        found = await self._repository.registry()
        self._remember(found)
        return found

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
        """Lease entries without a current vector of ``model`` (:attr:`GenerationSql.claim`)."""
        self._executor.tenancy.refuse_store_wide("a generation's backfill claim")
        check_limit(limit)
        check_lease(lease_seconds)
        await self._registered_or_raise(model)
        return await self._repository.claim(
            model,
            limit=limit,
            worker_id=worker_id,
            lease_seconds=lease_seconds,
            now=now,
            after=after,
        )

    async def store_generation_vectors(
        self, model: str, items: Sequence[tuple[ClaimedEntry, Vector]], *, now: datetime
    ) -> int:
        """Store the items' vectors of ``model`` where the revision matches and the entry's own
        vector is of another model, all checked first."""
        generation = await self._registered_or_raise(model)
        checked = [
            (item, assert_finite_vector(vector, f"vector {i}", expected_length=generation.width))
            for i, (item, vector) in enumerate(items)
        ]
        return await self._repository.store(model, checked)

    async def generation_progress(self, model: str, *, now: datetime) -> GenerationProgress:
        """Counts of :attr:`GenerationSql.progress`."""
        self._executor.tenancy.refuse_store_wide("a generation's progress")
        row = await self._repository.progress(_check_model(model, "model"), now)
        if row["role"] is None:
            raise NotFoundError("the model is not a registered generation of this store")
        return GenerationProgress(
            model, int(row["entries"]), int(row["current"]), int(row["leased"])
        )

    async def switch_generation(
        self, model: str, *, force: bool, now: datetime, max_lag_seconds: float = 0.0
    ) -> Generation:
        """Flip the active generation in one statement (:attr:`GenerationSql.switch`); entries
        written after ``now - max_lag_seconds`` do not hold it back (0: every entry counts)."""
        self._executor.tenancy.refuse_store_wide("a generation switch")
        lag = check_max_lag(max_lag_seconds)
        horizon = now - timedelta(seconds=lag) if lag else None
        row = await self._repository.switch(
            _check_model(model, "model"), force=force, now=now, horizon=horizon
        )
        if not row["found"]:
            raise NotFoundError("the model is not a registered generation of this store")
        if row["model"] is None:
            missing, recent = int(row["missing"]), int(row["recent"])
            raise GenerationNotReadyError(
                not_ready_message(missing, recent, lag), missing=missing, recent=recent
            )
        self._known = {}
        return generation_from_row(row)

    async def promote_generation(self, model: str, *, limit: int, now: datetime) -> Promotion:
        """One batch of :attr:`GenerationSql.promote`, then, when it was not full,
        :attr:`GenerationSql.finish_promotion` (see :meth:`VectorGenerations.promote_generation`).
        """
        self._executor.tenancy.refuse_store_wide("a generation promotion")
        check_limit(limit)
        generation = await self._registered_or_raise(model)
        promoted = generation.role == "primary"  # then: move what old-model writers added since
        if not promoted and not generation.active:
            raise ConflictError("only the active generation can be promoted: switch to it first")
        if self._pinned is not None and self._pinned != generation.width:
            raise DimensionMismatchError(
                f"the entries' vectors are pinned to vector({self._pinned}) and the model's are "
                f"{generation.width} wide: nothing was moved. Recall keeps answering from the "
                "model's generation (docs/operations.md, 'Switching models')"
            )
        moved = await self._repository.promote(model, limit=limit) if limit else 0
        if moved == limit and limit:
            return Promotion(model, moved=moved, left=None, promoted=promoted)
        row = await self._repository.finish_promotion(model)
        if row["swapped"]:
            self._known = {}
            promoted = True
        return Promotion(model, moved=moved, left=int(row["left"]), promoted=promoted)

    async def drop_generation(self, model: str) -> int:
        """Delete the shadow generation ``model`` and its vectors (:attr:`GenerationSql.drop`)."""
        row = await self._repository.drop(_check_model(model, "model"))
        self._known = {}
        if row["role"] is None:
            raise NotFoundError("the model is not a registered generation of this store")
        if row["role"] == "primary":
            raise ConflictError("the primary generation cannot be dropped")
        if row["active"]:
            raise ConflictError("the generation is the active one: switch to another first")
        if row["own"]:
            own = int(row["own"])
            raise ConflictError(
                f"{own} entries' own vectors are of the model (written by a writer of it after "
                "the promotion): run the promotion again, then drop"
            )
        return int(row["vectors"])


class VectorWidth:
    """The width of the entries' vectors: the pinned ``dimension``, else the width of the first
    vector stored (an unpinned table keeps one width), read once and remembered -- unless the
    store registered vector generations: then the width of the vectors' model's generation, or
    the primary's (:meth:`PostgresGenerations.width_of`), for a promotion may have changed the
    entries' own width. Shared by the entries, the ledger and governance."""

    __slots__ = ("dimension", "generations", "value")

    def __init__(
        self, dimension: int | None, generations: PostgresGenerations | None = None
    ) -> None:
        self.dimension = dimension
        self.generations = generations
        self.value = dimension

    async def known(self, entries: EntryRepository, model: str | None = None) -> int | None:
        """The width vectors of ``model`` must have, read through ``entries`` while it is not
        known yet."""
        if self.generations is not None:
            registered = await self.generations.width_of(model)
            if registered is not None:
                return registered
        if self.value is None:
            self.value = await entries.any_width()
        return self.value

    async def for_search(
        self, entries: EntryRepository, model: str | None
    ) -> tuple[int | None, str | None, bool]:
        """What a search of ``model`` reads: the width its query vector must have, the model it
        names, and whether it ranks each row's vector of that model (``by_model``: the store
        holds several generations, :meth:`PostgresGenerations.vectors_of`) or the entries' own
        vectors (then the width :meth:`known` gives)."""
        ranked = None if self.generations is None else await self.generations.vectors_of(model)
        if ranked is not None:
            return ranked.width, ranked.model, True
        return await self.known(entries, model), model, False

    def learn(self, width: int | None) -> None:
        """Remember the width of vectors just stored (the first ones of an unpinned table)."""
        if self.value is None and width is not None:
            self.value = width

    @staticmethod
    def check(
        vectors: Iterable[tuple[object, str]], width: int | None
    ) -> tuple[list[OwnVector], int | None]:
        """Every own vector (and its later windows, :class:`~prism_memory.windows.WindowedVector`)
        finite and of ``width`` (the first one's when ``None``), each named by its label in an
        error; the checked vectors and their width."""
        checked: list[OwnVector] = []
        for vector, label in vectors:
            main, windows = checked_own(vector, label, width)
            width = main.shape[0]
            checked.append(main if windows is None else WindowedVector(main, windows))
        return checked, width
