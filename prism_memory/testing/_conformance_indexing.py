"""Conformance checks for shared indexing: the memories open on one store with one embedder share
one indexing task, each memory's lifecycle stays its own, threads take turns, and the store's
many-thread claim (:meth:`~prism_memory.stores.base.VectorStore.claim_pending_in`) keeps its rules.

They live beside :mod:`prism_memory.testing._conformance` (whose helpers they use) and are added to
its :data:`~prism_memory.testing.CONFORMANCE_CHECKS`, so every backend runs them.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import Counter
from collections.abc import Awaitable, Callable, Iterator, Sequence
from dataclasses import replace
from datetime import timedelta
from typing import Any

import numpy as np

from ..embedding import Embedder
from ..errors import IndexingError, ValidationError
from ..indexing import CLAIM_BATCHES, SHARED_LANES, IndexingPolicy
from ..models import MemoryIdentity
from ..stores.backend import role_object
from ..stores.base import NewEntry, RecallFilter, SearchRequest, VectorStore
from ._fixtures import GatedEmbedder
from ._support import _FAST as _POLICY
from ._support import ConformanceKit, _Case, _check, _ids, _raises

__all__ = ["INDEXING_CHECKS"]


class _RecordingEmbedder:
    """Delegates to an embedder and records every text it embeds, in order."""

    def __init__(self, inner: Embedder) -> None:
        self._inner = inner
        self.texts: list[str] = []

    @property
    def dimensions(self) -> int:
        return self._inner.dimensions

    async def embed(self, texts: Sequence[str]) -> Any:
        self.texts.extend(texts)
        return await self._inner.embed(texts)


def _indexing_tasks() -> set[asyncio.Task[Any]]:
    """The live indexing tasks of this event loop (named after their queue's worker id)."""
    return {
        task
        for task in asyncio.all_tasks()
        if task.get_name().startswith("prism-indexer-") and not task.done()
    }


async def memories_on_one_store_share_one_indexing_task(kit: ConformanceKit) -> None:
    """Many memories on one store with one embedder run one indexing task between them; closing
    some leaves it serving the others; the last to close stops it; another embedder gets its own."""
    case = _Case(kit)
    before = _indexing_tasks()
    memories = [case.memory(thread=f"thread-{i}") for i in range(12)]
    for memory in memories:
        await memory.__aenter__()
    started = _indexing_tasks() - before
    _check(len(started) == 1, f"12 memories started {len(started)} indexing tasks, not 1")
    (task,) = started
    for i, memory in enumerate(memories):
        result = await memory.remember({"id": "a", "text": f"first note of thread {i}"}, wait=True)
        _check(result.pending == (), f"thread {i} indexed")
    for memory in memories[:6]:
        await memory.aclose()
    _check(not task.done(), "closing some memories keeps the shared task serving the others")
    for i, memory in enumerate(memories[6:], start=6):
        await memory.remember({"id": "b", "text": f"second note of thread {i}"}, wait=True)
        _check(await _ids(memory, f"second note of thread {i}", top_k=1) == ["b"], f"thread {i}")
    other = case.memory(thread="thread-0", embedder=_RecordingEmbedder(kit.embedder))
    await other.__aenter__()
    _check(len(_indexing_tasks() - before) == 2, "another embedder runs its own task")
    await other.aclose()
    for memory in memories[6:]:
        await memory.aclose()
    _check(task.done(), "the last memory to close stops the shared task")
    _check(not (_indexing_tasks() - before), "no indexing task is left running")


async def a_closing_memory_fails_only_its_own_watchers(kit: ConformanceKit) -> None:
    """A memory leaving a shared queue whose embedder is stuck gives up after its drain bound: its
    own ``done`` fails with :class:`IndexingError` and its rows stay stored; the other memory keeps
    its watcher, and both threads' rows are indexed once the embedder answers."""
    case = _Case(kit)
    gated = GatedEmbedder(kit.embedder)
    policy = IndexingPolicy(
        busy_poll_seconds=0.01, idle_poll_seconds=0.05, drain_seconds=0.2, lease_seconds=30
    )
    leaving = case.memory(thread="leaving", embedder=gated, indexing=policy)
    staying = case.memory(thread="staying", embedder=gated, indexing=policy)
    await staying.__aenter__()
    left = await leaving.remember([{"id": "l1", "text": "left behind"}])
    kept = asyncio.ensure_future((await staying.remember([{"id": "s1", "text": "still"}])).done)
    await leaving.aclose()
    await _raises(IndexingError, left.done, "the leaving memory's watcher")
    _check(not kept.done(), "the staying memory's watcher still waits")
    _check(await leaving.index_status(["l1"]) == {"l1": "pending"}, "kept pending, not dropped")
    gated.release()
    report = await asyncio.wait_for(kept, timeout=30)
    _check(report.indexed == ("s1",), f"the staying memory's row is indexed: {report}")
    reader = case.memory(thread="leaving", embedder=gated, indexing=policy)
    deadline = asyncio.get_running_loop().time() + 30
    while (await reader.index_status(["l1"])) != {"l1": "indexed"}:
        _check(asyncio.get_running_loop().time() < deadline, "the left row is indexed in time")
        await asyncio.sleep(0.02)
    await staying.aclose()


async def a_thread_backlog_does_not_hold_up_another_thread(kit: ConformanceKit) -> None:
    """With one thread's long backlog in the shared queue, another thread's new rows are embedded
    after at most the backlog batches already in flight (one claim's worth per lane), not after
    all of it."""
    case = _Case(kit)
    recording = _RecordingEmbedder(kit.embedder)
    options: dict[str, Any] = {"embedder": recording, "limits": {"embed_batch": 2}}
    busy = case.memory(thread="busy", **options)
    quiet = case.memory(thread="quiet", **options)
    await busy.__aenter__()
    await quiet.__aenter__()
    backlog_texts = [f"backlog entry number {i}" for i in range(200)]
    backlog = await busy.remember([{"text": text} for text in backlog_texts])
    quick = await quiet.remember({"id": "q", "text": "the quiet thread's note"})
    embedded_before = len(recording.texts)
    await asyncio.wait_for(quick.done, timeout=30)
    position = recording.texts.index("the quiet thread's note")
    claim = 2 * CLAIM_BATCHES  # embed_batch x 4: one claim's worth of rows
    # at most the batches already in flight in every lane, then the quiet row's turn
    _check(
        position - embedded_before <= (SHARED_LANES + 1) * claim,
        f"{position - embedded_before} backlog rows went first",
    )
    report = await asyncio.wait_for(backlog.done, timeout=60)
    _check(len(report.indexed) == len(backlog_texts), f"the whole backlog is indexed: {report}")
    await busy.aclose()
    await quiet.aclose()


async def claim_pending_in_takes_turns_between_threads(kit: ConformanceKit) -> None:
    """The many-thread claim takes at most ``per_scope`` rows of each named thread, in the order
    the threads are named, oldest first, ``limit`` in all; never a row of another thread, a row
    leased to another worker, or a row twice."""
    case = _Case(kit)
    store = kit.vector_store
    now = case.clock()
    threads = [
        MemoryIdentity(tenant_id=case.tenant, resource_id="r", thread_id=f"claim-{i}")
        for i in range(4)
    ]
    for scope in threads:
        entries = [
            NewEntry(
                id=f"{scope.thread_id}-{n}", text=f"row {n} of {scope.thread_id}", role="user",
                metadata={}, consent=None, sequence=None, occurred_at=now, importance=1.0,
                lineage=None,
            )
            for n in range(3)
        ]  # fmt: skip
        await store.put_entries(scope, entries, now=now)
    lease: dict[str, Any] = {"lease_seconds": 60.0, "now": now}
    named = [threads[2], threads[0], threads[1]]  # threads[3] is never named
    await _raises(
        ValidationError,
        store.claim_pending_in(named, limit=5, per_scope=-1, worker_id="w", **lease),
        "a negative per_scope",
    )
    _check(
        await store.claim_pending_in(named, limit=0, per_scope=2, worker_id="w", **lease) == [],
        "limit 0 claims nothing",
    )
    taken = await store.claim_pending(threads[1], limit=1, worker_id="other", **lease)
    _check([c.id for c in taken] == ["claim-1-0"], f"another worker leased {taken}")
    first = await store.claim_pending_in(named, limit=5, per_scope=2, worker_id="w", **lease)
    got = [c.id for c in first]
    expected = ["claim-2-0", "claim-2-1", "claim-0-0", "claim-0-1", "claim-1-1"]
    _check(got == expected, f"first claim {got}, expected {expected}")
    second = await store.claim_pending_in(named, limit=10, per_scope=2, worker_id="w", **lease)
    got = [c.id for c in second]
    _check(got == ["claim-2-2", "claim-0-2", "claim-1-2"], f"second claim {got}")
    third = await store.claim_pending_in(named, limit=10, per_scope=2, worker_id="w", **lease)
    _check(third == [], f"nothing left to claim: {third}")
    later = now + timedelta(seconds=61)  # every lease has run out
    again = await store.claim_pending_in(
        [threads[3]], limit=10, per_scope=10, worker_id="w", lease_seconds=60.0, now=later
    )
    _check(len(again) == 3, f"the unnamed thread's rows were never leased: {again}")


def _ours(tenant: str | None, args: tuple[Any, ...], kw: dict[str, Any]) -> bool:
    """Whether a store call concerns ``tenant``: its ``scope`` (or one of its ``scopes``) is of
    that tenant; a call that names no scope (``release_claims``) counts, a claim over every
    scope does not. ``None`` counts every call."""
    if tenant is None:
        return True
    target = args[0] if args else kw.get("scope", kw.get("scopes"))
    if isinstance(target, MemoryIdentity):
        return target.tenant_id == tenant
    if isinstance(target, list | tuple):
        return any(getattr(s, "tenant_id", None) == tenant for s in target)
    # a claim over every scope (scope=None) is another memory's; release_claims names no scope
    return not (target is None and (args or "scope" in kw))


@contextlib.contextmanager
def _counting(
    store: VectorStore, calls: Counter[str], *names: str, tenant: str | None = None
) -> Iterator[None]:
    """Count the calls of the store methods ``names`` into ``calls`` (an instance attribute shadows
    each method meanwhile; the store's behaviour is unchanged). With ``tenant``, only the calls
    about that tenant's scopes count: on stores shared with other checks, their memories' indexing
    work (the queue is shared per store and embedder) is not this check's."""
    for name in names:
        method = getattr(role_object(store, name), name)

        async def counted(*args: Any, _name: str = name, _method: Any = method, **kw: Any) -> Any:
            if _ours(tenant, args, kw):
                calls[_name] += 1
            return await _method(*args, **kw)

        setattr(role_object(store, name), name, counted)
    try:
        yield
    finally:
        for name in names:
            delattr(role_object(store, name), name)


def _pending_rows(case: _Case, scope: MemoryIdentity, count: int) -> list[NewEntry]:
    return [
        NewEntry(
            id=f"p{n}", text=f"pending row {n}", role="user", metadata={}, consent=None,
            sequence=None, occurred_at=case.clock(), importance=1.0, lineage=None,
        )
        for n in range(count)
    ]  # fmt: skip


async def resuming_waits_for_a_claim_in_flight(kit: ConformanceKit) -> None:
    """``resume_indexing()`` counts the thread's rows another lane's claim took while its own claim
    found them leased: it waits for that claim to return and its rows to land (it returned 0 as
    soon as its own claim came back empty)."""
    case = _Case(kit)
    store = kit.vector_store
    scope = MemoryIdentity(tenant_id=case.tenant, resource_id="user-ada", thread_id="thread-1")
    await store.put_entries(scope, _pending_rows(case, scope, 5), now=case.clock())
    ledger = role_object(store, "claim_pending")  # what the memory's queue calls
    method = ledger.claim_pending
    held = asyncio.Event()  # the first claim that leased rows has them and is held
    release = asyncio.Event()
    calls: list[int] = []
    answered = asyncio.Event()  # a second claim came back

    async def claim(*args: Any, **kw: Any) -> Any:
        rows = await method(*args, **kw)
        calls.append(len(rows))
        if rows and not held.is_set():
            held.set()
            await release.wait()
        elif held.is_set():
            answered.set()
        return rows

    policy = IndexingPolicy(idle_poll_seconds=60, busy_poll_seconds=0.01)
    memory = case.memory(indexing=policy)
    ledger.claim_pending = claim
    try:
        await memory.__aenter__()  # the queue's start-up claim leases the 5 rows and is held
        await asyncio.wait_for(held.wait(), timeout=30)
        resumed = asyncio.ensure_future(memory.resume_indexing())
        await asyncio.wait_for(answered.wait(), timeout=30)  # its own claim found nothing
        release.set()
        count = await asyncio.wait_for(resumed, timeout=30)
    finally:
        release.set()
        del ledger.claim_pending
    _check(calls[:2] == [5, 0], f"claims answered {calls}")
    _check(count == 5, f"resume_indexing() counted {count} of the 5 rows indexed meanwhile")
    status = await memory.index_status([f"p{n}" for n in range(5)])
    _check(set(status.values()) == {"indexed"}, f"every row is indexed: {status}")
    await memory.aclose()


async def closing_after_indexed_writes_claims_and_releases_nothing(kit: ConformanceKit) -> None:
    """A memory whose ``remember(wait=True)`` calls stored every row indexed opens with one claim
    (rows left pending earlier) and closes with neither a claim nor a lease release; one that
    wrote pending rows -- more than its lease covers -- still drains them all at close and
    releases its leases."""
    case = _Case(kit)
    store = kit.vector_store
    calls: Counter[str] = Counter()
    policy = IndexingPolicy(idle_poll_seconds=60, busy_poll_seconds=0.01)
    names = ("claim_pending", "claim_pending_in", "release_claims")
    with _counting(store, calls, *names, tenant=case.tenant):
        async with case.memory(thread="indexed", indexing=policy) as memory:
            for n in range(3):
                result = await memory.remember({"text": f"indexed note {n}"}, wait=True)
                _check(result.pending == (), f"note {n} stored indexed")
        claims = calls["claim_pending"] + calls["claim_pending_in"]
        _check(claims == 1, f"{claims} claims for a memory that wrote indexed rows only")
        _check(calls["release_claims"] == 0, "nothing leased, nothing released")
        calls.clear()
        memory = case.memory(thread="pending", indexing=policy, limits={"embed_batch": 2})
        async with memory:
            written = await memory.remember([{"text": f"later note {n}"} for n in range(20)])
        status = await memory.index_status(written.accepted)
        _check(set(status.values()) == {"indexed"}, f"closing drained every row: {status}")
        _check(calls["release_claims"] == 1, f"leases released once: {calls}")


async def late_results_of_an_expired_lease_are_refused(kit: ConformanceKit) -> None:
    """A vector is stored only under the lease that is current: a worker whose lease ran out
    mid-embedding is refused, whoever claimed the row since -- another worker or itself."""
    case = _Case(kit)
    store, scope = kit.vector_store, case.memory().identity
    t0 = case.clock()
    await store.put_entries(scope, _pending_rows(case, scope, 1), now=t0)
    width = kit.embedder.dimensions
    slow, fast = np.ones(width, dtype=np.float32), np.zeros(width, dtype=np.float32)
    fast[0] = 1.0

    async def claim(worker: str, seconds: float) -> Any:
        (item,) = await store.claim_pending(
            scope, limit=1, worker_id=worker, lease_seconds=1.0, now=t0 + timedelta(seconds=seconds)
        )
        return item

    first = await claim("slow", 0)  # leased for 1 s; the embedding takes longer
    again = await claim("slow", 2)  # ran out; claimed again, by the same worker
    late = t0 + timedelta(seconds=2.5)
    stored = await store.complete_indexing([(first, slow)], worker_id="slow", now=late)
    _check(stored == 0, "the result of a lease that ran out is refused, even under a new one")
    taken = await claim("fast", 4)  # the second lease ran out too; another worker claims
    late = t0 + timedelta(seconds=4.5)
    stored = await store.complete_indexing([(again, slow)], worker_id="slow", now=late)
    _check(stored == 0, "the late worker's vectors are refused")
    stored = await store.complete_indexing([(taken, fast)], worker_id="fast", now=late)
    _check(stored == 1, "the current claimant's vectors are stored")
    request = SearchRequest(vector=fast, terms=frozenset(), limit=5, filter=RecallFilter(now=late))
    (hit,) = (await store.search(scope, request)).candidates
    _check(bool(np.allclose(hit.vector, fast)), "the row holds the current claimant's vector")


async def closing_returns_once_the_memorys_own_writes_are_embedded(kit: ConformanceKit) -> None:
    """``remember()`` without ``wait``, then ``aclose()``: a new memory on the thread recalls the
    write at once (50 rounds, the default indexing policy and the real clock, as a host runs it).
    Past ``drain_seconds`` closing leaves the rest pending, says how many, and fails their
    ``done``; the rows stay stored, pending, for the next memory."""
    case = _Case(kit)
    for round_ in range(50):
        thread = f"close-{round_}"
        writer = case.memory(thread=thread, indexing=IndexingPolicy(), clock=None)
        await writer.remember([{"id": "note", "text": f"the closing note number {round_}"}])
        left = await writer.aclose()
        _check(left == 0, f"round {round_}: closing left {left} rows pending")
        reader = case.memory(thread=thread, indexing=IndexingPolicy(), clock=None)
        found = await _ids(reader, f"closing note number {round_}", top_k=1)
        await reader.aclose()
        _check(found == ["note"], f"round {round_}: a new memory recalled {found} after aclose")

    gated = GatedEmbedder(kit.embedder)
    slow = case.memory(thread="slow", embedder=gated, indexing=replace(_POLICY, drain_seconds=0.2))
    written = await slow.remember([{"id": f"s{i}", "text": f"slow note {i}"} for i in range(3)])
    left = await slow.aclose()
    _check(left == 3, f"closing past drain_seconds says how many it left: {left}")
    await _raises(IndexingError, written.done, "done of a row left pending at close")
    gated.release()
    status = await kit.vector_store.index_status(slow.identity, ["s0", "s1", "s2"])
    _check(
        {state for state, _ in status.values()} == {"pending"} and len(status) == 3,
        f"rows left at close stay stored pending: {status}",
    )
    resumed = case.memory(thread="slow")
    _check(await resumed.resume_indexing() == 3, "the next memory embeds what was left")
    await resumed.aclose()


INDEXING_CHECKS: dict[str, Callable[[ConformanceKit], Awaitable[None]]] = {
    check.__name__: check
    for check in (
        memories_on_one_store_share_one_indexing_task,
        a_closing_memory_fails_only_its_own_watchers,
        a_thread_backlog_does_not_hold_up_another_thread,
        claim_pending_in_takes_turns_between_threads,
        resuming_waits_for_a_claim_in_flight,
        closing_after_indexed_writes_claims_and_releases_nothing,
        late_results_of_an_expired_lease_are_refused,
        closing_returns_once_the_memorys_own_writes_are_embedded,
    )
}
"""The checks of this module by name; part of ``CONFORMANCE_CHECKS``."""
