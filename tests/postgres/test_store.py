"""PostgreSQL-only behaviour of the vector and working stores."""

from __future__ import annotations

import asyncio
import gc
import threading
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

import asyncpg
import numpy as np
import pytest
from pgvector import Vector as PgVector
from sqlalchemy import text
from sqlalchemy.engine import make_url
from sqlalchemy.ext.asyncio import AsyncEngine
from sqlalchemy.pool import AsyncAdaptedQueuePool

from prism_memory.errors import (
    ConfigurationError,
    ConflictError,
    DimensionMismatchError,
    InvalidVectorError,
    NotFoundError,
    StoreClosedError,
    ValidationError,
)
from prism_memory.models import Lineage, MemoryConsent, MemoryIdentity, ShareGrant
from prism_memory.postgres import (
    _engine,
    create_postgres_memory_stores,
    create_postgres_vector_store,
)
from prism_memory.postgres._codec import decode_vectors
from prism_memory.postgres._engine import create_engine, decode_vector, encode_vector, normalize_url
from prism_memory.stores.base import (
    GovernanceChange,
    GovernanceResult,
    NewEntry,
    RecallFilter,
    SearchRequest,
    SharedSource,
    Tombstone,
)

pytestmark = pytest.mark.postgres

NOW = datetime(2025, 1, 1, tzinfo=UTC)
SCOPE = MemoryIdentity(tenant_id="tenant-a", resource_id="user-1", thread_id="thread-1")


def entry(
    entry_id: str,
    body: str | None = None,
    *,
    sequence: int | None = None,
    consent: MemoryConsent | None = None,
    lineage: Lineage | None = None,
    occurred_at: datetime = NOW,
    metadata: dict[str, object] | None = None,
) -> NewEntry:
    return NewEntry(
        id=entry_id,
        text=body or f"text of {entry_id}",
        role="user",
        metadata=metadata or {},
        consent=consent,
        sequence=sequence,
        occurred_at=occurred_at,
        importance=1.0,
        lineage=lineage,
    )


def unit(rng: np.random.Generator, width: int) -> np.ndarray:
    vector = rng.standard_normal(width).astype(np.float32)
    return vector / np.linalg.norm(vector)


async def govern(
    store, scope: MemoryIdentity, *, now: datetime = NOW, **change: Any
) -> GovernanceResult:
    """One governance write, the store's only one (what the facade's calls come down to)."""
    return await store.apply_governance(scope, GovernanceChange(**change), now=now)


async def tombstones_of(store, scope: MemoryIdentity) -> list[tuple[str, str, str]]:
    """``(entry_id, cause_id, reason)`` of the thread's stored tombstones, sorted."""
    names = store.tables.names
    async with store.engine.connect() as conn:
        rows = await conn.execute(
            text(
                f'SELECT entry_id, cause_id, reason FROM "{names.schema}"."{names.invalidation}" '
                "WHERE tenant_id = :t AND resource_id = :r AND thread_id = :th ORDER BY 1, 2, 3"
            ),
            {"t": scope.tenant_id, "r": scope.resource_id, "th": scope.thread_id},
        )
        return [tuple(row) for row in rows]


async def index_all(store, scope: MemoryIdentity, vectors: dict[str, np.ndarray]) -> None:
    claimed = await store.claim_pending(scope, limit=1000, worker_id="w", lease_seconds=60, now=NOW)
    done = await store.complete_indexing(
        [(item, vectors[item.id]) for item in claimed], worker_id="w", now=NOW
    )
    assert done == len(claimed)


# ---- entries -------------------------------------------------------------------------------------


async def test_put_entries_upsert_rules(make_postgres_stores):
    store = (await make_postgres_stores(dimension=3)).vector_store
    first = await store.put_entries(
        SCOPE, [entry("a"), entry("b"), entry("c", sequence=10)], now=NOW
    )
    assert [r.sequence for r in first] == [0, 1, 10]
    assert all(r.status == "pending" and r.revision == 1 for r in first)
    later = NOW + timedelta(minutes=1)
    (appended,) = await store.put_entries(SCOPE, [entry("d")], now=later)
    assert appended.sequence == 11

    # identical: nothing changes (not even written_at)
    (same,) = await store.put_entries(SCOPE, [entry("a")], now=later)
    assert same == first[0]

    await index_all(store, SCOPE, {i: np.ones(3, np.float32) for i in "abcd"})
    await govern(store, SCOPE, consent=("a", MemoryConsent(visible=False)), now=later)
    (hidden,) = await store.get_entries(SCOPE, ["a"])
    # a changed re-put changes nothing either: consent, text, time, lineage all stay
    (replayed,) = await store.put_entries(
        SCOPE,
        [
            entry(
                "a",
                "new text",
                metadata={"k": 1},
                consent=MemoryConsent(visible=True),
                lineage=Lineage(source_ids=("c",)),
            )
        ],
        now=later + timedelta(minutes=1),
    )
    assert replayed == hidden
    assert (replayed.text, replayed.revision, replayed.status) == (hidden.text, 1, "indexed")
    (stored,) = await store.get_entries(SCOPE, ["a"])
    assert stored == hidden


