"""Fault injection: the connection dies between the steps of a governance call.

For every statement a governance call sends, a run replaces that statement with
``pg_terminate_backend(pg_backend_pid())``, so the server kills the session right there. Afterwards
the thread must be exactly as before the call or exactly as after an undisturbed run: never a
tombstone without its data change, or a data change without its tombstones.
"""

from __future__ import annotations

import uuid
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from sqlalchemy import event, text

from prism_memory import HashEmbedder, IndexingPolicy, Memory, PrismMemoryError, create_memory
from prism_memory.postgres import PostgresMemoryStores
from prism_memory.postgres._errors import wrap_db_errors

pytestmark = pytest.mark.postgres

NOW = datetime(2030, 1, 1, tzinfo=UTC)
KILL = "SELECT pg_terminate_backend(pg_backend_pid())"


class Killer:
    """Counts statements while armed and swaps the ``target``-th for a self-termination."""

    def __init__(self) -> None:
        self.armed = False
        self.count = 0
        self.target: int | None = None
        self.fired = False

    def arm(self, target: int | None) -> None:
        self.armed, self.count, self.target, self.fired = True, 0, target, False

    def __call__(
        self, conn: Any, cursor: Any, statement: str, parameters: Any, context: Any, many: bool
    ) -> tuple[str, Any]:
        if self.armed:
            self.count += 1
            if self.count == self.target:
                self.fired = True
                return KILL, ()
        return statement, parameters


def _memory(stores: PostgresMemoryStores, tenant: str, clock: Callable[[], datetime]) -> Memory:
    return create_memory(
        tenant_id=tenant,
        resource_id="r",
        thread_id="t",
        embedder=HashEmbedder(dimensions=32),
        vector_store=stores.vector_store,
        working_store=stores.working_store,
        clock=clock,
        indexing=IndexingPolicy(busy_poll_seconds=0.005),
    )


async def _snapshot(stores: PostgresMemoryStores, tenant: str) -> dict[str, Any]:
    """Everything governance decides for one thread, read with plain SQL."""
    names = stores.vector_store.tables.names
    entries = f'"{names.schema}"."{names.entries}"'
    stones = f'"{names.schema}"."{names.invalidation}"'
    async with stores.engine.connect() as conn:
        rows = await conn.execute(
            text(
                f"SELECT id, text, consent_visible, legal_hold, revision FROM {entries} "
                "WHERE tenant_id = :t ORDER BY id"
            ),
            {"t": tenant},
        )
        marks = await conn.execute(
            text(
                f"SELECT entry_id, cause_id, reason FROM {stones} "
                "WHERE tenant_id = :t ORDER BY 1, 2, 3"
            ),
            {"t": tenant},
        )
        return {"entries": [tuple(r) for r in rows], "tombstones": [tuple(r) for r in marks]}


Scenario = Callable[[Memory], Awaitable[Any]]

SCENARIOS: dict[str, Scenario] = {
    "correct": lambda m: m.correct("src", "Ada works at Initech"),
    "revoke": lambda m: m.set_consent("src", visible=False),
    "grant": lambda m: m.set_consent("gone", visible=True),
    "hold": lambda m: m.forget(ids=["src", "other"], hold=True),
    "forget": lambda m: m.forget(ids=["src"]),
    "retention": lambda m: m.apply_retention(max_age_days=1),
}


async def _prepare(stores: PostgresMemoryStores, tenant: str) -> None:
    memory = _memory(stores, tenant, lambda: NOW)
    old = NOW - timedelta(days=3)
    await memory.remember(
        [
            {"id": "src", "text": "Ada works at Acme", "occurred_at": old},
            {"id": "other", "text": "Ada likes tea"},
            {"id": "gone", "text": "Ada had a cat"},
            {"id": "sum", "text": "Ada summary", "lineage": {"source_ids": ["src"]}},
            {"id": "deep", "text": "Ada deep summary", "lineage": {"source_ids": ["sum"]}},
        ],
        wait=True,
    )
    await memory.set_consent("gone", visible=False)
    await memory.aclose()  # no indexing queue keeps running while statements are counted


@pytest.mark.parametrize("scenario", sorted(SCENARIOS))
async def test_a_killed_connection_leaves_all_or_nothing(make_postgres_stores, scenario):
    stores = await make_postgres_stores(dimension=32)
    killer = Killer()
    event.listen(stores.engine.sync_engine, "before_cursor_execute", killer, retval=True)
    later = NOW + timedelta(minutes=5)
    call = SCENARIOS[scenario]

    # an undisturbed run tells how many statements the call sends and what it leaves behind
    control = f"t-{uuid.uuid4().hex[:10]}"
    await _prepare(stores, control)
    before = await _snapshot(stores, control)
    killer.arm(None)
    await call(_memory(stores, control, lambda: later))
    killer.armed = False
    statements = killer.count
    after = await _snapshot(stores, control)
    assert after != before, "the call changed nothing; the scenario tests nothing"
    assert statements >= 3

    for target in range(1, statements + 1):
        tenant = f"t-{uuid.uuid4().hex[:10]}"
        await _prepare(stores, tenant)
        killer.arm(target)
        with pytest.raises(PrismMemoryError):
            await call(_memory(stores, tenant, lambda: later))
        killer.armed = False
        assert killer.fired
        state = await _snapshot(stores, tenant)
        assert state in (before, after), (
            f"a kill at statement {target} of {statements} left a partial change"
        )
        if state == before:  # the thread is still usable: the same call now completes
            await call(_memory(stores, tenant, lambda: later))
            assert await _snapshot(stores, tenant) == after


async def test_engines_keep_bound_values_out_of_logs_and_errors(make_postgres_stores):
    stores = await make_postgres_stores(dimension=32)
    assert stores.engine.sync_engine.hide_parameters
    secret = "sk-never-logged-0000"
    with pytest.raises(PrismMemoryError) as caught, wrap_db_errors("probe"):
        async with stores.engine.connect() as conn:
            await conn.execute(text("SELECT CAST(:v AS integer)"), {"v": secret})
    assert "probe failed" in str(caught.value)
    assert secret not in str(caught.value)
