"""Conformance checks of the write path: rows stored with their vectors in one write.

``remember(wait=True)`` embeds first and hands the vectors to
:meth:`~prism_memory.stores.base.VectorStore.put_entries`, which stores the new rows ``indexed``; a
failing embedder falls back to the pending rows the indexing queue retries. These checks hold the
store contract and the facade to that on every backend.
"""

from __future__ import annotations

import asyncio
from dataclasses import replace
from datetime import timedelta

import numpy as np

from ..embedding import HashEmbedder, embedder_model
from ..errors import DimensionMismatchError, EmbedderError, IndexingError, InvalidVectorError
from ..models import MemoryConsent, MemoryIdentity
from ..stores.base import GovernanceChange, MetadataPatch, NewEntry
from ._fixtures import FlakyEmbedder
from ._support import ConformanceKit, _Case, _check, _forget_threads, _ids, _raises

__all__ = ["WRITE_CHECKS"]


def _new(entry_id: str, text: str, case: _Case, sequence: int | None = None) -> NewEntry:
    return NewEntry(
        id=entry_id,
        text=text,
        role="user",
        metadata={"k": [1, 2]},
        consent=None,
        sequence=sequence,
        occurred_at=case.clock(),
        importance=1.0,
        lineage=None,
    )


async def put_entries_with_vectors_stores_rows_indexed(kit: ConformanceKit) -> None:
    """Rows written with their vectors are indexed and recallable at once; sequences follow the
    same rule as pending rows; an existing id keeps what is stored; a bad vector writes nothing."""
    case = _Case(kit)
    store = kit.vector_store
    width = kit.embedder.dimensions
    scope = MemoryIdentity(tenant_id=case.tenant, resource_id="user-ada", thread_id="thread-1")
    now = case.clock()
    texts = ["Ada plays the cello", "Ada keeps bees", "Ada rows on Sundays", "Ada reads maps"]
    vectors = np.asarray(await kit.embedder.embed(texts), dtype=np.float32)
    entries = [
        _new("a", texts[0], case),
        _new("b", texts[1], case, sequence=7),
        _new("c", texts[2], case),
        _new("a", "a second 'a' in one call", case),
    ]
    model = embedder_model(kit.embedder) or "m-1"  # the model the recall below embeds with
    stored = await store.put_entries(
        scope, entries, now=now, vectors=[*vectors[:3], vectors[0]], model=model
    )
    _check([r.id for r in stored] == ["a", "b", "c", "a"], "records in input order")
    _check([r.sequence for r in stored] == [0, 7, 8, 0], f"sequences: {stored}")
    _check(
        all(r.status == "indexed" and r.embedding_model == model for r in stored),
        f"stored indexed, with the model: {stored}",
    )
    _check(stored[0].text == texts[0], "the first occurrence of an id wins")
    status = await store.index_status(scope, ["a", "b", "c"])
    _check(
        status == dict.fromkeys("abc", ("indexed", None)), f"index_status says indexed: {status}"
    )
    memory = case.memory()
    _check(await _ids(memory, "Ada bees", top_k=1) == ["b"], "recallable with no queue involved")
    # a replay with other vectors, and a new row after it: the old rows are left as stored
    later = now + timedelta(minutes=1)
    again = await store.put_entries(
        scope,
        [_new("b", "replayed", case), _new("d", texts[3], case)],
        now=later,
        vectors=np.stack([vectors[3], vectors[3]]),  # a matrix, one row per entry
        model="m-2",
    )
    _check(again[0] == stored[1], f"an existing id is left exactly as stored: {again[0]}")
    _check(again[1].sequence == 9 and again[1].status == "indexed", f"new row: {again[1]}")
    # vectors are checked before anything is written
    bad = np.full(width, np.nan, dtype=np.float32)
    await _raises(
        InvalidVectorError,
        store.put_entries(scope, [_new("e", "never stored", case)], now=later, vectors=bad[None]),
        "a NaN vector",
    )
    await _raises(
        DimensionMismatchError,
        store.put_entries(
            scope,
            [_new("e", "never stored", case)],
            now=later,
            vectors=[np.ones(width + 1, dtype=np.float32)],
        ),
        "a vector of another width",
    )
    _check(await store.known_ids(scope, ["e"]) == set(), "a rejected write stored nothing")
    _check(await store.count_by_thread(scope) == 4, "four rows in all")
    await memory.aclose()
    await _forget_threads(case, "thread-1")  # "d" holds another model's vector: store-wide