async def test_records_round_trip(make_postgres_stores):
    store = (await make_postgres_stores()).vector_store
    consent = MemoryConsent(source="agent", scope="profile", visible=True, granted_at=NOW)
    new = entry(
        "x",
        consent=consent,
        lineage=Lineage(source_ids=("p", "q"), reason="summary"),
        metadata={"nested": {"list": [1, 2.5, "s"]}},
    )
    await store.put_entries(SCOPE, [entry("p"), entry("q")], now=NOW)  # lineage names entries
    (written,) = await store.put_entries(SCOPE, [new], now=NOW)
    (read,) = await store.get_entries(SCOPE, ["x", "missing"])
    assert read == written
    assert read.consent == consent
    assert read.lineage == Lineage(source_ids=("p", "q"), reason="summary")
    assert read.metadata == {"nested": {"list": [1, 2.5, "s"]}}
    assert await store.dependents(SCOPE, ["q"], limit=10) == [("x", ("p", "q"))]
    assert await store.known_ids(SCOPE, ["x", "nope"]) == {"x"}
    with pytest.raises(NotFoundError):
        await govern(store, SCOPE, consent=("nope", consent))


async def test_concurrent_writers_get_distinct_sequences(make_postgres_stores, postgres_url):
    stores = await make_postgres_stores()
    schema = stores.vector_store.tables.names.schema
    others = [
        await create_postgres_vector_store(
            engine=create_engine(postgres_url, pooled=False), schema=schema, skip_migrations=True
        )
        for _ in range(4)
    ]
    await asyncio.gather(
        *(
            store.put_entries(SCOPE, [entry(f"{n}-{i}") for i in range(5)], now=NOW)
            for n, store in enumerate(others)
        )
    )
    records = await stores.vector_store.list_by_thread(SCOPE, after=None, limit=100)
    assert sorted(r.sequence for r in records) == list(range(20))


# ---- recall --------------------------------------------------------------------------------------


async def test_search_equals_exact_scan_with_every_exclusion(make_postgres_stores):
    rng = np.random.default_rng(7)
    store = (await make_postgres_stores(dimension=16)).vector_store
    ids = [f"e{i:03d}" for i in range(120)]
    vectors = {i: unit(rng, 16) for i in ids}
    explicit = MemoryConsent()
    entries = [
        entry(i, consent=explicit if n % 2 else None, occurred_at=NOW - timedelta(days=n % 10))
        for n, i in enumerate(ids)
        if i != "e005"
    ]
    entries.append(entry("derived", lineage=Lineage(source_ids=("e000",))))
    entries.append(entry("fixed", lineage=Lineage(source_ids=("e001",))))
    vectors["derived"] = vectors["fixed"] = unit(rng, 16)
    await store.put_entries(SCOPE, entries, now=NOW)
    await index_all(store, SCOPE, vectors)
    # exclusions: invisible, revoked, held, pending, invalidated
    await govern(store, SCOPE, consent=("e002", MemoryConsent(visible=False)))
    await govern(store, SCOPE, consent=("e003", MemoryConsent(revoked_at=NOW)))
    await govern(store, SCOPE, hold=("e004",))
    await store.put_entries(SCOPE, [entry("e005", "written after indexing: pending")], now=NOW)
    await govern(store, SCOPE, tombstones=(Tombstone("e000", "e000", "forgotten", NOW),))
    # a correction older than "fixed" does not invalidate it
    await govern(
        store,
        SCOPE,
        tombstones=(Tombstone("e001", "e001", "corrected", NOW - timedelta(seconds=1)),),
    )
    # noise in other scopes that must never come back
    other_thread = SCOPE.model_copy(update={"thread_id": "thread-2"})
    other_tenant = SCOPE.model_copy(update={"tenant_id": "tenant-b"})
    for scope in (other_thread, other_tenant):
        await store.put_entries(scope, [entry(i) for i in ids[:30]], now=NOW)
        await index_all(store, scope, vectors)

    # a tombstone on e000 invalidates e000 itself and what derives from it ("derived")
    excluded = {"e000", "e002", "e003", "e004", "e005", "derived"}
    for require_consent in (False, True):
        for occurred_after in (None, NOW - timedelta(days=4)):
            flt = RecallFilter(
                now=NOW, require_consent=require_consent, occurred_after=occurred_after
            )
            records = {r.id: r for r in await store.list_by_thread(SCOPE, after=None, limit=1000)}
            pool = [
                i
                for i in vectors
                if i not in excluded
                and (not require_consent or records[i].consent is not None)
                and (occurred_after is None or records[i].occurred_at >= occurred_after)
            ]
            for _ in range(5):
                query = unit(rng, 16)
                expected = sorted(
                    pool, key=lambda i: (-float(vectors[i] @ query), records[i].sequence, i)
                )
                found = (
                    await store.search(
                        SCOPE, SearchRequest(vector=query, terms=frozenset(), limit=10, filter=flt)
                    )
                ).candidates
                assert found
                assert all(
                    c.record.thread_id == SCOPE.thread_id and c.record.tenant_id == SCOPE.tenant_id
                    for c in found
                )
                assert {c.record.id for c in found} == set(expected[:10])
                for candidate in found:
                    assert candidate.vector.dtype == np.float32
                    np.testing.assert_allclose(candidate.vector, vectors[candidate.record.id])


