"""Vector generations on PostgreSQL (revision prism_memory_0011): the VectorGenerations role of
PostgresVectorStore against a real server -- registration, backfill claims and leases, progress,
the one-statement switch and its rollback, stale vectors after a correction, cascades on delete,
concurrent claimers, and recall under a shadow model reporting the active generation."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta

import numpy as np
import pytest
from sqlalchemy import text

from prism_memory.errors import (
    ConflictError,
    DimensionMismatchError,
    GenerationNotReadyError,
    NotFoundError,
)
from prism_memory.models import MemoryIdentity
from prism_memory.stores.base import (
    EntryKey,
    GovernanceChange,
    NewEntry,
    RecallFilter,
    SearchRequest,
    Tombstone,
    VectorGenerations,
)

pytestmark = pytest.mark.postgres

NOW = datetime(2025, 1, 1, tzinfo=UTC)
SCOPE = MemoryIdentity(tenant_id="tenant-a", resource_id="user-1", thread_id="thread-1")
OTHER = MemoryIdentity(tenant_id="tenant-b", resource_id="user-1", thread_id="thread-1")
OLD, NEW = "old-model", "new-model"


def _entry(entry_id: str, body: str | None = None) -> NewEntry:
    return NewEntry(
        id=entry_id,
        text=body or f"text of {entry_id}",
        role="user",
        metadata={},
        consent=None,
        sequence=None,
        occurred_at=NOW,
        importance=1.0,
        lineage=None,
    )


def _axis(width: int, i: int) -> np.ndarray:
    vector = np.zeros(width, np.float32)
    vector[i % width] = 1.0
    return vector


async def _store_with(make_postgres_stores, ids_by_scope, *, schema=None):
    store = (await make_postgres_stores(schema=schema)).vector_store
    for scope, ids in ids_by_scope.items():
        vectors = [_axis(3, i) for i in range(len(ids))]
        await store.put_entries(
            scope, [_entry(i) for i in ids], now=NOW, vectors=vectors, model=OLD
        )
    return store


async def _start(store, width: int = 4):
    return await store.start_generation(
        primary=OLD, primary_width=3, model=NEW, width=width, now=NOW
    )


async def _backfill(store, *, worker="w", now=NOW, vector=lambda c: _axis(4, 0)) -> int:
    stored = 0
    after = None
    while True:
        claimed = await store.claim_generation(
            NEW, limit=2, worker_id=worker, lease_seconds=60, now=now, after=after
        )
        if not claimed:
            return stored
        stored += await store.store_generation_vectors(
            NEW, [(c, vector(c)) for c in claimed], now=now
        )
        last = claimed[-1]
        after = EntryKey(
            last.scope.tenant_id, last.scope.resource_id, last.scope.thread_id, last.id
        )


async def _vector_rows(store) -> int:
    names = store.tables.names
    async with store.engine.connect() as conn:
        found = await conn.execute(text(f'SELECT count(*) FROM "{names.schema}"."{names.vectors}"'))
        return int(found.scalar_one())


def _request(vector, *, model=None, terms=frozenset(), limit=10) -> SearchRequest:
    return SearchRequest(
        vector=np.asarray(vector, np.float32),
        terms=frozenset(terms),
        limit=limit,
        filter=RecallFilter(now=NOW),
        model=model,
    )


# ---- registration ------------------------------------------------------------------------------


async def test_start_registers_the_primary_active_and_the_shadow_idempotently(
    make_postgres_stores,
):
    store = await _store_with(make_postgres_stores, {SCOPE: ["a"]})
    assert isinstance(store, VectorGenerations)
    assert await store.generations() == []
    shadow = await _start(store)
    assert (shadow.model, shadow.width, shadow.role, shadow.active) == (NEW, 4, "shadow", False)
    primary, again = await store.generations()
    assert (primary.model, primary.role, primary.active, primary.width) == (OLD, "primary", True, 3)
    assert again == shadow
    assert await _start(store) == shadow  # idempotent for the same model and width

    for kwargs, what in (
        ({"model": NEW, "width": 5}, "another width"),
        ({"model": OLD, "width": 3}, "the primary"),
        ({"model": "third", "width": 4}, "another shadow"),
    ):
        with pytest.raises(ConflictError) as raised:
            await store.start_generation(primary=OLD, primary_width=3, now=NOW, **kwargs)
        assert NEW not in str(raised.value)
        assert OLD not in str(raised.value), what
    with pytest.raises(ConflictError):
        await store.start_generation(primary="other", primary_width=3, model=NEW, width=4, now=NOW)
    assert await store.generations() == [primary, shadow]  # nothing changed


# ---- claims, progress, switch, rollback, drop ---------------------------------------------------


async def test_backfill_switch_refused_then_ready_rollback_and_drop(make_postgres_stores):
    store = await _store_with(make_postgres_stores, {SCOPE: ["a", "b", "c"], OTHER: ["d"]})
    await store.put_entries(SCOPE, [_entry("pending")], now=NOW)  # not indexed: not claimed
    await _start(store)
    # every entry's own vector is of the primary: nothing to claim for it
    assert (
        await store.claim_generation(OLD, limit=5, worker_id="w", lease_seconds=60, now=NOW) == []
    )
    with pytest.raises(NotFoundError):
        await store.claim_generation("unknown", limit=5, worker_id="w", lease_seconds=60, now=NOW)
    with pytest.raises(NotFoundError):
        await store.generation_progress("unknown", now=NOW)

    progress = await store.generation_progress(NEW, now=NOW)
    assert (progress.entries, progress.current, progress.leased, progress.missing) == (4, 0, 0, 4)
    primary = await store.generation_progress(OLD, now=NOW)
    assert primary.complete
    assert primary.entries == 4

    first = await store.claim_generation(NEW, limit=2, worker_id="w1", lease_seconds=60, now=NOW)
    assert [(c.scope, c.id) for c in first] == [(SCOPE, "a"), (SCOPE, "b")]  # EntryKey order
    assert all(c.lease_until == NOW + timedelta(seconds=60) for c in first)
    # leased to w1: another worker gets the rest, in key order, never these
    rest = await store.claim_generation(NEW, limit=5, worker_id="w2", lease_seconds=60, now=NOW)
    assert [(c.scope, c.id) for c in rest] == [(SCOPE, "c"), (OTHER, "d")]
    assert (await store.generation_progress(NEW, now=NOW)).leased == 4
    # the cursor: only those after it
    after = EntryKey(SCOPE.tenant_id, SCOPE.resource_id, SCOPE.thread_id, "c")
    later = NOW + timedelta(seconds=61)  # every lease expired
    tail = await store.claim_generation(
        NEW, limit=5, worker_id="w3", lease_seconds=60, now=later, after=after
    )
    assert [(c.scope, c.id) for c in tail] == [(OTHER, "d")]

    # a wrong width stores nothing (all or nothing)
    with pytest.raises(DimensionMismatchError):
        await store.store_generation_vectors(
            NEW, [(first[0], _axis(4, 1)), (first[1], _axis(3, 1))], now=NOW
        )
    assert (await store.generation_progress(NEW, now=NOW)).current == 0
    assert (
        await store.store_generation_vectors(NEW, [(c, _axis(4, 1)) for c in first], now=NOW) == 2
    )

    with pytest.raises(GenerationNotReadyError) as refused:
        await store.switch_generation(NEW, force=False, now=NOW)
    assert refused.value.missing == 2
    assert NEW not in str(refused.value)
    assert [g.active for g in await store.generations()] == [True, False]

    later = later + timedelta(seconds=61)  # w3's lease of "d" expired too
    assert await _backfill(store, now=later) == 2
    done = await store.generation_progress(NEW, now=later)
    assert done.complete
    assert (done.current, done.leased) == (4, 0)

    switched = await store.switch_generation(NEW, force=False, now=later)
    assert switched.active
    assert switched.switched_at == later
    assert [(g.model, g.active) for g in await store.generations()] == [(OLD, False), (NEW, True)]
    # switching to the active one changes nothing; switching back is the rollback, always ready
    assert (await store.switch_generation(NEW, force=False, now=later + timedelta(1))) == switched
    with pytest.raises(ConflictError):
        await store.drop_generation(NEW)  # the active one
    back = await store.switch_generation(OLD, force=False, now=later)
    assert back.model == OLD
    assert back.active
    assert [(g.model, g.active) for g in await store.generations()] == [(OLD, True), (NEW, False)]
    # again and again: the unique active index never sees two active rows mid-statement
    for _ in range(3):
        await store.switch_generation(NEW, force=False, now=later)
        await store.switch_generation(OLD, force=False, now=later)

    with pytest.raises(ConflictError):
        await store.drop_generation(OLD)
    with pytest.raises(NotFoundError):
        await store.switch_generation("unknown", force=True, now=NOW)
    assert await store.drop_generation(NEW) == 4
    assert await _vector_rows(store) == 0
    assert [g.model for g in await store.generations()] == [OLD]
    with pytest.raises(NotFoundError):
        await store.drop_generation(NEW)


async def test_a_forced_switch_leaves_entries_without_a_vector_out_of_recall(make_postgres_stores):
    store = await _store_with(make_postgres_stores, {SCOPE: ["a", "b"]})
    await _start(store)
    (claimed,) = await store.claim_generation(
        NEW, limit=1, worker_id="w", lease_seconds=60, now=NOW
    )
    await store.store_generation_vectors(NEW, [(claimed, _axis(4, 2))], now=NOW)
    with pytest.raises(GenerationNotReadyError):
        await store.switch_generation(NEW, force=False, now=NOW)
    forced = await store.switch_generation(NEW, force=True, now=NOW)
    assert forced.active
    result = await store.search(SCOPE, _request(_axis(4, 2), model=NEW))
    assert [c.id for c in result.candidates] == ["a"]
    assert result.active_model == NEW
    assert result.pending == 1  # "b" waits for its vector of the model
    assert result.stats.documents == 1


async def test_a_correction_makes_the_vector_stale_until_it_is_embedded_again(
    make_postgres_stores,
):
    store = await _store_with(make_postgres_stores, {SCOPE: ["a", "b"]})
    await _start(store)
    claimed = await store.claim_generation(NEW, limit=5, worker_id="w", lease_seconds=60, now=NOW)
    await store.store_generation_vectors(NEW, [(c, _axis(4, 0)) for c in claimed], now=NOW)
    assert (await store.generation_progress(NEW, now=NOW)).complete

    change = GovernanceChange(text=("a", "a corrected text", _axis(3, 1)), text_model=OLD)
    corrected = (await store.apply_governance(SCOPE, change, now=NOW)).record
    assert corrected is not None
    assert corrected.revision == 2
    progress = await store.generation_progress(NEW, now=NOW)
    assert (progress.current, progress.missing) == (1, 1)
    found = await store.search(SCOPE, _request(_axis(4, 0), model=NEW))
    assert [c.id for c in found.candidates] == ["b"]  # a stale vector is never ranked
    assert found.pending == 1
    # a vector of the old revision is skipped; the claim finds the entry again, at its revision
    old_a = next(c for c in claimed if c.id == "a")
    assert await store.store_generation_vectors(NEW, [(old_a, _axis(4, 0))], now=NOW) == 0
    (again,) = await store.claim_generation(NEW, limit=5, worker_id="w", lease_seconds=60, now=NOW)
    assert (again.id, again.revision, again.text) == ("a", 2, "a corrected text")
    assert await store.store_generation_vectors(NEW, [(again, _axis(4, 0))], now=NOW) == 1
    assert (await store.generation_progress(NEW, now=NOW)).complete


async def test_forgetting_or_deleting_an_entry_deletes_its_vectors(make_postgres_stores):
    store = await _store_with(make_postgres_stores, {SCOPE: ["a", "b", "c"]})
    await _start(store)
    assert await _backfill(store) == 3
    assert await _vector_rows(store) == 3
    forget = GovernanceChange(tombstones=(Tombstone("a", "a", "forgotten", NOW),), delete=("a",))
    await store.apply_governance(SCOPE, forget, now=NOW)
    assert await _vector_rows(store) == 2
    await store.apply_governance(SCOPE, GovernanceChange(delete=("b", "c")), now=NOW)
    assert await _vector_rows(store) == 0
    assert (await store.generation_progress(NEW, now=NOW)).entries == 0


async def test_vectors_of_a_pending_entry_are_stored_from_an_indexing_claim(make_postgres_stores):
    store = await _store_with(make_postgres_stores, {})
    await _start(store)
    await store.put_entries(SCOPE, [_entry("p")], now=NOW)
    (claimed,) = await store.claim_pending(SCOPE, limit=5, worker_id="w", lease_seconds=60, now=NOW)
    # dual write: the next model's vector first, then the primary's
    assert await store.store_generation_vectors(NEW, [(claimed, _axis(4, 3))], now=NOW) == 1
    assert await store.claim_generation(NEW, limit=5, worker_id="b", lease_seconds=9, now=NOW) == []
    await store.complete_indexing([(claimed, _axis(3, 0))], worker_id="w", now=NOW, model=OLD)
    assert (await store.generation_progress(NEW, now=NOW)).complete


async def test_two_concurrent_claimers_never_hold_the_same_entry(make_postgres_stores):
    ids = [f"e{i:03d}" for i in range(60)]
    first = await _store_with(make_postgres_stores, {SCOPE: ids[:30], OTHER: ids[30:]})
    second = (await make_postgres_stores(schema=first.tables.names.schema)).vector_store
    await _start(first)
    held: dict[str, list[tuple[str, str]]] = {"one": [], "two": []}

    async def claimer(store, worker: str) -> None:
        while True:
            claimed = await store.claim_generation(
                NEW, limit=3, worker_id=worker, lease_seconds=60, now=NOW
            )
            if not claimed:
                return
            held[worker].extend((c.scope.tenant_id, c.id) for c in claimed)

    await asyncio.gather(claimer(first, "one"), claimer(second, "two"))
    one, two = set(held["one"]), set(held["two"])
    assert len(one) == len(held["one"])
    assert len(two) == len(held["two"])
    assert not one & two
    assert len(one | two) == 60
    assert (await first.generation_progress(NEW, now=NOW)).leased == 60
    await second.close()


# ---- recall under a shadow model ---------------------------------------------------------------


async def test_search_under_a_shadow_model_ranks_its_vectors_and_reports_the_active_model(
    make_postgres_stores,
):
    plain = await _store_with(make_postgres_stores, {SCOPE: ["x"]})
    before = await plain.search(SCOPE, _request(_axis(3, 0), model=OLD))
    assert before.active_model is None  # no generations: as before
    assert [c.embedding_model for c in before.candidates] == [OLD]

    store = await _store_with(make_postgres_stores, {SCOPE: ["a", "b", "c"]})
    primary = await store.search(SCOPE, _request(_axis(3, 0)))
    assert primary.active_model is None
    # another store of the same schema starts the migration: this one's cache does not know it
    other = (await make_postgres_stores(schema=store.tables.names.schema)).vector_store
    await _start(other)
    # the new model's vectors rank "c" first, the old ones rank "a" first
    shadow_vectors = {"a": _axis(4, 2), "b": _axis(4, 1), "c": _axis(4, 0)}
    assert await _backfill(other, vector=lambda c: shadow_vectors[c.id]) == 3

    old = await store.search(SCOPE, _request(_axis(3, 0), model=OLD))
    assert old.active_model == OLD
    assert min(old.candidates, key=lambda c: float(np.dot(c.vector, _axis(3, 0))) * -1).id == "a"
    new = await store.search(SCOPE, _request(_axis(4, 0), model=NEW, terms={"text"}))
    assert new.active_model == OLD
    assert {c.embedding_model for c in new.candidates} == {NEW}
    by_id = {c.id: c for c in new.candidates}
    assert set(by_id) == {"a", "b", "c"}
    for entry_id, vector in shadow_vectors.items():
        np.testing.assert_array_equal(by_id[entry_id].vector, vector)
    assert new.stats.documents == 3
    assert new.pending == 0
    with pytest.raises(DimensionMismatchError):
        await store.search(SCOPE, _request(_axis(3, 0), model=NEW))  # the shadow is 4 wide

    await other.switch_generation(NEW, force=False, now=NOW)
    # the store's cache still says OLD is active: the statement itself reports the switch
    stale = await store.search(SCOPE, _request(_axis(3, 0), model=OLD))
    assert stale.active_model == NEW
    await other.close()


async def test_a_recall_never_mixes_models_while_switches_commit(make_postgres_stores):
    store = await _store_with(make_postgres_stores, {SCOPE: [f"e{i}" for i in range(12)]})
    switcher = (await make_postgres_stores(schema=store.tables.names.schema)).vector_store
    await _start(store)
    await _backfill(store, vector=lambda c: _axis(4, int(c.id[1:])))
    stop = asyncio.Event()

    async def flip() -> None:
        while not stop.is_set():
            for model in (NEW, OLD):
                await switcher.switch_generation(model, force=False, now=NOW)

    flipping = asyncio.create_task(flip())
    seen = set()
    try:
        for round_ in range(40):
            model, width = (OLD, 3) if round_ % 2 else (NEW, 4)
            result = await store.search(SCOPE, _request(_axis(width, 0), model=model))
            seen.add(result.active_model)
            assert result.active_model in (OLD, NEW)
            assert {c.embedding_model for c in result.candidates} == {model}
            assert {len(c.vector) for c in result.candidates} == {width}
    finally:
        stop.set()
        await flipping
        await switcher.close()
    names = store.tables.names
    async with store.engine.connect() as conn:
        active = await conn.execute(
            text(f'SELECT count(*) FROM "{names.schema}"."{names.generations}" WHERE active')
        )
        assert active.scalar_one() == 1


async def test_the_switch_and_the_rollback_are_one_statement_each(make_postgres_stores):
    """What reaches the server for a switch: one statement in its own transaction, whose
    readiness count and flip share a snapshot -- no read first and no second write."""
    store = await _store_with(make_postgres_stores, {SCOPE: ["a", "b"]})
    await _start(store)
    await _backfill(store)
    executor = store.executor
    sent: list[tuple[str, str]] = []
    for method in ("fetch", "fetchval", "write", "transaction", "unit", "run_alone"):
        original = getattr(executor, method)

        def recorder(*args, _name=method, _original=original, **kwargs):
            sent.append((_name, args[1] if len(args) > 1 else ""))
            return _original(*args, **kwargs)

        setattr(executor, method, recorder)
    try:
        await store.switch_generation(NEW, force=False, now=NOW)
        assert [name for name, _ in sent] == ["write"]
        assert sent[0][1].count("UPDATE") == 2  # the old row off, the new one on
        sent.clear()
        await store.switch_generation(OLD, force=False, now=NOW)
        assert [name for name, _ in sent] == ["write"]
    finally:
        for method in ("fetch", "fetchval", "write", "transaction", "unit", "run_alone"):
            delattr(executor, method)
    active = [g.model for g in await store.generations() if g.active]
    assert active == [OLD]
