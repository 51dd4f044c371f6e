"""Stateful property test: random governance histories against a plain Python reference model.

Random sequences of remember (new ids and replays), set_consent, correct, forget (named ids or the
whole thread), hold, share (an empty share revokes) and retention run on a real memory; after every step, recall, the
context provider, export and a child thread's shared recall must show exactly the entries the
model allows. The model restates the documented rules (docs/semantics.md) in plain Python: it
shares no code with the library.

:class:`ConcurrentGovernanceMachine` runs the same calls from two memories on one thread at once
(remember with lineage, forget, set_consent, correct, re-remember), interleaved after a random
number of event-loop turns; it checks the safety rule alone -- nothing derived from a forgotten,
revoked or corrected source is recallable, and nothing derived from a forgotten source is even
stored -- since which of two racing calls went first is the store's to decide.

Budget: the ``ci`` profile (default) runs 300 examples of up to 20 steps in memory and 30 of up
to 15 steps on PostgreSQL; ``PRISM_HYPOTHESIS_PROFILE=slow`` runs 1000 examples of up to 40 steps
on both.
"""

from __future__ import annotations

import asyncio
import os
import threading
import uuid
from collections.abc import Callable, Coroutine
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    rule,
    run_state_machine_as_test,
)
from sqlalchemy import text

from prism_memory import (
    CapExceededError,
    HashEmbedder,
    InMemoryVectorStore,
    InMemoryWorkingStore,
    MemoryIdentity,
    NotFoundError,
    ValidationError,
    create_memory,
)
from prism_memory.indexing import IndexingPolicy
from prism_memory.models import MemoryRecord
from prism_memory.postgres import create_postgres_memory_stores
from prism_memory.postgres._engine import create_engine
from prism_memory.stores.base import RecallFilter, SearchRequest, VectorStore, WorkingStore
from prism_memory.testing import ManualClock

settings.register_profile(
    "ci",
    max_examples=300,
    stateful_step_count=20,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)
settings.register_profile(
    "slow",
    max_examples=1000,
    stateful_step_count=40,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)
PROFILE = settings.get_profile(os.environ.get("PRISM_HYPOTHESIS_PROFILE", "ci"))
POSTGRES_PROFILE = (
    settings(PROFILE, max_examples=30, stateful_step_count=15)
    if PROFILE.max_examples <= 300
    else PROFILE
)
"""The ``ci`` budget on PostgreSQL: 30 examples of up to 15 steps (about half a minute)."""
CONCURRENT_PROFILE = (
    settings(PROFILE, max_examples=100, stateful_step_count=15)
    if PROFILE.max_examples <= 300
    else PROFILE
)
"""The ``ci`` budget of the in-memory race machine (each step runs two calls at once)."""

IDS = ("a", "b", "c")  # few ids: histories revisit the same entries and their lineage
START = datetime(2030, 1, 1, tzinfo=UTC)
FAST = IndexingPolicy(busy_poll_seconds=0.005, idle_poll_seconds=0.05)


# ---- the reference model -------------------------------------------------------------------


@dataclass
class Entry:
    sources: tuple[str, ...]
    visible: bool = True
    held: bool = False
    written: int = 0
    occurred: int = 0


@dataclass
class Model:
    """What the documented rules say the memory holds. Times are integer seconds."""

    entries: dict[str, Entry] = field(default_factory=dict)
    marks: dict[str, dict[tuple[str, str], int]] = field(default_factory=dict)
    """entry id -> (cause, reason) -> time, kept after the entry is deleted."""
    shared: tuple[str, ...] = ()

    def dependents(self, roots: list[str]) -> list[str]:
        found: list[str] = []
        frontier = set(roots)
        seen = set(roots)
        while frontier:
            fresh = sorted(
                i for i, e in self.entries.items() if i not in seen and frontier & set(e.sources)
            )
            found += fresh
            seen |= set(fresh)
            frontier = set(fresh)
        return found

    def mark(self, ids: list[str], cause: str, reason: str, now: int) -> None:
        for entry_id in ids:
            self.marks.setdefault(entry_id, {})[(cause, reason)] = now

    def invalidated(self, entry_id: str, entry: Entry) -> bool:
        for target in (entry_id, *entry.sources):
            for (_, reason), when in self.marks.get(target, {}).items():
                if reason != "corrected" or when > entry.written:
                    return True
        return False

    def allowed(self) -> set[str]:
        return {
            i
            for i, e in self.entries.items()
            if e.visible and not e.held and not self.invalidated(i, e)
        }

    def delete(self, roots: list[str], reason: str, now: int) -> int:
        deps = self.dependents(roots)
        for root in roots:
            self.mark([root], root, reason, now)
        for dep in deps:  # each dependent is marked by (one of) the roots it derives from
            self.mark([dep], "?", reason, now)
        doomed = [*roots, *(d for d in deps if not self.entries[d].held)]
        for entry_id in doomed:
            del self.entries[entry_id]
        return len(doomed)


