"""The typed ORM classes: mapped onto the Core tables, one set per names, round-tripping the stores' rows."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import numpy as np
import pytest
from sqlalchemy import inspect, select
from sqlalchemy.ext.asyncio import AsyncSession

from prism_memory.models import MemoryConsent, MemoryIdentity, ShareGrant
from prism_memory.postgres._executor import SessionUnit
from prism_memory.postgres.orm import (
    EntryRow,
    RagChunkRow,
    RagScopeGenerationRow,
    RagSourceAclRow,
    ShareGrantRow,
    TombstoneRow,
    WorkingMemoryRow,
)
from prism_memory.postgres.repositories import WorkingRepository
from prism_memory.postgres.tables import build_metadata
from prism_memory.rag import AccessConstraint, RagScope
from prism_memory.stores.base import GovernanceChange, NewEntry, Tombstone

NOW = datetime(2025, 1, 1, tzinfo=UTC)
SCOPE = MemoryIdentity(tenant_id="tenant-a", resource_id="user-1", thread_id="thread-1")

BASES = (
    EntryRow,
    TombstoneRow,
    ShareGrantRow,
    RagSourceAclRow,
    RagScopeGenerationRow,
    RagChunkRow,
    WorkingMemoryRow,
)


def _core_tables(tables):
    return (
        tables.entries,
        tables.invalidation,
        tables.share_grant,
        tables.rag_source_acl,
        tables.rag_scope_generations,
        tables.rag_chunks,
        tables.working,
    )


# ---- mapping (no database) ---------------------------------------------------------------------


@pytest.mark.parametrize("dimension", [None, 8])
def test_orm_classes_map_exactly_the_core_tables(dimension):
    tables = build_metadata("orm_schema", "mem", dimension)
    orm = tables.orm
    assert orm.registry.metadata is tables.metadata
    # the ORM added no table of its own (the vector generations' two tables have no class)
    assert len(tables.metadata.tables) == 9
    for cls, base, table in zip(orm.classes, BASES, _core_tables(tables), strict=True):
        assert issubclass(cls, base)
        assert cls is not base
        assert cls.__table__ is table
        mapper = inspect(cls)
        assert mapper.local_table is table
        assert mapper.persist_selectable is table
        assert tables.metadata.tables[table.fullname] is table
        # every column mapped under its own name, nothing else; the typed base names them all
        assert {prop.key for prop in mapper.column_attrs} == set(table.c.keys())
        assert all(mapper.column_attrs[column.key].columns[0] is column for column in table.c)
        assert set(base.__annotations__) == set(table.c.keys())
        assert tuple(mapper.primary_key) == tuple(table.primary_key.columns)
    assert build_metadata("orm_schema", "mem", dimension).orm is orm  # cached with the tables


def test_each_names_get_their_own_classes_on_their_own_tables():
    sets = [
        build_metadata("orm_a", "mem", None),
        build_metadata("orm_b", "mem", None),
        build_metadata("orm_a", "other", None),
        build_metadata("orm_a", "mem", 8),
    ]
    for index, tables in enumerate(sets):
        for later in sets[index + 1 :]:
            assert tables.orm.registry is not later.orm.registry
            for mine, theirs in zip(tables.orm.classes, later.orm.classes, strict=True):
                assert mine is not theirs
                assert mine.__table__ is not theirs.__table__
    fullnames = [tables.orm.ShareGrant.__table__.fullname for tables in sets[:3]]
    assert fullnames == [
        "orm_a.mem_share_grant",
        "orm_b.mem_share_grant",
        "orm_a.other_share_grant",
    ]
    a, b = sets[0].orm.ShareGrant, sets[1].orm.ShareGrant
    assert str(select(a).where(a.tenant_id == "t")).count("orm_a.mem_share_grant") >= 1
    assert "orm_a" not in str(select(b))


def test_constructor_and_repr():
    orm = build_metadata("orm_schema", "mem", None).orm
    row = orm.RagScopeGeneration(tenant_id="t", scope="docs", generation=3, updated_at=NOW)
    assert (row.tenant_id, row.scope, row.generation) == ("t", "docs", 3)
    assert (
        repr(row)
        == "<RagScopeGeneration orm_schema.mem_rag_scope_generations tenant_id='t', scope='docs'>"
    )
    with pytest.raises(TypeError, match="no column 'nope'"):
        orm.RagScopeGeneration(nope=1)
    with pytest.raises(TypeError, match="not mapped"):
        RagScopeGenerationRow(scope="docs")


# ---- against PostgreSQL ------------------------------------------------------------------------


@pytest.mark.postgres
async def test_orm_reads_what_the_stores_wrote(make_postgres_stores):
    stores = await make_postgres_stores(dimension=3)
    store = stores.vector_store
    orm = store.tables.orm
    consent = MemoryConsent(source="agent", scope="profile", visible=True, granted_at=NOW)
    new = NewEntry(
        id="e1",
        text="hello world",
        role="user",
        metadata={"k": [1, "two"]},
        consent=consent,
        sequence=None,
        occurred_at=NOW,
        importance=0.5,
        lineage=None,
    )
    (record,) = await store.put_entries(SCOPE, [new], now=NOW)
    claimed = await store.claim_pending(SCOPE, limit=10, worker_id="w", lease_seconds=60, now=NOW)
    vector = np.array([0.6, 0.8, 0.0], dtype=np.float32)
    assert await store.complete_indexing([(claimed[0], vector)], worker_id="w", now=NOW) == 1
    stone = Tombstone("gone", "cause", "forgotten", NOW)
    await store.apply_governance(SCOPE, GovernanceChange(tombstones=(stone,)), now=NOW)
    grant = ShareGrant(
        "tenant-a", "user-1", "parent", "child", ("a", "b"), NOW, NOW + timedelta(days=1)
    )
    await store.put_share_grant(grant)
    await stores.working_store.put_working(
        "tenant-a", "user-1", None, {"goal": "ship"}, expected_version=0, now=NOW
    )
    await stores.working_store.put_working(
        "tenant-a", "user-1", "thread-1", {"n": 1}, expected_version=None, now=NOW
    )

    async with AsyncSession(stores.engine) as session:
        entry = await session.get(orm.Entry, ("tenant-a", "user-1", "thread-1", "e1"))
        assert isinstance(entry, orm.Entry)
        assert (entry.text, entry.role, entry.sequence) == ("hello world", "user", record.sequence)
        assert entry.metadata == {"k": [1, "two"]}
        assert (entry.consent_explicit, entry.consent_source, entry.consent_scope) == (
            True,
            "agent",
            "profile",
        )
        assert (entry.status, entry.revision, entry.claimed_by) == ("indexed", 1, None)
        assert entry.embedding is not None
        assert entry.embedding.dtype == np.float32
        assert entry.embedding.tolist() == pytest.approx(vector.tolist())
        assert entry.text_tsv is not None
        assert "hello" in entry.text_tsv

        tombstones = (await session.scalars(select(orm.Tombstone))).all()
        assert [(t.entry_id, t.cause_id, t.reason, t.created_at) for t in tombstones] == [
            ("gone", "cause", "forgotten", NOW)
        ]

        row = await session.get(orm.ShareGrant, ("tenant-a", "user-1", "parent", "child"))
        assert isinstance(row, orm.ShareGrant)
        assert row.source_ids == ["a", "b"]
        assert (row.created_at, row.expires_at) == (grant.created_at, grant.expires_at)
        assert await session.get(orm.ShareGrant, ("tenant-b", "user-1", "parent", "child")) is None

        shared = await session.get(orm.WorkingMemory, ("tenant-a", "user-1", ""))
        assert shared is not None
        assert (shared.version, shared.data, shared.updated_at) == (1, {"goal": "ship"}, NOW)
        threaded = (
            await session.scalars(
                select(orm.WorkingMemory).where(orm.WorkingMemory.thread_key == "thread-1")
            )
        ).one()
        assert (threaded.version, threaded.data) == (1, {"n": 1})


@pytest.mark.postgres
async def test_stores_read_what_the_orm_wrote(make_postgres_stores):
    stores = await make_postgres_stores()
    orm = stores.vector_store.tables.orm
    async with AsyncSession(stores.engine) as session, session.begin():
        session.add_all(
            [
                orm.WorkingMemory(
                    tenant_id="t",
                    resource_id="r",
                    thread_key="",
                    version=4,
                    data={"from": "orm"},
                    updated_at=NOW,
                ),
                orm.ShareGrant(
                    tenant_id="t",
                    resource_id="r",
                    parent_thread_id="p",
                    child_thread_id="c",
                    source_ids=["x"],
                    created_at=NOW,
                    expires_at=None,
                ),
                orm.RagSourceAcl(
                    tenant_id="t",
                    scope=RagScope("t", "r").key,
                    source_id="doc",
                    principal_kind="group",
                    principal_id="staff",
                    access_version=1,
                    created_at=NOW,
                ),
                orm.RagScopeGeneration(tenant_id="t", scope="docs", generation=7, updated_at=NOW),
            ]
        )
        await session.flush()
    current = await stores.working_store.get_working("t", "r", None)
    assert current is not None
    assert (current.version, current.data) == (4, {"from": "orm"})
    after = await stores.working_store.put_working(
        "t", "r", None, {"from": "store"}, expected_version=4, now=NOW
    )
    assert after.version == 5
    assert await stores.vector_store.get_share_grant("t", "r", "p", "c") == ShareGrant(
        "t", "r", "p", "c", ("x",), NOW, None
    )
    async with AsyncSession(stores.engine) as session:
        acl = (await session.scalars(select(orm.RagSourceAcl))).one()
        assert (acl.principal_kind, acl.principal_id, acl.access_version) == ("group", "staff", 1)
    rag = stores.vector_store
    staff = AccessConstraint("ada", ("staff",), access_version=1)
    assert await rag.check_source_access(RagScope("t", "r"), "doc", staff)
    assert not await rag.check_source_access(RagScope("t", "r", "other"), "doc", staff)
    async with AsyncSession(stores.engine) as session:
        generation = await session.get(orm.RagScopeGeneration, ("t", "docs"))
        assert generation is not None
        assert generation.generation == 7


@pytest.mark.postgres
async def test_working_repository_flushes_never_commits_and_keeps_the_identity_map_fresh(
    make_postgres_stores,
):
    stores = await make_postgres_stores()
    tables = stores.working_store.tables
    async with AsyncSession(stores.engine) as session, session.begin():
        repo = WorkingRepository(SessionUnit(session), tables)
        first = await repo.put("t", "r", None, {"v": 1}, expected_version=0, now=NOW)
        assert first is not None
        assert first.version == 1
        loaded = await session.get(tables.orm.WorkingMemory, ("t", "r", ""))
        assert loaded is not None
        second = await repo.put("t", "r", None, {"v": 2}, expected_version=1, now=NOW)
        assert second is not None
        assert second.version == 2
        # the conditional UPDATE ... RETURNING refreshed the object the session already held
        assert (loaded.version, loaded.data) == (2, {"v": 2})
        assert await repo.put("t", "r", None, {"v": 3}, expected_version=1, now=NOW) is None
        assert await repo.put("t", "r", None, {"v": 3}, expected_version=0, now=NOW) is None
        assert await repo.version("t", "r", None) == 2
        await session.rollback()  # the caller owns the unit of work: nothing was committed
    assert await stores.working_store.get_working("t", "r", None) is None
