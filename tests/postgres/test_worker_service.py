"""``prism-memory worker``: several processes share the work, stop on SIGTERM without losing or
repeating a row, take turns between tenants and wake on NOTIFY instead of polling."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
import textwrap
import time
import uuid
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import func, select, text

from prism_memory import HashEmbedder, IndexingPolicy, MemoryIdentity, create_memory
from prism_memory.errors import ConfigurationError, EmbeddingModelMismatchError
from prism_memory.postgres import PostgresMemoryStores
from prism_memory.postgres.worker import IndexingWorker
from prism_memory.stores.base import NewEntry

pytestmark = pytest.mark.postgres

EMBEDDER_MODULE = textwrap.dedent(
    """
    import asyncio, os
    from prism_memory import HashEmbedder

    class Recording:
        dimensions = 16
        model = "hash-v1-16"  # HashEmbedder's vectors, so memories with one read them

        def __init__(self):
            self._inner = HashEmbedder(dimensions=16)

        async def embed(self, texts):
            with open(os.environ["PRISM_TEST_EMBED_LOG"], "a", encoding="utf-8") as log:
                log.write("".join(text + "\\n" for text in texts))
            await asyncio.sleep(float(os.environ.get("PRISM_TEST_EMBED_DELAY", "0")))
            return await self._inner.embed(texts)

    def factory():
        return Recording()
    """
)


def _entries(prefix: str, count: int, first_sequence: int | None = None) -> list[NewEntry]:
    now = datetime.now(UTC)
    return [
        NewEntry(
            id=f"{prefix}-{i}",
            text=f"{prefix} entry {i}",
            role="user",
            metadata={},
            consent=None,
            sequence=None if first_sequence is None else first_sequence + i,
            occurred_at=now,
            importance=1.0,
            lineage=None,
        )
        for i in range(count)
    ]


async def _write(stores: PostgresMemoryStores, tenant: str, entries: Sequence[NewEntry]) -> None:
    scope = MemoryIdentity(tenant_id=tenant, resource_id="user", thread_id="thread")
    await stores.vector_store.put_entries(scope, entries, now=datetime.now(UTC))


async def _count(stores: PostgresMemoryStores, status: str) -> int:
    entries = stores.vector_store.tables.entries
    async with stores.vector_store.engine.connect() as conn:
        query = select(func.count()).where(entries.c.status == status)
        return int((await conn.execute(query)).scalar_one())


async def _wait_for(predicate: Any, seconds: float, what: str) -> None:
    deadline = time.monotonic() + seconds
    while not await predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.05)


async def _start_worker(
    url: str, schema: str, tmp_path: Path, name: str, env: dict[str, str]
) -> tuple[asyncio.subprocess.Process, Path]:
    status = tmp_path / f"{name}.json"
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "prism_memory",
        "worker",
        "--url",
        url,
        "--schema",
        schema,
        "--embedder",
        "recording_embedder:factory",
        "--batch-size",
        "4",
        "--poll-seconds",
        "120",  # only NOTIFY can wake the workers within this test
        "--status-file",
        str(status),
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env=env,
    )
    assert process.stderr is not None
    while True:  # wait until it listens
        line = (await asyncio.wait_for(process.stderr.readline(), timeout=60)).decode()
        assert line, "the worker exited before listening"
        if "listening on prism_memory_pending" in line:
            return process, status


def _worker_env(tmp_path: Path, delay: str = "0") -> tuple[Path, dict[str, str]]:
    """The recording embedder's module in ``tmp_path``, its log, and a worker's environment."""
    (tmp_path / "recording_embedder.py").write_text(EMBEDDER_MODULE)
    log = tmp_path / "embedded.log"
    env = {
        **os.environ,
        "PYTHONPATH": str(tmp_path),
        "PRISM_TEST_EMBED_LOG": str(log),
        "PRISM_TEST_EMBED_DELAY": delay,
        "PYTHONUNBUFFERED": "1",
    }
    return log, env


@pytest.mark.slow
async def test_two_worker_processes_and_a_sigterm_embed_every_row_exactly_once(
    make_postgres_stores, postgres_url, tmp_path
):
    schema = f"pm_svc_{uuid.uuid4().hex[:10]}"
    stores = await make_postgres_stores(dimension=16, schema=schema)
    log, env = _worker_env(tmp_path, delay="0.05")
    first, first_status = await _start_worker(postgres_url, schema, tmp_path, "first", env)
    second, second_status = await _start_worker(postgres_url, schema, tmp_path, "second", env)
    try:
        tenants = ("acme", "globex", "initech")
        for tenant in tenants:
            await _write(stores, tenant, _entries(tenant, 40))
        expected = sorted(f"{tenant} entry {i}" for tenant in tenants for i in range(40))

        async def some_embedded() -> bool:
            return log.exists() and len(log.read_text().splitlines()) >= 30

        await _wait_for(some_embedded, 60, "the workers to start embedding (woken by NOTIFY)")
        first.send_signal(signal.SIGTERM)  # mid-batch: the embedder sleeps 50 ms per batch
        assert await asyncio.wait_for(first.wait(), timeout=60) == 0

        async def all_indexed() -> bool:
            return await _count(stores, "indexed") == len(expected)

        await _wait_for(all_indexed, 60, "every row to be indexed")
        second.send_signal(signal.SIGTERM)
        assert await asyncio.wait_for(second.wait(), timeout=60) == 0
    finally:
        for process in (first, second):
            if process.returncode is None:
                process.kill()
                await process.wait()
    assert sorted(log.read_text().splitlines()) == expected, "a row was embedded twice or never"
    assert await _count(stores, "pending") == 0
    counts = [json.loads(path.read_text()) for path in (first_status, second_status)]
    assert all(count["indexed"] > 0 for count in counts), counts
    assert sum(count["indexed"] for count in counts) == len(expected)
    assert second.stderr is not None
    logged = (await second.stderr.read()).decode()
    assert "batch " in logged
    assert "stopped:" in logged


@pytest.mark.slow
async def test_a_worker_only_memory_leaves_every_row_to_the_worker_process(
    make_postgres_stores, postgres_url, tmp_path
):
    schema = f"pm_wo_{uuid.uuid4().hex[:10]}"
    stores = await make_postgres_stores(dimension=16, schema=schema)
    log, env = _worker_env(tmp_path)
    in_process = _Recording()  # recall's query embedder: it must never see a remembered text
    worker, _ = await _start_worker(postgres_url, schema, tmp_path, "only", env)
    try:
        memory = create_memory(
            tenant_id="acme",
            resource_id="ada",
            thread_id="t1",
            embedder=in_process,
            vector_store=stores.vector_store,
            working_store=stores.working_store,
            indexing=IndexingPolicy(in_process=False),
        )
        first = await memory.remember([{"id": f"a{i}", "text": f"first {i}"} for i in range(10)])
        assert first.pending == tuple(f"a{i}" for i in range(10))
        report = await asyncio.wait_for(first.done, timeout=60)  # the worker embedded them
        assert report.indexed == tuple(sorted(f"a{i}" for i in range(10)))
        await memory.remember([{"id": f"b{i}", "text": f"second {i}"} for i in range(20)])
        started = time.monotonic()
        await memory.aclose()
        assert time.monotonic() - started < 1.0, "closing a worker-only memory waited"
        assert in_process.texts == [], "a worker-only memory embedded in-process"

        async def all_indexed() -> bool:
            return await _count(stores, "indexed") == 30

        await _wait_for(all_indexed, 60, "the worker to embed every row")
        reader = create_memory(
            tenant_id="acme",
            resource_id="ada",
            thread_id="t1",
            embedder=HashEmbedder(dimensions=16),  # hash-v1-16, the worker's model
            vector_store=stores.vector_store,
            working_store=stores.working_store,
        )
        hits = (await reader.recall("second 7", top_k=1)).hits
        assert [hit.id for hit in hits] == ["b7"]
        await reader.aclose()
        worker.send_signal(signal.SIGTERM)
        assert await asyncio.wait_for(worker.wait(), timeout=60) == 0
    finally:
        if worker.returncode is None:
            worker.kill()
            await worker.wait()
    expected = sorted([f"first {i}" for i in range(10)] + [f"second {i}" for i in range(20)])
    assert sorted(log.read_text().splitlines()) == expected, "a row was embedded twice or never"


class _Recording:
    def __init__(self) -> None:
        self._inner = HashEmbedder(dimensions=16)
        self.texts: list[str] = []

    @property
    def dimensions(self) -> int:
        return 16

    async def embed(self, texts: Sequence[str]) -> Any:
        self.texts.extend(texts)
        return await self._inner.embed(texts)


async def test_a_tenants_backlog_does_not_starve_another_tenant(make_postgres_stores):
    stores = await make_postgres_stores(dimension=16)
    await _write(stores, "big", _entries("big", 200, first_sequence=1))
    # written later and sequenced after every row of "big": a global oldest-first claim would
    # reach them only after all 200
    await _write(stores, "small", _entries("small", 4, first_sequence=10_000))
    embedder = _Recording()
    worker = IndexingWorker(stores.vector_store, embedder, batch_size=4, poll_seconds=60)
    stop = asyncio.Event()
    task = asyncio.create_task(worker.run(stop))

    async def all_indexed() -> bool:
        return await _count(stores, "indexed") == 204

    try:
        await _wait_for(all_indexed, 60, "every row to be indexed")
    finally:
        stop.set()
        await task
    small_positions = [i for i, text in enumerate(embedder.texts) if text.startswith("small")]
    assert len(small_positions) == 4
    # one claim (4 batches of 4) of "big", then "small"'s turn
    assert max(small_positions) < 40, small_positions
    assert worker.counts.indexed == 204
    assert worker.counts.batches >= 13


async def test_the_worker_wakes_on_notify_not_on_its_poll(make_postgres_stores):
    stores = await make_postgres_stores(dimension=16)
    embedder = _Recording()
    worker = IndexingWorker(stores.vector_store, embedder, batch_size=4, poll_seconds=600)
    await worker.start()  # listening when this returns
    try:
        await asyncio.sleep(0.5)  # it has looked once, found nothing and now waits (600 s poll)
        await _write(stores, "acme", _entries("late", 6))

        async def all_indexed() -> bool:
            return await _count(stores, "indexed") == 6

        await _wait_for(all_indexed, 30, "a NOTIFY to wake the worker")
    finally:
        await worker.stop()
    assert worker.counts.wakeups >= 1
    assert sorted(embedder.texts) == sorted(f"late entry {i}" for i in range(6))


async def test_a_lost_listen_connection_is_reopened(make_postgres_stores):
    stores = await make_postgres_stores(dimension=16)
    embedder = _Recording()
    worker = IndexingWorker(stores.vector_store, embedder, batch_size=4, poll_seconds=600)
    await worker.start()
    try:
        async with stores.vector_store.engine.connect() as conn:
            terminated = (
                await conn.execute(
                    text(
                        "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
                        "WHERE query LIKE 'LISTEN %prism_memory_pending%' "
                        "AND pid <> pg_backend_pid()"
                    )
                )
            ).scalar_one()
        assert terminated >= 1

        async def listening_again() -> bool:
            return worker.counts.reconnects == 1

        await _wait_for(listening_again, 30, "the worker to LISTEN again")
        await asyncio.sleep(0.3)  # the look for work after reconnecting has found nothing
        notified_before = worker.counts.wakeups
        await _write(stores, "acme", _entries("after", 5))

        async def all_indexed() -> bool:
            return await _count(stores, "indexed") == 5

        await _wait_for(all_indexed, 30, "a NOTIFY on the new connection")
    finally:
        await worker.stop()
    assert worker.counts.wakeups > notified_before, "the new connection received the NOTIFY"
    assert sorted(embedder.texts) == sorted(f"after entry {i}" for i in range(5))


async def test_a_worker_with_next_embedder_stores_the_new_models_vectors_first(
    make_postgres_stores,
):
    """During a model change a worker-only deployment needs no backfill for the rows the worker
    embeds: each batch's vectors of the shadow generation's model are stored before the batch
    is marked indexed (so a switch never finds a recallable row without one)."""
    stores = await make_postgres_stores(dimension=16)
    store = stores.vector_store
    old, new = HashEmbedder(dimensions=16), HashEmbedder(dimensions=8)
    await store.start_generation(
        primary=old.model, primary_width=16, model=new.model, width=8, now=datetime.now(UTC)
    )
    with pytest.raises(ConfigurationError):
        IndexingWorker(store, old, next_embedder=HashEmbedder(dimensions=16))
    await _write(stores, "acme", _entries("mid-migration", 10))
    worker = IndexingWorker(store, old, batch_size=4, poll_seconds=60, next_embedder=new)
    stop = asyncio.Event()
    task = asyncio.create_task(worker.run(stop))

    async def all_indexed() -> bool:
        return await _count(stores, "indexed") == 10

    try:
        await _wait_for(all_indexed, 60, "every row to be indexed")
    finally:
        stop.set()
        await task
    progress = await store.generation_progress(new.model, now=datetime.now(UTC))
    assert (progress.entries, progress.current) == (10, 10)
    switched = await store.switch_generation(new.model, force=False, now=datetime.now(UTC))
    assert switched.active


async def test_a_worker_of_either_model_starts_in_the_middle_of_a_promotion(make_postgres_stores):
    """Half-way through a promotion the entries' own vectors are of both models: a worker of
    either generation's model starts (the check sees one model change, not a foreign model), a
    worker of a third model is still refused."""
    stores = await make_postgres_stores(dimension=None)
    store = stores.vector_store
    old, new = HashEmbedder(dimensions=16), HashEmbedder(dimensions=8)
    now = datetime.now(UTC)
    scope = MemoryIdentity(tenant_id="acme", resource_id="ada", thread_id="t1")
    entries = _entries("before", 6)
    vectors = [old.embed_one(entry.text) for entry in entries]
    await store.put_entries(scope, entries, now=now, vectors=vectors, model=old.model)
    await store.start_generation(
        primary=old.model, primary_width=16, model=new.model, width=8, now=now
    )
    claimed = await store.claim_generation(
        new.model, limit=10, worker_id="b", lease_seconds=60, now=now
    )
    await store.store_generation_vectors(
        new.model, [(c, new.embed_one(c.text)) for c in claimed], now=now
    )
    await store.switch_generation(new.model, force=False, now=now)
    step = await store.promote_generation(new.model, limit=3, now=now)
    assert (step.moved, step.promoted) == (3, False)
    assert await store.embedding_models(None) == {old.model, new.model}

    for embedder in (old, new):
        await IndexingWorker(store, embedder, poll_seconds=60).check_model()
    with pytest.raises(EmbeddingModelMismatchError):
        await IndexingWorker(store, HashEmbedder(dimensions=4), poll_seconds=60).check_model()