def _run(loop: asyncio.AbstractEventLoop, coro: Coroutine[Any, Any, Any]) -> Any:
    return loop.run_until_complete(coro)


class GovernanceMachine(RuleBasedStateMachine):
    """One history on one backend; ``open_stores`` is set by the test."""

    loop: asyncio.AbstractEventLoop
    open_stores: Callable[[], tuple[VectorStore, WorkingStore]]

    def __init__(self) -> None:
        super().__init__()
        self.model = Model()
        self.seconds = 0
        vector_store, working_store = self.open_stores()
        tenant = f"t-{uuid.uuid4().hex[:10]}"
        common: dict[str, Any] = {
            "tenant_id": tenant,
            "resource_id": "r",
            "embedder": HashEmbedder(dimensions=64),
            "vector_store": vector_store,
            "working_store": working_store,
            "clock": self.now,
            "indexing": FAST,
        }
        self.memory = create_memory(thread_id="parent", **common)
        self.child = create_memory(thread_id="child", **common)
        self.identity = MemoryIdentity(tenant_id=tenant, resource_id="r", thread_id="parent")

    def now(self) -> datetime:
        return START + timedelta(seconds=self.seconds)

    def tick(self, seconds: int = 1) -> int:
        self.seconds += seconds
        return self.seconds

    def call(self, coro: Coroutine[Any, Any, Any]) -> tuple[Any, type[BaseException] | None]:
        try:
            return _run(self.loop, coro), None
        except (ValidationError, NotFoundError) as exc:
            return None, type(exc)

    def teardown(self) -> None:
        _run(self.loop, self.memory.aclose())
        _run(self.loop, self.child.aclose())

    # ---- rules --------------------------------------------------------------------------

    @initialize()
    def seed(self) -> None:
        """Every history starts with a source and an entry derived from it."""
        self.remember("a", [], 0)
        self.remember("b", ["a"], 0)

    @rule(
        entry_id=st.sampled_from(IDS),
        sources=st.lists(st.sampled_from(IDS), max_size=2, unique=True),
        version=st.integers(0, 3),
    )
    def remember(self, entry_id: str, sources: list[str], version: int) -> None:
        """A new entry, or a replay (other text, visible consent) of an existing id."""
        now = self.tick()
        model = self.model
        sources = [s for s in sources if s != entry_id]
        expected: type[BaseException] | None = None
        if any(s not in model.entries for s in sources):
            expected = ValidationError
        entry: dict[str, Any] = {
            "id": entry_id,
            "text": f"{entry_id} note version {version}",
            "consent": {"source": "user", "visible": True},
        }
        if sources:
            entry["lineage"] = {"source_ids": sources}
        _, error = self.call(self.memory.remember(entry, wait=True))
        assert error is expected, (error, expected)
        if expected is None and entry_id not in model.entries:
            model.entries[entry_id] = Entry(tuple(sources), written=now, occurred=now)
            model.marks.pop(entry_id, None)  # an earlier, forgotten entry's
            inherited = {  # its sources' marks that invalidate it become its own
                key: when
                for source in sources
                for key, when in model.marks.get(source, {}).items()
                if key[1] != "corrected" or when > now
            }
            if inherited:
                model.marks[entry_id] = inherited

    @rule(entry_id=st.sampled_from(IDS), visible=st.booleans())
    def set_consent(self, entry_id: str, visible: bool) -> None:
        now = self.tick()
        model = self.model
        _, error = self.call(self.memory.set_consent(entry_id, visible=visible))
        entry = model.entries.get(entry_id)
        if entry is None:
            assert error is NotFoundError
            return
        assert error is None
        if not visible and entry.visible:
            model.mark([entry_id, *model.dependents([entry_id])], entry_id, "revoked", now)
        if visible and not entry.visible:
            for marks in model.marks.values():
                marks.pop((entry_id, "revoked"), None)
        entry.visible = visible

    @rule(entry_id=st.sampled_from(IDS))
    def revoke_then_grant(self, entry_id: str) -> None:
        """A host's consent toggle: revoke, then grant again."""
        self.set_consent(entry_id, False)
        self.set_consent(entry_id, True)

    @rule(entry_id=st.sampled_from(IDS), version=st.integers(4, 6))
    def correct(self, entry_id: str, version: int) -> None:
        now = self.tick()
        model = self.model
        _, error = self.call(self.memory.correct(entry_id, f"{entry_id} note fixed {version}"))
        entry = model.entries.get(entry_id)
        if entry is None:
            assert error is NotFoundError
            return
        assert error is None
        model.mark([entry_id, *model.dependents([entry_id])], entry_id, "corrected", now)
        entry.written = now

    @rule(ids=st.lists(st.sampled_from(IDS), min_size=1, max_size=2, unique=True))
    def hold(self, ids: list[str]) -> None:
        now = self.tick()
        model = self.model
        result, error = self.call(self.memory.forget(ids=ids, hold=True))
        assert (result, error) == (0, None)
        targets = [i for i in ids if i in model.entries]
        if targets:
            for target in targets:
                model.mark([target], target, "held", now)
                model.entries[target].held = True
            model.mark(model.dependents(targets), "?", "held", now)

    @rule(
        ids=st.lists(st.sampled_from(IDS), min_size=1, max_size=2, unique=True),
        whole_thread=st.integers(0, 4),
    )
    def forget(self, ids: list[str], whole_thread: int) -> None:
        """Forget named ids, or (one time in five) the whole thread."""
        now = self.tick()
        model = self.model
        if whole_thread == 0:
            result, error = self.call(self.memory.forget())
            targets = sorted(i for i, e in model.entries.items() if not e.held)
        else:
            result, error = self.call(self.memory.forget(ids=ids))
            targets = [i for i in ids if i in model.entries]
        assert error is None
        expected = model.delete(targets, "forgotten", now) if targets else 0
        assert result == expected, (result, expected)

    @rule(days=st.integers(0, 2))
    def retention(self, days: int) -> None:
        now = self.tick(days * 86_400 + 1)
        model = self.model
        result, error = self.call(self.memory.apply_retention(max_age_days=1))
        assert error is None
        cutoff = now - 86_400
        doomed = sorted(
            (e.occurred, i) for i, e in model.entries.items() if not e.held and e.occurred < cutoff
        )
        expected = model.delete([i for _, i in doomed], "retention", now) if doomed else 0
        assert result is not None
        assert result.deleted == expected, (result, expected)

    @rule(ids=st.lists(st.sampled_from(IDS), max_size=3, unique=True))
    def share(self, ids: list[str]) -> None:
        """Share named entries with the child thread; no ids revokes the grant."""
        self.tick()
        model = self.model
        _, error = self.call(self.memory.share_with("child", ids))
        if any(i not in model.entries for i in ids):
            assert error is NotFoundError
            return
        assert error is None
        model.shared = tuple(ids)

    # ---- what every reader must show ----------------------------------------------------

    @invariant()
    def readers_show_exactly_what_is_allowed(self) -> None:
        allowed = self.model.allowed()
        query = "note version fixed " + " ".join(IDS)
        recalled = _run(self.loop, self.memory.recall(query, top_k=32))
        assert {hit.id for hit in recalled.hits} == allowed
        blocks = _run(self.loop, self.memory.context_provider().provide(query))
        injected = {i for block in blocks for i in block.entry_ids}
        assert injected == allowed
        page = _run(self.loop, self.memory.export_memory(identity=self.identity))
        assert {entry["id"] for entry in page.entries} == allowed
        if self.model.shared:
            seen = _run(
                self.loop, self.child.recall(query, top_k=32, share_from_parent_thread_id="parent")
            )
            assert {hit.id for hit in seen.hits} == allowed & set(self.model.shared)