async def a_batch_of_stored_and_new_ids_numbers_the_new_ones_without_a_gap(
    kit: ConformanceKit,
) -> None:
    """A batch that mixes ids already stored with new ones, in any order, inserts only the new
    ones, numbered one after another as if the stored ones were not in it; a batch of stored ids
    only inserts nothing; ``inserted`` names exactly the new rows."""
    case = _Case(kit)
    store = kit.vector_store
    scope = MemoryIdentity(tenant_id=case.tenant, resource_id="user-ada", thread_id="thread-gap")
    now = case.clock()
    first = await store.put_entries(scope, [_new("x", "x", case), _new("y", "y", case)], now=now)
    _check([r.sequence for r in first] == [0, 1], f"first batch: {first}")
    later = now + timedelta(minutes=1)
    mixed = await store.put_entries(
        scope,
        [_new(i, f"{i} again", case) for i in ("p", "x", "q", "y", "r")],
        now=later,
    )
    _check([r.id for r in mixed] == ["p", "x", "q", "y", "r"], f"input order: {mixed}")
    _check([r.sequence for r in mixed] == [2, 0, 3, 1, 4], f"no gap, stored kept: {mixed}")
    _check(mixed.inserted == {"p", "q", "r"}, f"inserted: {mixed.inserted}")
    _check(mixed[1] == first[0] and mixed[3] == first[1], "stored rows left exactly as stored")
    replay = await store.put_entries(scope, [_new("y", "y", case), _new("p", "p", case)], now=later)
    _check(replay.inserted == set(), f"a replay inserts nothing: {replay.inserted}")
    _check([r.sequence for r in replay] == [1, 2], f"a replay reads back the stored: {replay}")
    after = await store.put_entries(scope, [_new("s", "s", case)], now=later)
    _check(after[0].sequence == 5, f"the next row follows the last one: {after}")


async def values_every_row_of_a_batch_shares_are_stored_as_given(kit: ConformanceKit) -> None:
    """A batch whose rows all hold one consent, role, metadata, importance, time or explicit
    sequence stores each row with it, as a batch of differing rows does (a store may send such a
    value once for the batch)."""
    case = _Case(kit)
    store = kit.vector_store
    scope = MemoryIdentity(tenant_id=case.tenant, resource_id="user-ada", thread_id="thread-same")
    now = case.clock()
    consent = MemoryConsent(source="agent", scope="user", visible=False, granted_at=now)
    shared = [
        replace(
            _new(i, f"shared {i}", case),
            role="assistant",
            metadata={"lang": "en"},
            consent=consent,
            importance=0.25,
            occurred_at=now - timedelta(days=1),
        )
        for i in ("s1", "s2", "s3")
    ]
    stored = await store.put_entries(scope, shared, now=now)
    for record in stored:
        _check(
            (record.role, dict(record.metadata), record.consent, record.importance)
            == ("assistant", {"lang": "en"}, consent, 0.25)
            and record.occurred_at == now - timedelta(days=1),
            f"the shared values are stored: {record}",
        )
    _check([r.sequence for r in stored] == [0, 1, 2], f"numbered in order: {stored}")
    alone = await store.put_entries(scope, [_new("s9", "one explicit", case, sequence=40)], now=now)
    _check(alone[0].sequence == 40, f"a lone row keeps its explicit sequence: {alone}")
    next_two = await store.put_entries(
        scope, [_new("s10", "after it", case), _new("s11", "and after that", case)], now=now
    )
    _check([r.sequence for r in next_two] == [41, 42], f"numbered past it: {next_two}")
    read = await store.get_entries(scope, ["s1", "s9"])
    _check(
        [(r.id, r.sequence, r.consent) for r in read] == [("s1", 0, consent), ("s9", 40, None)],
        f"read back as stored: {read}",
    )