async def test_lexical_leg_and_shared_parent_entries(make_postgres_stores):
    store = (await make_postgres_stores(dimension=4)).vector_store
    parent = SCOPE.model_copy(update={"thread_id": "parent"})
    await store.put_entries(
        SCOPE,
        [entry("cat", "The cat sat"), entry("dog", "a dog barked"), entry("both", "cat and dog")],
        now=NOW,
    )
    await store.put_entries(
        parent, [entry("p1", "parent cat fact"), entry("p2", "parent secret")], now=NOW
    )
    far = np.array([1, 0, 0, 0], np.float32)
    await index_all(store, SCOPE, dict.fromkeys(["cat", "dog", "both"], far))
    await index_all(store, parent, dict.fromkeys(["p1", "p2"], far))
    query = np.array([0, 1, 0, 0], np.float32)
    flt = RecallFilter(now=NOW)

    found = (
        await store.search(
            SCOPE, SearchRequest(vector=query, terms=frozenset({"cat", "dog"}), limit=1, filter=flt)
        )
    ).candidates
    # nearest 1 (all tie: lowest sequence) + best lexical 1 (both terms: the highest BM25)
    assert {c.record.id for c in found} == {"cat", "both"}
    found = (
        await store.search(
            SCOPE,
            SearchRequest(
                vector=query,
                terms=frozenset({"fact", "it's", "back\\slash"}),  # odd terms match nothing
                limit=5,
                filter=flt,
                shared=SharedSource(thread_id="parent", ids=("p1",)),
            ),
        )
    ).candidates
    assert {(c.record.thread_id, c.record.id) for c in found} == {
        ("thread-1", "cat"),
        ("thread-1", "dog"),
        ("thread-1", "both"),
        ("parent", "p1"),
    }


async def test_neighbors_and_listing(make_postgres_stores):
    store = (await make_postgres_stores(dimension=2)).vector_store
    await store.put_entries(SCOPE, [entry(f"n{i}") for i in range(10)], now=NOW)
    await index_all(store, SCOPE, {f"n{i}": np.ones(2, np.float32) for i in range(10)})
    await govern(store, SCOPE, consent=("n3", MemoryConsent(visible=False)))
    found = await store.neighbors(SCOPE, [(2, 4), (8, 20)], RecallFilter(now=NOW))
    assert [r.id for r in found] == ["n2", "n4", "n8", "n9"]
    page = await store.list_by_thread(SCOPE, after=(4, "n4"), limit=3)
    assert [r.id for r in page] == ["n5", "n6", "n7"]
    assert await store.count_by_thread(SCOPE) == 10
    with pytest.raises(ValidationError):
        await store.list_by_thread(SCOPE, after=None, limit=-1)


# ---- isolation -----------------------------------------------------------------------------------


async def test_no_query_path_crosses_tenant_or_thread(make_postgres_stores):
    store = (await make_postgres_stores(dimension=2)).vector_store
    mine = SCOPE
    scopes = [
        mine.model_copy(update={"tenant_id": "tenant-b"}),
        mine.model_copy(update={"resource_id": "user-2"}),
        mine.model_copy(update={"thread_id": "thread-2"}),
    ]
    vector = np.ones(2, np.float32)
    for scope in scopes:
        await store.put_entries(scope, [entry("shared-id", "secret words")], now=NOW)
        await index_all(store, scope, {"shared-id": vector})
        await govern(store, scope, tombstones=(Tombstone("ghost", "ghost", "forgotten", NOW),))
    flt = RecallFilter(now=NOW)
    request = SearchRequest(vector=vector, terms=frozenset({"secret"}), limit=10, filter=flt)
    assert (await store.search(mine, request)).candidates == []
    # a share "from" another tenant's thread id does not cross tenants
    cross = SearchRequest(
        vector=vector,
        terms=frozenset({"secret"}),
        limit=10,
        filter=flt,
        shared=SharedSource(thread_id="thread-2", ids=("shared-id",)),
    )
    other_tenant = scopes[0].model_copy(update={"thread_id": "thread-9"})
    assert (
        await store.search(mine.model_copy(update={"tenant_id": "tenant-c"}), cross)
    ).candidates == []
    assert len((await store.search(other_tenant, cross)).candidates) == 0
    assert await store.get_entries(mine, ["shared-id"]) == []
    assert await store.known_ids(mine, ["shared-id", "ghost"]) == set()
    assert await store.list_by_thread(mine, after=None, limit=10) == []
    assert await store.list_oldest(mine, limit=10) == []
    assert await store.neighbors(mine, [(0, 100)], flt) == []
    assert await store.count_by_thread(mine) == 0
    assert await store.dependents(mine, ["shared-id"], limit=5) == []
    assert await store.index_status(mine, ["shared-id"]) == {}
    assert (await govern(store, mine, hold=("shared-id",))).held == 0
    assert (await govern(store, mine, delete=("shared-id",))).deleted == 0
    await govern(store, mine, untombstone=("ghost", "forgotten"))  # removes none of theirs
    assert await store.requeue_failed(mine) == 0
    assert await store.claim_pending(mine, limit=10, worker_id="w", lease_seconds=5, now=NOW) == []
    assert await store.store_vectors(mine, [("shared-id", 1, vector)], now=NOW) == 0
    with pytest.raises(NotFoundError):
        await govern(store, mine, text=("shared-id", "hijack", vector))
    for scope in scopes:
        (record,) = await store.get_entries(scope, ["shared-id"])
        assert (record.text, record.legal_hold, record.revision) == ("secret words", False, 1)
        assert await tombstones_of(store, scope) == [("ghost", "ghost", "forgotten")]


# ---- dimension pinning and identifiers -----------------------------------------------------------