SOURCES = ("fact alpha", "fact beta", "fact gamma")
"""The words of the source entries: remembered by digest id, so remembering them again after a
forget reuses the id."""
OPS = ("derive", "forget", "revoke", "grant", "correct", "remember_source")


class ConcurrentGovernanceMachine(RuleBasedStateMachine):
    """Two memories on one thread race governance calls; the safety rule holds after every step."""

    loop: asyncio.AbstractEventLoop
    open_stores: Callable[[], tuple[VectorStore, WorkingStore]]

    def __init__(self) -> None:
        super().__init__()
        self.store, working_store = self.open_stores()
        self.clock = ManualClock(START)
        common: dict[str, Any] = {
            "tenant_id": f"t-{uuid.uuid4().hex[:10]}",
            "resource_id": "r",
            "thread_id": "shared",
            "embedder": HashEmbedder(dimensions=64),
            "vector_store": self.store,
            "working_store": working_store,
            "clock": self.clock,
            "indexing": FAST,
        }
        self.memories = (create_memory(**common), create_memory(**common))
        self.identity = self.memories[0].identity
        self.source_ids: list[str] = []
        self.derived = 0
        self.lives: dict[str, int] = {}
        """id -> how many forget calls that named it (or an ancestor of it) have finished."""
        self.born: dict[str, dict[str, int]] = {}
        """derived id -> the life of each lineage source when its remember call started."""

    def teardown(self) -> None:
        for memory in self.memories:
            _run(self.loop, memory.aclose())

    def known(self) -> list[str]:
        return [*self.source_ids, *(f"d{n}" for n in range(self.derived))]

    @initialize()
    def seed(self) -> None:
        for words in SOURCES:
            self.source_ids.append(
                _run(self.loop, self.memories[0].remember({"text": words}, wait=True)).accepted[0]
            )

    async def op(self, memory_at: int, op: str, pick: int, turns: int) -> None:
        """One call; ``turns`` event-loop turns first. Refusals the rules allow are swallowed."""
        for _ in range(turns):
            await asyncio.sleep(0)
        memory = self.memories[memory_at]
        known = self.known()
        target = known[pick % len(known)]
        try:
            if op == "derive":
                self.derived += 1
                entry_id = f"d{self.derived - 1}"
                sources = sorted({target, known[(pick * 7 + 1) % len(known)]} - {entry_id})
                lives = {s: self.lives.get(s, 0) for s in sources}
                text = f"derived zq{entry_id} from " + " ".join(sources)
                await memory.remember(
                    {"id": entry_id, "text": text, "lineage": {"source_ids": sources}}, wait=True
                )
                self.born[entry_id] = lives
            elif op == "forget":
                await memory.forget(ids=[target])
                self.lives[target] = self.lives.get(target, 0) + 1
            elif op in ("revoke", "grant"):
                await memory.set_consent(target, visible=op == "grant")
            elif op == "correct":
                await memory.correct(target, f"corrected zq{target} {self.clock().isoformat()}")
            else:
                await memory.remember({"text": SOURCES[pick % len(SOURCES)]}, wait=True)
        except (NotFoundError, ValidationError, CapExceededError):
            pass  # a source or target that was (just) forgotten: refused, nothing written

    @rule(
        first=st.sampled_from(OPS),
        second=st.sampled_from(OPS),
        picks=st.tuples(st.integers(0, 40), st.integers(0, 40)),
        turns=st.tuples(st.integers(0, 6), st.integers(0, 6)),
    )
    def race(self, first: str, second: str, picks: tuple[int, int], turns: tuple[int, int]) -> None:
        self.clock.advance(seconds=1)

        async def both() -> None:
            await asyncio.gather(
                self.op(0, first, picks[0], turns[0]), self.op(1, second, picks[1], turns[1])
            )

        _run(self.loop, both())

    @invariant()
    def nothing_derived_from_a_dead_source_comes_back(self) -> None:
        stored = _run(self.loop, self.store.get_entries(self.identity, self.known()))
        by_id = {record.id: record for record in stored}
        for record in stored:  # stored at all only while every source lives the life it knew
            for source, life in self.born.get(record.id, {}).items():
                assert self.lives.get(source, 0) == life, (record.id, source)
                assert source in by_id, (record.id, source)
        request = SearchRequest(
            vector=np.ones(64, dtype=np.float32),
            terms=frozenset(),
            limit=1024,
            filter=RecallFilter(now=self.clock()),
        )
        found = _run(self.loop, self.store.search(self.identity, request))
        for candidate in found.candidates:
            self.assert_ancestry_alive(candidate.record, by_id)

    def assert_ancestry_alive(
        self,
        record: MemoryRecord,
        by_id: dict[str, MemoryRecord],
        recalled: MemoryRecord | None = None,
    ) -> None:
        """A recallable entry's sources, transitively: stored, visible, and not corrected after
        the recalled entry was written (an entry written after a correction may derive from it)."""
        recalled = recalled or record
        for source_id in record.lineage.source_ids if record.lineage else ():
            source = by_id[source_id]
            consent = source.effective_consent
            assert consent.visible, (recalled.id, source_id)
            assert consent.revoked_at is None, (recalled.id, source_id)
            corrected_after = source.revision > 1 and source.written_at > recalled.written_at
            assert not corrected_after, (recalled.id, source_id)
            self.assert_ancestry_alive(source, by_id, recalled)