async def remember_wait_embeds_before_the_write(kit: ConformanceKit) -> None:
    """``remember(wait=True)`` stores its rows indexed: recallable by any memory at once, one
    embedder call for the batch, the embedder's model recorded; a replay changes nothing."""
    case = _Case(kit)
    counting = FlakyEmbedder(kit.embedder, failures=0)
    writer = case.memory(embedder=counting)
    reader = case.memory()
    texts = ["Grace sails a dinghy", "Grace bakes sourdough", "Grace fixes radios"]
    result = await writer.remember(
        [{"id": f"g{i}", "text": t} for i, t in enumerate(texts)], wait=True
    )
    _check(result.pending == (), f"nothing pending after wait=True: {result}")
    report = await asyncio.wait_for(result.done, timeout=10)
    _check(report.indexed == ("g0", "g1", "g2") and not report.failed, f"report: {report}")
    _check(counting.calls == 1, f"one embedder call for the batch, got {counting.calls}")
    records = [await reader.get(f"g{i}") for i in range(3)]
    _check(
        all(
            r.status == "indexed"
            and r.attempts == 0
            and r.embedding_model == writer.embedding_model
            for r in records
        ),
        f"stored indexed with the model: {records}",
    )
    _check(await _ids(reader, "sourdough", top_k=1) == ["g1"], "recallable by another memory")
    case.clock.advance(hours=1)
    replay = await writer.remember(
        [{"id": "g1", "text": "Grace bakes rye"}, {"id": "g3", "text": "Grace climbs"}], wait=True
    )
    _check(replay.accepted == ("g1", "g3"), f"replay accepted: {replay}")
    _check(await reader.get("g1") == records[1], "a replayed id is left exactly as stored")
    _check(
        (await reader.get("g3")).sequence == 3, "a new row after a replay takes the next sequence"
    )
    await writer.aclose()


async def remember_wait_with_failing_embedder_stores_pending(kit: ConformanceKit) -> None:
    """If the embedder fails, ``remember(wait=True)`` still stores every row (pending) and the
    queue retries them as it retries background writes; a permanent failure is reported."""
    case = _Case(kit)
    flaky = FlakyEmbedder(kit.embedder, failures=2)
    memory = case.memory(embedder=flaky)
    result = await memory.remember({"id": "f1", "text": "Linus grows chillies"}, wait=True)
    _check(result.pending == (), f"indexed once it returns: {result}")
    record = await memory.get("f1")
    _check(record.status == "indexed", f"indexed by the queue: {record}")
    _check(record.attempts == 1, f"the queue's failed attempt is recorded: {record}")
    _check(flaky.calls == 3, f"before the write, once by the queue, then success: {flaky.calls}")
    _check(await _ids(memory, "chillies", top_k=1) == ["f1"], "recallable after the retry")

    broken = FlakyEmbedder(kit.embedder, failures=10**6)
    failing = case.memory(thread="thread-2", embedder=broken)
    await _raises(
        IndexingError,
        failing.remember([{"id": "x1", "text": "never embedded"}], wait=True),
        "a permanently failing embedder",
    )
    status = await failing.index_status(["x1"])
    _check(status == {"x1": "failed"}, f"the row is stored and its failure recorded: {status}")
    await _raises(EmbedderError, failing.recall("chillies"), "recall with a failing embedder")
    await memory.aclose()
    await failing.aclose()