async def _schema_exists(url: str, schema: str) -> bool:
    engine = create_engine(url, pooled=False)
    try:
        async with engine.connect() as conn:
            found = await conn.execute(
                text("SELECT count(*) FROM pg_namespace WHERE nspname = :s"), {"s": schema}
            )
            return bool(found.scalar_one())
    finally:
        await engine.dispose()


async def test_dimension_drift_fails_closed_and_changes_nothing(make_postgres_stores):
    pinned = await make_postgres_stores(dimension=4)
    schema = pinned.vector_store.tables.names.schema
    assert pinned.vector_store.dimension == 4
    with pytest.raises(DimensionMismatchError):
        await make_postgres_stores(schema=schema, dimension=8)
    # dimension=None adopts the table's pin
    adopted = await make_postgres_stores(schema=schema, dimension=None)
    assert adopted.vector_store.dimension == 4
    # a vector of another width never reaches SQL
    await pinned.vector_store.put_entries(SCOPE, [entry("a")], now=NOW)
    (claimed,) = await pinned.vector_store.claim_pending(
        SCOPE, limit=1, worker_id="w", lease_seconds=5, now=NOW
    )
    with pytest.raises(DimensionMismatchError):
        await pinned.vector_store.complete_indexing(
            [(claimed, np.ones(8, np.float32))], worker_id="w", now=NOW
        )
    with pytest.raises(InvalidVectorError):
        await pinned.vector_store.complete_indexing(
            [(claimed, np.array([1, np.nan, 0, 0], np.float32))], worker_id="w", now=NOW
        )
    with pytest.raises(DimensionMismatchError):
        await pinned.vector_store.search(
            SCOPE,
            SearchRequest(
                vector=np.ones(3, np.float32), terms=frozenset(), limit=1, filter=RecallFilter(NOW)
            ),
        )
    engine = pinned.engine
    async with engine.connect() as conn:
        typmod = await conn.execute(
            text(
                "SELECT format_type(atttypid, atttypmod) FROM pg_attribute "
                "WHERE attrelid = to_regclass(:rel) AND attname = 'embedding'"
            ),
            {"rel": f'"{schema}".semantic_memory'},
        )
        assert typmod.scalar_one() == "vector(4)"
        hnsw = await conn.execute(
            text(
                "SELECT tablename FROM pg_indexes WHERE schemaname = :s AND indexdef LIKE '%hnsw%' "
                "ORDER BY tablename"
            ),
            {"s": schema},
        )
        # one graph, the RAG chunks' (memory recall is exact per scope: no graph on the entries)
        assert list(hnsw.scalars()) == ["semantic_memory_rag_chunks"]


async def test_unpinned_table_refuses_a_requested_pin(make_postgres_stores):
    unpinned = await make_postgres_stores(dimension=None)
    schema = unpinned.vector_store.tables.names.schema
    assert unpinned.vector_store.dimension is None
    with pytest.raises(DimensionMismatchError):
        await make_postgres_stores(schema=schema, dimension=4)
    # unpinned still keeps one width per table
    store = unpinned.vector_store
    await store.put_entries(SCOPE, [entry("a"), entry("b")], now=NOW)
    claimed = await store.claim_pending(SCOPE, limit=2, worker_id="w", lease_seconds=5, now=NOW)
    assert (
        await store.complete_indexing(
            [(claimed[0], np.ones(3, np.float32))], worker_id="w", now=NOW
        )
        == 1
    )
    with pytest.raises(DimensionMismatchError):
        await store.complete_indexing(
            [(claimed[1], np.ones(5, np.float32))], worker_id="w", now=NOW
        )


@pytest.mark.parametrize(
    ("schema", "table"),
    [
        ("x; drop table y", "semantic_memory"),
        ('x"', "semantic_memory"),
        ("Prism", "semantic_memory"),
        ("prism_memory", "t; drop schema public cascade"),
        ("prism_memory", "a" * 60),
        ("", "semantic_memory"),
    ],
)
async def test_bad_identifiers_raise_before_touching_the_database(postgres_url, schema, table):
    before = await _schema_exists(postgres_url, "x")
    with pytest.raises(ConfigurationError):
        await create_postgres_memory_stores(postgres_url, schema=schema, table=table)
    with pytest.raises(ConfigurationError):
        await create_postgres_vector_store(postgres_url, schema=schema, table=table, dimension=4)
    assert await _schema_exists(postgres_url, "x") == before
    assert not await _schema_exists(postgres_url, schema)


async def test_bad_dimension_and_arguments(postgres_url):
    for bad in (0, -1, True, 2.5, "384"):
        with pytest.raises(ConfigurationError):
            await create_postgres_memory_stores(postgres_url, dimension=bad)  # type: ignore[arg-type]
    with pytest.raises(ConfigurationError):
        await create_postgres_memory_stores()
    with pytest.raises(ConfigurationError):
        await create_postgres_memory_stores("mysql://localhost/db")


async def test_skip_migrations_requires_a_migrated_schema(postgres_url):
    schema = f"pm_test_{uuid.uuid4().hex[:12]}"
    with pytest.raises(ConfigurationError):
        await create_postgres_memory_stores(postgres_url, schema=schema, skip_migrations=True)
    assert not await _schema_exists(postgres_url, schema)


