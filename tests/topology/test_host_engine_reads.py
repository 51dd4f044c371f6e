"""A read that needs custom plans on a host's engine -- whose connections prism_memory did not
configure -- runs in a unit that asks for them, on the primary or the replica, returns its rows, and
is no write for read routing (``Executor.fetch``; issue 47's mutation run), on a real primary and
streaming standby (``tests/topology_fixtures.py``)."""

from __future__ import annotations

import uuid

import asyncpg
import pytest
from sqlalchemy.ext.asyncio import create_async_engine

from prism_memory.postgres._executor import Executor, ReadReplica
from tests.topology_fixtures import ReplicaPair

pytestmark = pytest.mark.postgres

PROBE = (
    "SELECT pg_is_in_recovery() AS standby, current_setting('plan_cache_mode') AS mode, "
    "CAST(:n AS int) AS n"
)


async def _write_elsewhere(pair: ReplicaPair) -> None:
    """A write on the primary by another client: WAL the paused replica has not replayed."""
    conn = await asyncpg.connect(pair.primary_dsn, timeout=10)
    try:
        name = f"probe_{uuid.uuid4().hex}"
        await conn.execute(f"CREATE TABLE {name} (n int); DROP TABLE {name}")
    finally:
        await conn.close()


async def test_a_custom_plans_read_on_a_host_engine(replica_pair: ReplicaPair) -> None:
    executor = Executor(
        create_async_engine(replica_pair.primary_url),  # a host's engine: no settings of ours
        owns_engine=True,
        sets_plans=False,
        replica=ReadReplica(create_async_engine(replica_pair.replica_url), wait_seconds=0.2),
        owns_replica_engine=True,
    )
    try:
        rows = await executor.fetch("probe", PROBE, {"n": 1}, custom_plans=True)
        assert [tuple(row.values()) for row in rows] == [(False, "force_custom_plan", 1)]
        rows = await executor.fetch("probe", PROBE, {"n": 2}, replica=True, custom_plans=True)
        assert [tuple(row.values()) for row in rows] == [(True, "force_custom_plan", 2)]
        # without custom plans the host's setting stays
        rows = await executor.fetch("probe", PROBE, {"n": 3}, replica=True)
        assert [(row["standby"], row["mode"]) for row in rows] == [(True, "auto")]

        await replica_pair.pause_replay()
        await _write_elsewhere(replica_pair)  # not this store's write: its reads need not wait
        await replica_pair.wait_received()
        await executor.fetch("probe", PROBE, {"n": 4}, custom_plans=True)  # a read, on the primary
        rows = await executor.fetch("probe", PROBE, {"n": 5}, replica=True, custom_plans=True)
        assert [row["standby"] for row in rows] == [True]  # still the replica: nothing to wait for
    finally:
        await replica_pair.resume_replay()
        await executor.close()
