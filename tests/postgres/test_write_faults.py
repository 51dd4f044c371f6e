"""Fault injection on the write path: the connection dies at each statement of ``put_entries``.

``put_entries`` runs straight on the asyncpg driver (BEGIN with the thread's advisory lock, one
insert statement, COMMIT), so the statements are counted on the driver: while armed, the ``target``-th
``execute``/``fetch`` is swapped for ``pg_terminate_backend(pg_backend_pid())``. Afterwards the
thread must hold exactly what it held before or exactly what an undisturbed write leaves: every
new row with its vector and the reused id's tombstone gone, or none of it.
"""

from __future__ import annotations

import asyncio
import uuid
from datetime import UTC, datetime
from typing import Any

import asyncpg
import numpy as np
import pytest
from sqlalchemy import text

from prism_memory import PrismMemoryError
from prism_memory.models import MemoryIdentity
from prism_memory.postgres import PostgresMemoryStores
from prism_memory.postgres import _generations as postgres_generations
from prism_memory.stores.base import GovernanceChange, NewEntry, Tombstone

pytestmark = pytest.mark.postgres

NOW = datetime(2030, 1, 1, tzinfo=UTC)
KILL = "SELECT pg_terminate_backend(pg_backend_pid())"


class DriverKiller:
    """Counts the driver's ``execute``/``fetch`` calls while armed; the ``target``-th one kills
    the session instead."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.armed = False
        self.count = 0
        self.target: int | None = None
        self.fired = False
        for name in ("execute", "fetch"):
            original = getattr(asyncpg.Connection, name)
            monkeypatch.setattr(asyncpg.Connection, name, self._wrap(original))

    def arm(self, target: int | None) -> None:
        self.armed, self.count, self.target, self.fired = True, 0, target, False
        # only the arming task's calls count: another test's indexing queue still winding down
        # on the session loop must not be the one killed
        self.owner = asyncio.current_task()

    def _wrap(self, original: Any) -> Any:
        async def call(conn: Any, query: str, *args: Any, **kwargs: Any) -> Any:
            if self.armed and asyncio.current_task() is self.owner:
                self.count += 1
                if self.count == self.target:
                    self.fired = True
                    return await original(conn, KILL)
            return await original(conn, query, *args, **kwargs)

        return call


def _entry(entry_id: str, sequence: int | None = None) -> NewEntry:
    return NewEntry(
        id=entry_id,
        text=f"note {entry_id}",
        role="user",
        metadata={"n": entry_id},
        consent=None,
        sequence=sequence,
        occurred_at=NOW,
        importance=1.0,
        lineage=None,
    )


async def _snapshot(stores: PostgresMemoryStores, tenant: str) -> dict[str, Any]:
    names = stores.vector_store.tables.names
    entries = f'"{names.schema}"."{names.entries}"'
    stones = f'"{names.schema}"."{names.invalidation}"'
    async with stores.engine.connect() as conn:
        rows = await conn.execute(
            text(
                f"SELECT id, status, sequence, embedding IS NOT NULL, text FROM {entries} "
                "WHERE tenant_id = :t ORDER BY id"
            ),
            {"t": tenant},
        )
        marks = await conn.execute(
            text(f"SELECT entry_id, cause_id FROM {stones} WHERE tenant_id = :t ORDER BY 1, 2"),
            {"t": tenant},
        )
        return {"entries": [tuple(r) for r in rows], "tombstones": [tuple(r) for r in marks]}


async def test_a_killed_connection_leaves_a_write_whole_or_absent(
    make_postgres_stores, monkeypatch
):
    stores = await make_postgres_stores(dimension=8)
    store = stores.vector_store
    # a write of a model reads the vector generations' registry first, at most every
    # _MISS_SECONDS: read it now and keep it, so every write below runs the same statements
    monkeypatch.setattr(postgres_generations, "_MISS_SECONDS", 3600.0)
    assert await store.vector_generations.width_of("m") is None
    killer = DriverKiller(monkeypatch)
    rng = np.random.default_rng(8)
    vectors = [rng.standard_normal(8).astype(np.float32) for _ in range(4)]

    async def prepare(scope: MemoryIdentity) -> None:
        # "old" exists; "reused" was forgotten and left a tombstone that a new entry clears
        await store.put_entries(scope, [_entry("old")], now=NOW)
        stone = Tombstone(entry_id="reused", cause_id="reused", reason="forgotten", created_at=NOW)
        await store.apply_governance(scope, GovernanceChange(tombstones=(stone,)), now=NOW)

    async def write(scope: MemoryIdentity) -> None:
        batch = [_entry("old"), _entry("reused"), _entry("new", sequence=5), _entry("auto")]
        await store.put_entries(scope, batch, now=NOW, vectors=vectors, model="m")

    control = MemoryIdentity(tenant_id=f"t-{uuid.uuid4().hex[:10]}", resource_id="r", thread_id="t")
    await prepare(control)
    before = await _snapshot(stores, control.tenant_id)
    killer.arm(None)
    await write(control)
    killer.armed = False
    statements = killer.count
    after = await _snapshot(stores, control.tenant_id)
    assert after["tombstones"] == []
    assert len(after["entries"]) == 4
    assert statements >= 3

    for target in range(1, statements + 1):
        scope = MemoryIdentity(
            tenant_id=f"t-{uuid.uuid4().hex[:10]}", resource_id="r", thread_id="t"
        )
        await prepare(scope)
        killer.arm(target)
        try:
            await write(scope)
        except PrismMemoryError:
            raised = True
        else:
            raised = False
        killer.armed = False
        assert killer.fired
        state = await _snapshot(stores, scope.tenant_id)
        assert state in (before, after), f"a kill at statement {target} of {statements} left a part"
        # a kill at the ROLLBACK of the first attempt (a batch of stored and new ids is written
        # again exactly, in a new transaction) leaves nothing, and the second attempt -- on a
        # fresh connection -- writes the whole batch; any other kill reaches the caller
        assert raised or state == after, f"a kill at statement {target} was lost"
        if state == before:  # the same write now completes
            await write(scope)
            assert await _snapshot(stores, scope.tenant_id) == after