async def test_url_owned_engine_is_disposed_and_host_engine_is_not(postgres_url):
    schema = f"pm_test_{uuid.uuid4().hex[:12]}"
    libpq = postgres_url.replace("postgresql+asyncpg://", "postgresql://", 1)
    stores = await create_postgres_memory_stores(libpq, schema=schema, dimension=3)
    assert stores.owns_engine
    await stores.working_store.put_working("t", "r", None, {"a": 1}, expected_version=None, now=NOW)
    await stores.close()
    host = create_engine(postgres_url, pooled=False)
    try:
        again = await create_postgres_memory_stores(engine=host, schema=schema)
        assert not again.owns_engine
        assert again.vector_store.dimension == 3
        await again.close()
        async with host.begin() as conn:  # the host's engine still works
            await conn.execute(text(f'DROP SCHEMA "{schema}" CASCADE'))
    finally:
        await host.dispose()


def test_url_normalisation():
    assert normalize_url("postgresql://u:p@h:5/db") == "postgresql+asyncpg://u:p@h:5/db"
    assert normalize_url("postgres://u@h/db").startswith("postgresql+asyncpg://u@h/db")
    socket = normalize_url("postgresql://postgres:@/postgres?host=/tmp/x")
    assert socket.startswith("postgresql+asyncpg://postgres:@/postgres?host=")
    with pytest.raises(ConfigurationError):
        normalize_url("sqlite:///x.db")


# ---- binary codec ----------------------------------------------------------------------------------


def test_codec_speaks_pgvectors_binary_format():
    vector = np.array([0.5, -1.25, 3.0], np.float32)
    assert encode_vector(vector) == PgVector(vector).to_binary()
    decoded = decode_vector(PgVector([1.0, 2.0]).to_binary())
    assert decoded.dtype == np.float32
    assert decoded.tolist() == [1.0, 2.0]


def test_a_batch_of_sent_vectors_decodes_like_each_one():
    """Recall decodes its candidates' ``vector_send`` bytes in one numpy call; vectors of another
    width (never in one table, but not assumed) fall back to one decode each."""
    rng = np.random.default_rng(4)
    same = [PgVector(rng.standard_normal(5).astype(np.float32)).to_binary() for _ in range(4)]
    mixed = [*same, PgVector([1.0, -2.0]).to_binary()]
    for sent in (same, mixed):
        batch = decode_vectors(sent)
        assert [v.dtype for v in batch] == [np.float32] * len(sent)
        assert [v.tolist() for v in batch] == [decode_vector(data).tolist() for data in sent]
    assert list(decode_vectors([])) == []


async def test_vectors_travel_in_binary(make_postgres_stores):
    stores = await make_postgres_stores(dimension=3)
    async with stores.engine.connect() as conn:
        raw = await conn.get_raw_connection()
        driver = raw.driver_connection
        assert driver is not None
        oid = await driver.fetchval("SELECT 'vector'::regtype::oid")
        settings = driver._protocol.get_settings()  # asyncpg's codec registry
        binary, textual = 1, 0  # asyncpg's PG_FORMAT_BINARY / PG_FORMAT_TEXT
        assert settings.get_data_codec(oid, binary) is not None
        assert settings.get_data_codec(oid, textual) is None
        result = await conn.execute(
            text("SELECT CAST(:v AS vector) AS v"), {"v": np.array([1, 2, 3], np.float32)}
        )
        value = result.scalar_one()
        assert isinstance(value, np.ndarray)
        assert value.dtype == np.float32
        assert value.tolist() == [1.0, 2.0, 3.0]


# ---- indexing ledger -------------------------------------------------------------------------------


async def test_two_workers_never_claim_the_same_row(make_postgres_stores, postgres_url):
    stores = await make_postgres_stores(dimension=2)
    schema = stores.vector_store.tables.names.schema
    scopes = [SCOPE.model_copy(update={"thread_id": f"t{i}"}) for i in range(4)]
    for scope in scopes:
        await stores.vector_store.put_entries(scope, [entry(f"e{i}") for i in range(50)], now=NOW)
    workers = [
        await create_postgres_vector_store(
            engine=create_engine(postgres_url, pooled=False), schema=schema, skip_migrations=True
        )
        for _ in range(2)
    ]
    claimed: dict[str, list[tuple[str, str]]] = {"w0": [], "w1": []}

    async def drain(name: str, store) -> None:
        while True:
            batch = await store.claim_pending(
                None, limit=7, worker_id=name, lease_seconds=60, now=NOW
            )
            if not batch:
                return
            claimed[name].extend((item.scope.thread_id, item.id) for item in batch)
            await asyncio.sleep(0)

    await asyncio.gather(*(drain(f"w{n}", store) for n, store in enumerate(workers)))
    everything = claimed["w0"] + claimed["w1"]
    assert len(everything) == len(set(everything)) == 200
    assert claimed["w0"]
    assert claimed["w1"]