async def an_embedder_of_another_width_is_refused_before_it_writes(kit: ConformanceKit) -> None:
    """A memory whose embedder is wider than the vectors the store holds is refused before it
    writes -- by ``create_memory`` when the store is pinned, else when it opens and when it
    writes -- with :class:`DimensionMismatchError`: nothing is stored and nothing waits for ever
    (``remember(wait=True)`` used to wait on rows no store could index)."""
    case = _Case(kit)
    writer = case.memory()
    await writer.remember({"id": "w", "text": "Ada keeps bees"}, wait=True)
    width = kit.embedder.dimensions
    held = await kit.vector_store.vector_width()
    _check(held == width, f"vector_width() is the width of the vectors held: {held}")
    wider = HashEmbedder(dimensions=width + 16)
    try:
        other = case.memory(thread="thread-2", embedder=wider)
    except DimensionMismatchError:
        _check(kit.vector_store.dimension == width, "create_memory refuses for a pinned store")
    else:
        await _raises(DimensionMismatchError, other.__aenter__(), "opening the memory")
        for wait in (True, False):
            await _raises(
                DimensionMismatchError,
                asyncio.wait_for(other.remember({"id": "x", "text": "bees"}, wait=wait), 30),
                f"remember(wait={wait})",
            )
        await other.aclose()
    scope = MemoryIdentity(tenant_id=case.tenant, resource_id="user-ada", thread_id="thread-2")
    stored = await kit.vector_store.get_entries(scope, ["x"])
    _check(stored == [], f"nothing was written: {stored}")
    await writer.aclose()


async def merge_metadata_patches_only_the_version_read(kit: ConformanceKit) -> None:
    """``merge_metadata`` sets the patch's keys and keeps every other key, the text, revision and
    ``written_at``; a patch naming an older version, a held entry, an absent id or another
    thread's entry changes nothing."""
    case = _Case(kit)
    store = kit.vector_store
    scope = MemoryIdentity(tenant_id=case.tenant, resource_id="user-ada", thread_id="thread-1")
    other = MemoryIdentity(tenant_id=case.tenant, resource_id="user-ada", thread_id="thread-2")
    now = case.clock()
    vectors = np.asarray(await kit.embedder.embed(["one", "two", "three"]), dtype=np.float32)
    a, b, held = await store.put_entries(
        scope,
        [_new("a", "one", case), _new("b", "two", case), _new("h", "three", case)],
        now=now,
        vectors=vectors,
    )
    (twin,) = await store.put_entries(other, [_new("a", "one", case)], now=now, vectors=vectors[:1])
    await store.apply_governance(scope, GovernanceChange(hold=("h",)), now=now)
    stale = MetadataPatch(a.revision + 1, a.written_at, {"x": 1})
    changed = await store.merge_metadata(
        scope,
        {
            "a": MetadataPatch(a.revision, a.written_at, {"x": {"y": [1]}, "k": None}),
            "b": MetadataPatch(b.revision, b.written_at + timedelta(seconds=1), {"x": 2}),
            "h": MetadataPatch(held.revision, held.written_at, {"x": 3}),
            "gone": stale,
        },
    )
    _check(changed == 1, f"only the entry still at the version read changed: {changed}")
    after = {r.id: r for r in await store.get_entries(scope, ["a", "b", "h"])}
    _check(
        dict(after["a"].metadata) == {"k": None, "x": {"y": [1]}},
        f"keys set, others kept: {after['a'].metadata}",
    )
    _check(
        (after["a"].text, after["a"].revision, after["a"].written_at)
        == (a.text, a.revision, a.written_at),
        "text, revision and written_at kept",
    )
    _check(dict(after["b"].metadata) == {"k": [1, 2]}, "an older version is not patched")
    _check(dict(after["h"].metadata) == {"k": [1, 2]}, "a held entry is not patched")
    _check(await store.merge_metadata(scope, {"a": stale}) == 0, "a stale revision changes nothing")
    (kept,) = await store.get_entries(other, ["a"])
    _check(dict(kept.metadata) == dict(twin.metadata), "another thread's entry is untouched")
    _check(await store.merge_metadata(scope, {}) == 0, "no patches, no change")


WRITE_CHECKS = {
    check.__name__: check
    for check in (
        put_entries_with_vectors_stores_rows_indexed,
        merge_metadata_patches_only_the_version_read,
        a_batch_of_stored_and_new_ids_numbers_the_new_ones_without_a_gap,
        values_every_row_of_a_batch_shares_are_stored_as_given,
        remember_wait_embeds_before_the_write,
        remember_wait_with_failing_embedder_stores_pending,
        an_embedder_of_another_width_is_refused_before_it_writes,
    )
}
"""The write-path checks by name."""
