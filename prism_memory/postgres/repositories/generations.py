"""Vector generations: the registry, a model's backfill claims and kept vectors, progress, the
switch, the promotion and the drop -- each one named statement of
:class:`~prism_memory.postgres.statements.GenerationSql`."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime, timedelta
from typing import Any

from ...models import Vector
from ...stores.base import ClaimedEntry, EntryKey, Generation
from .._engine import encode_vector
from .._executor import Executor, Unit
from ..rows import claimed_entries
from ..statements import GenerationSql
from ..tables import PrismTables
from ._base import _Repository

__all__ = ["GenerationRepository", "generation_from_row"]


def generation_from_row(row: Mapping[str, Any]) -> Generation:
    """A registry row as a :class:`Generation`."""
    return Generation(
        model=str(row["model"]),
        width=int(row["width"]),
        role="primary" if row["role"] == "primary" else "shadow",
        active=bool(row["active"]),
        started_at=row["started_at"],
        switched_at=row["switched_at"],
    )


class GenerationRepository(_Repository):
    """The vector generations of one table set (``<table>_generations``, ``<table>_vectors``)."""

    __slots__ = ("generations",)

    def __init__(self, on: Executor | Unit, tables: PrismTables) -> None:
        super().__init__(on, tables)
        self.generations = GenerationSql.for_tables(tables)

    async def registry(self) -> list[Generation]:
        """Every registered generation, the primary first."""
        rows = await self._rows("generations", self.generations.registry)
        return [generation_from_row(row) for row in rows]

    async def lock(self) -> None:
        """Serialise registrations until the caller's unit ends (readers are not blocked)."""
        await self._changed("start_generation", self.generations.lock_registry)

    async def register(
        self, model: str, width: int, role: str, *, active: bool, now: datetime
    ) -> None:
        """Register a generation unless its model is registered."""
        params = {"model": model, "width": width, "role": role, "active": active, "now": now}
        await self._changed("start_generation", self.generations.register, params)

    async def claim(
        self,
        model: str,
        *,
        limit: int,
        worker_id: str,
        lease_seconds: float,
        now: datetime,
        after: EntryKey | None,
    ) -> list[ClaimedEntry]:
        """Lease up to ``limit`` entries without a current vector of ``model``, in key order."""
        if limit == 0:
            return []
        params: dict[str, Any] = {
            "model": model,
            "limit": limit,
            "worker": worker_id,
            "now": now,
            "until": now + timedelta(seconds=lease_seconds),
        }
        if after is not None:
            params.update(
                after_tenant=after.tenant_id,
                after_resource=after.resource_id,
                after_thread=after.thread_id,
                after_id=after.id,
            )
        statement = self.generations.claim(after=after is not None)
        rows = await self._written("claim_generation", statement, params, visible=False)
        return sorted(
            claimed_entries(rows),
            key=lambda c: (c.scope.tenant_id, c.scope.resource_id, c.scope.thread_id, c.id),
        )

    async def store(self, model: str, items: Sequence[tuple[ClaimedEntry, Vector]]) -> int:
        """Store the items' vectors of ``model`` where the revision matches (one statement)."""
        if not items:
            return 0
        params = {
            "model": model,
            "tenants": [item.scope.tenant_id for item, _ in items],
            "resources": [item.scope.resource_id for item, _ in items],
            "threads": [item.scope.thread_id for item, _ in items],
            "ids": [item.id for item, _ in items],
            "revisions": [int(item.revision) for item, _ in items],
            "embeddings": [encode_vector(vector) for _, vector in items],
        }
        return await self._changed("store_generation_vectors", self.generations.store, params)

    async def progress(self, model: str, now: datetime) -> Any:
        """The row of :attr:`GenerationSql.progress`."""
        rows = await self._rows(
            "generation_progress", self.generations.progress, {"model": model, "now": now}
        )
        return rows[0]

    async def switch(
        self, model: str, *, force: bool, now: datetime, horizon: datetime | None
    ) -> Any:
        """The row of :attr:`GenerationSql.switch` (the flip, when it happened, committed);
        ``horizon``: entries written after it do not hold the flip back (``None``: all do)."""
        params = {"model": model, "force": force, "now": now, "horizon": horizon}
        (row,) = await self._written("switch_generation", self.generations.switch, params)
        return row

    async def promote(self, model: str, *, limit: int) -> int:
        """Swap up to ``limit`` entries' own vectors for their vectors of ``model``
        (:attr:`GenerationSql.promote`, one statement); how many moved."""
        params = {"model": model, "limit": limit}
        (row,) = await self._written("promote_generation", self.generations.promote, params)
        return int(row["moved"])

    async def finish_promotion(self, model: str) -> Any:
        """The row of :attr:`GenerationSql.finish_promotion` (the swap, when it happened,
        committed)."""
        params = {"model": model}
        (row,) = await self._written(
            "promote_generation", self.generations.finish_promotion, params
        )
        return row

    async def drop(self, model: str) -> Any:
        """The row of :attr:`GenerationSql.drop` (the delete, when it happened, committed)."""
        params = {"model": model}
        (row,) = await self._written("drop_generation", self.generations.drop, params)
        return row