async def test_leases_failures_backoff_and_requeue(make_postgres_stores):
    store = (await make_postgres_stores(dimension=2)).vector_store
    await store.put_entries(SCOPE, [entry("a"), entry("b")], now=NOW)
    (a, b) = await store.claim_pending(SCOPE, limit=5, worker_id="w1", lease_seconds=10, now=NOW)
    # leased rows are not claimable by others until the lease runs out
    assert (
        await store.claim_pending(SCOPE, limit=5, worker_id="w2", lease_seconds=10, now=NOW) == []
    )
    later = NOW + timedelta(seconds=11)
    stolen = await store.claim_pending(SCOPE, limit=5, worker_id="w2", lease_seconds=10, now=later)
    assert [c.id for c in stolen] == ["a", "b"]
    # w1's late result no longer applies
    assert (
        await store.complete_indexing([(a, np.ones(2, np.float32))], worker_id="w1", now=later) == 0
    )
    # failure with retry: attempts recorded, due again only at retry_at
    retry_at = later + timedelta(seconds=30)
    await store.fail_indexing(stolen[0], worker_id="w2", error="boom", retry_at=retry_at, now=later)
    assert await store.index_status(SCOPE, ["a"]) == {"a": ("pending", "boom")}
    assert (
        await store.claim_pending(SCOPE, limit=5, worker_id="w3", lease_seconds=5, now=later) == []
    )
    (again,) = await store.claim_pending(
        SCOPE, limit=1, worker_id="w3", lease_seconds=5, now=retry_at
    )
    assert (again.id, again.attempts) == ("a", 1)
    # failure without retry: failed; requeue makes it pending with attempts 0
    await store.fail_indexing(again, worker_id="w3", error="fatal", retry_at=None, now=retry_at)
    assert await store.index_status(SCOPE, ["a"]) == {"a": ("failed", "fatal")}
    assert await store.requeue_failed(SCOPE) == 1
    (record,) = await store.get_entries(SCOPE, ["a"])
    assert (record.status, record.attempts, record.last_error) == ("pending", 0, None)
    assert await store.release_claims("w2") == 1  # "b" is still leased by w2
    assert b.id == "b"


async def test_store_vectors_and_replace_text(make_postgres_stores):
    store = (await make_postgres_stores(dimension=2)).vector_store
    await store.put_entries(SCOPE, [entry("a"), entry("b")], now=NOW)
    assert (
        await store.store_vectors(
            SCOPE, [("a", 1, np.ones(2, np.float32)), ("b", 9, np.ones(2, np.float32))], now=NOW
        )
        == 1
    )
    later = NOW + timedelta(hours=1)
    record = (
        await govern(store, SCOPE, text=("b", "rewritten", np.ones(2, np.float32)), now=later)
    ).record
    assert record is not None
    assert (record.text, record.revision, record.status, record.written_at) == (
        "rewritten",
        2,
        "indexed",
        later,
    )


async def test_tombstones_and_share_grants(make_postgres_stores):
    store = (await make_postgres_stores()).vector_store
    await govern(
        store,
        SCOPE,
        tombstones=(
            Tombstone("x", "c", "revoked", NOW),
            Tombstone("x", "c", "forgotten", NOW),
            Tombstone("y", "c", "forgotten", NOW),
        ),
    )
    assert await store.known_ids(SCOPE, ["x", "y", "z"]) == set()  # tombstones are not entries
    await govern(store, SCOPE, untombstone=("c", "forgotten"))  # removes two
    assert await tombstones_of(store, SCOPE) == [("x", "c", "revoked")]  # it coexisted
    await govern(store, SCOPE, untombstone=("c", "revoked"))
    assert await tombstones_of(store, SCOPE) == []
    grant = ShareGrant(
        "tenant-a", "user-1", "parent", "child", ("a", "b"), NOW, NOW + timedelta(days=1)
    )
    assert await store.put_share_grant(grant) == grant
    assert await store.get_share_grant("tenant-a", "user-1", "parent", "child") == grant
    assert await store.get_share_grant("tenant-b", "user-1", "parent", "child") is None
    assert await store.delete_share_grant("tenant-b", "user-1", "parent", "child") == 0
    assert await store.delete_share_grant("tenant-a", "user-1", "parent", "child") == 1


# ---- working memory --------------------------------------------------------------------------------


async def test_working_store_versions_and_conflicts(make_postgres_stores):
    working = (await make_postgres_stores()).working_store
    assert await working.get_working("t", "r", None) is None
    first = await working.put_working("t", "r", None, {"a": 1}, expected_version=0, now=NOW)
    assert first.version == 1
    assert first.data == {"a": 1}
    with pytest.raises(ConflictError):
        await working.put_working("t", "r", None, {"a": 2}, expected_version=0, now=NOW)
    with pytest.raises(ConflictError):
        await working.put_working("t", "r", None, {"a": 2}, expected_version=5, now=NOW)
    second = await working.put_working("t", "r", None, {"a": 2}, expected_version=1, now=NOW)
    third = await working.put_working("t", "r", None, {"a": 3}, expected_version=None, now=NOW)
    assert (second.version, third.version) == (2, 3)
    # per-thread documents are separate, and so are tenants
    assert await working.get_working("t", "r", "thread") is None
    assert await working.get_working("other", "r", None) is None
    threaded = await working.put_working(
        "t", "r", "thread", {"b": 1}, expected_version=None, now=NOW
    )
    assert threaded.version == 1
    current = await working.get_working("t", "r", None)
    assert current is not None
    assert current.data == {"a": 3}


async def test_concurrent_working_writes_lose_nothing(make_postgres_stores):
    working = (await make_postgres_stores()).working_store
    await asyncio.gather(
        *(
            working.put_working("t", "r", None, {"n": n}, expected_version=None, now=NOW)
            for n in range(10)
        )
    )
    current = await working.get_working("t", "r", None)
    assert current is not None
    assert current.version == 10