def _in_thread(body: Callable[[asyncio.AbstractEventLoop], None]) -> None:
    """Run ``body`` with a private event loop in a helper thread (the test session's loop stays
    untouched), re-raising its failure here."""
    failure: list[BaseException] = []

    def target() -> None:
        loop = asyncio.new_event_loop()
        try:
            body(loop)
        except BaseException as exc:  # noqa: BLE001 - re-raised in the caller's thread
            failure.append(exc)
        finally:
            loop.close()

    worker = threading.Thread(target=target, name="prism-governance-state")
    worker.start()
    worker.join()
    if failure:
        raise failure[0]


def _run_in_memory(machine: type[Any], profile: settings) -> None:
    """Run ``machine`` on fresh in-memory stores (one per example)."""

    def body(loop: asyncio.AbstractEventLoop) -> None:
        class OnMemory(machine):  # type: ignore[misc, valid-type]
            pass

        OnMemory.loop = loop
        OnMemory.open_stores = staticmethod(lambda: (InMemoryVectorStore(), InMemoryWorkingStore()))
        run_state_machine_as_test(OnMemory, settings=profile)

    _in_thread(body)


def _run_on_postgres(
    machine: type[Any], postgres_url: str, prefix: str, pooler_url: str | None = None
) -> None:
    """Run ``machine`` on one fresh PostgreSQL schema (each example its own tenant); with
    ``pooler_url``, migrated on ``postgres_url`` and run through that transaction pooler."""
    schema = f"{prefix}_{uuid.uuid4().hex[:10]}"

    def body(loop: asyncio.AbstractEventLoop) -> None:
        engine = create_engine(postgres_url)
        stores = _run(
            loop, create_postgres_memory_stores(engine=engine, schema=schema, dimension=64)
        )
        if pooler_url is not None:
            stores = _run(
                loop,
                create_postgres_memory_stores(
                    pooler_url, schema=schema, dimension=64, pooling="transaction"
                ),
            )
        try:

            class OnPostgres(machine):  # type: ignore[misc, valid-type]
                pass

            OnPostgres.loop = loop
            OnPostgres.open_stores = staticmethod(
                lambda: (stores.vector_store, stores.working_store)
            )
            run_state_machine_as_test(OnPostgres, settings=POSTGRES_PROFILE)
        finally:

            async def drop() -> None:
                await stores.close()
                async with engine.begin() as conn:
                    await conn.execute(text(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE'))
                await engine.dispose()

            _run(loop, drop())

    _in_thread(body)


def test_governance_state_machine_in_memory() -> None:
    _run_in_memory(GovernanceMachine, PROFILE)


@pytest.mark.postgres
def test_governance_state_machine_on_postgres(postgres_url: str) -> None:
    _run_on_postgres(GovernanceMachine, postgres_url, "pm_state")


def test_concurrent_governance_in_memory() -> None:
    _run_in_memory(ConcurrentGovernanceMachine, CONCURRENT_PROFILE)


@pytest.mark.postgres
def test_concurrent_governance_on_postgres(postgres_url: str) -> None:
    _run_on_postgres(ConcurrentGovernanceMachine, postgres_url, "pm_race")


@pytest.mark.postgres
def test_concurrent_governance_behind_pgbouncer(postgres_url: str, pgbouncer_url: str) -> None:
    """The same races through a real PgBouncer in transaction mode (issue 36)."""
    _run_on_postgres(ConcurrentGovernanceMachine, postgres_url, "pm_race_pool", pgbouncer_url)