# ---- plans -----------------------------------------------------------------------------------------


async def test_per_thread_search_uses_the_scope_btree(make_postgres_stores):
    stores = await make_postgres_stores(dimension=8)
    store = stores.vector_store
    rng = np.random.default_rng(3)
    names = store.tables.names
    async with stores.engine.begin() as conn:
        await conn.execute(
            text(
                f'INSERT INTO "{names.schema}"."{names.entries}" (tenant_id, resource_id, thread_id, '
                "id, text, role, metadata, consent_explicit, consent_source, consent_scope, "
                "consent_visible, sequence, occurred_at, created_at, written_at, importance, "
                "legal_hold, status, revision, attempts, embedding, text_tsv, term_count) "
                "SELECT 'tenant-a', 'user-1', 'thread-' || (g % 200), 'e' || g, 'text ' || g, 'user', "
                "'{}'::jsonb, false, 'user', 'thread', true, g, now(), now(), now(), 1.0, false, "
                "'indexed', 1, 0, CAST(:v AS vector), array_to_tsvector(ARRAY['text', g::text]), 2 "
                "FROM generate_series(1, 20000) AS g"
            ),
            {"v": unit(rng, 8)},
        )
        await conn.execute(text(f'ANALYZE "{names.schema}"."{names.entries}"'))
    from prism_memory.postgres.statements import EntrySql

    sql = EntrySql.for_tables(store.tables).recall.search(
        require_consent=False, occurred_after=False, shared=False, lexical=True
    )
    async with stores.engine.connect() as conn:
        plan = await conn.execute(
            text(f"EXPLAIN {sql}"),
            {
                "tenant": "tenant-a",
                "resource": "user-1",
                "thread": "thread-7",
                "query": unit(rng, 8),
                "limit": 10,
                "term_queries": ["'text'"],
                "any_term": "'text'",
            },
        )
        lines = "\n".join(row[0] for row in plan)
    assert names.ix_scope in lines or f"{names.entries}_pkey" in lines, lines
    assert names.ix_hnsw not in lines, lines


# ---- engine options ----------------------------------------------------------------------------


async def test_engine_options_size_the_pool_and_keep_the_server_settings(postgres_url):
    schema = f"pm_test_{uuid.uuid4().hex[:12]}"
    stores = await create_postgres_memory_stores(
        postgres_url,
        schema=schema,
        dimension=4,
        engine_options={
            "pool_size": 8,
            "max_overflow": 2,
            "connect_args": {"server_settings": {"application_name": "host-app"}},
        },
    )
    try:
        pool = stores.engine.pool
        assert isinstance(pool, AsyncAdaptedQueuePool)
        assert pool.size() == 8
        async with stores.engine.connect() as conn:
            name = (await conn.execute(text("SHOW application_name"))).scalar_one()
            plans = (await conn.execute(text("SHOW plan_cache_mode"))).scalar_one()
        assert (name, plans) == ("host-app", "auto")  # the host's name, prism's plan setting
        assert stores.vector_store.executor.sets_plans  # still the one-round-trip read path
    finally:
        async with stores.engine.begin() as conn:
            await conn.execute(text(f'DROP SCHEMA "{schema}" CASCADE'))
        await stores.close()


async def test_engine_options_are_checked(postgres_url):
    with pytest.raises(ConfigurationError, match="engine_options"):
        await create_postgres_memory_stores(
            engine=create_engine(postgres_url, pooled=False), engine_options={"pool_size": 2}
        )
    with pytest.raises(ConfigurationError, match="options"):
        await create_postgres_vector_store(postgres_url, engine_options={"pool_size": "many"})
    with pytest.raises(ConfigurationError, match="engine_options"):
        await create_postgres_vector_store(postgres_url, engine_options=["pool_size"])  # type: ignore[arg-type]


# ---- connections kept between operations -------------------------------------------------------


async def _backend_pid(store: Any) -> int:
    ((pid,),) = await store.executor.fetch("pid", "SELECT pg_backend_pid()", {})
    return int(pid)


async def test_a_store_keeps_its_connection_between_operations_and_returns_it_on_close(
    postgres_url,
):
    """Single-statement operations reuse the connection the last one used, kept out of the pool
    (no checkout and checkin per call); closing the stores hands it back, also when the host owns
    the engine, and from then on nothing is kept."""
    engine = create_engine(postgres_url)  # made by prism_memory, owned by the host
    schema = f"pm_test_{uuid.uuid4().hex[:12]}"
    stores = await create_postgres_memory_stores(engine=engine, schema=schema, dimension=4)
    pool = engine.sync_engine.pool
    try:
        first = await _backend_pid(stores.vector_store)
        await stores.vector_store.put_entries(SCOPE, [entry("e1")], now=NOW)
        assert await _backend_pid(stores.vector_store) == first
        assert pool.checkedout() == 1  # kept by the store, not idle in the pool
        await stores.close()
        assert pool.checkedout() == 0
        with pytest.raises(StoreClosedError):  # and a closed store takes no connection again
            await _backend_pid(stores.vector_store)
        assert pool.checkedout() == 0
    finally:
        async with engine.begin() as conn:
            await conn.execute(text(f'DROP SCHEMA "{schema}" CASCADE'))
        await engine.dispose()


async def test_a_store_never_keeps_a_connection_the_pool_cannot_spare(postgres_url):
    """With a pool of one connection and no overflow the store keeps nothing: another caller of
    the engine (a host's session, the store's own transactions) gets the connection at once."""
    schema = f"pm_test_{uuid.uuid4().hex[:12]}"
    stores = await create_postgres_memory_stores(
        postgres_url,
        schema=schema,
        dimension=4,
        engine_options={"pool_size": 1, "max_overflow": 0, "pool_timeout": 2},
    )
    try:
        await _backend_pid(stores.vector_store)
        assert stores.engine.sync_engine.pool.checkedout() == 0
        async with stores.engine.connect() as conn:  # would time out if the store kept it
            assert (await conn.execute(text("SELECT 1"))).scalar_one() == 1
    finally:
        async with stores.engine.begin() as conn:
            await conn.execute(text(f'DROP SCHEMA "{schema}" CASCADE'))
        await stores.close()


async def test_kept_connections_go_back_to_the_pool_when_unused(postgres_url, monkeypatch):
    """A store keeps connections through a burst of operations only: unused for
    ``KEEP_SECONDS`` they go back to the pool -- also when the store was dropped without
    ``close()`` (the keeper task holds it until then), so nothing is left to the garbage
    collector."""
    monkeypatch.setattr(_engine, "KEEP_SECONDS", 0.05)
    engine = create_engine(postgres_url)
    schema = f"pm_test_{uuid.uuid4().hex[:12]}"
    pool = engine.sync_engine.pool
    try:
        stores = await create_postgres_memory_stores(engine=engine, schema=schema, dimension=4)
        await _backend_pid(stores.vector_store)
        assert pool.checkedout() == 1
        await asyncio.sleep(0.3)
        assert pool.checkedout() == 0  # idle: handed back
        await _backend_pid(stores.vector_store)
        assert pool.checkedout() == 1
        del stores  # dropped without close()
        gc.collect()
        await asyncio.sleep(0.3)
        gc.collect()
        assert pool.checkedout() == 0
    finally:
        async with engine.begin() as conn:
            await conn.execute(text(f'DROP SCHEMA "{schema}" CASCADE'))
        await engine.dispose()


def test_kept_connections_go_back_to_the_pool_as_the_event_loop_shuts_down(postgres_url):
    """A script that ends moments after its last operation without closing its stores: as
    ``asyncio.run`` ends it cancels every task still pending, and the store's keeper task hands
    the kept connections back before the loop closes (a timer would have been dropped with the
    loop, leaving them to the garbage collector: a warning and an "Event loop is closed" error)."""
    schema = f"pm_test_{uuid.uuid4().hex[:12]}"
    checked_out: list[int] = []

    async def script() -> AsyncEngine:
        engine = create_engine(postgres_url)
        stores = await create_postgres_memory_stores(engine=engine, schema=schema, dimension=4)
        await stores.vector_store.put_entries(SCOPE, [entry("e1")], now=NOW)
        checked_out.append(engine.sync_engine.pool.checkedout())
        return engine  # the stores are dropped, never closed

    failure: list[BaseException] = []

    def target() -> None:  # on a loop of its own, as a script's asyncio.run would be
        loop = asyncio.new_event_loop()
        try:
            engine = loop.run_until_complete(script())
            loop.run_until_complete(_cancel_pending())
            checked_out.append(engine.sync_engine.pool.checkedout())
            loop.run_until_complete(_drop_and_dispose(engine, schema))
        except BaseException as exc:  # noqa: BLE001 - re-raised in the test's thread
            failure.append(exc)
        finally:
            loop.close()

    worker = threading.Thread(target=target)
    worker.start()
    worker.join()
    if failure:
        raise failure[0]
    assert checked_out == [1, 0]


async def _cancel_pending() -> None:
    """What ``asyncio.run`` does as it ends: cancel every other task and let them finish."""
    pending = asyncio.all_tasks() - {asyncio.current_task()}
    for task in pending:
        task.cancel()
    await asyncio.gather(*pending, return_exceptions=True)


async def _drop_and_dispose(engine: AsyncEngine, schema: str) -> None:
    async with engine.begin() as conn:
        await conn.execute(text(f'DROP SCHEMA "{schema}" CASCADE'))
    await engine.dispose()


async def test_a_kept_connection_idle_too_long_is_pinged_before_a_write(postgres_url, monkeypatch):
    """A kept connection that sat idle goes back through the pool's idle ping: a write (never
    retried) after its server process died still succeeds, on a new connection."""
    monkeypatch.setattr(_engine, "IDLE_PING_SECONDS", 0.05)
    schema = f"pm_test_{uuid.uuid4().hex[:12]}"
    stores = await create_postgres_memory_stores(postgres_url, schema=schema, dimension=4)
    libpq = make_url(postgres_url).set(drivername="postgresql").render_as_string(False)
    try:
        kept = await _backend_pid(stores.vector_store)
        killer = await asyncpg.connect(libpq)
        try:
            assert await killer.fetchval("SELECT pg_terminate_backend($1)", kept)
        finally:
            await killer.close()
        await asyncio.sleep(0.1)
        stored = await stores.vector_store.put_entries(SCOPE, [entry("e1")], now=NOW)
        assert [r.id for r in stored] == ["e1"]
        assert await _backend_pid(stores.vector_store) != kept
    finally:
        async with stores.engine.begin() as conn:
            await conn.execute(text(f'DROP SCHEMA "{schema}" CASCADE'))
        await stores.close()
