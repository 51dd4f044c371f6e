"""``prism-memory models``: a model change without downtime, as an operator runs it against a real
PostgreSQL (the command-line's only backend) -- start, backfill, compare, switch (refused while
entries lack a vector or the gate fails, unless --force), rollback, drop; ``stats`` and ``doctor``
show the generations."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys

import pytest

from prism_memory import HashEmbedder, create_memory
from prism_memory._clock import utcnow
from prism_memory.cli import main
from prism_memory.generations import _backfill
from prism_memory.postgres import create_postgres_memory_stores

pytestmark = pytest.mark.postgres

NEW = "hash-v1-64"  # prism_memory:HashEmbedder loaded without a pinned width
OLD_SPEC, NEW_SPEC = "prism_memory:HashEmbedder", "prism_memory:HashEmbedder"


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "PRISM_MEMORY_DATABASE_URL"}
    return subprocess.run(
        [sys.executable, "-m", "prism_memory", *args],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        env=env,
    )


async def _remember(
    url: str, schema: str, items: list[tuple[str, str]], *, dimension: int | None = 16
) -> None:
    """acme/ada/t1's entries, embedded by HashEmbedder(16) in a table pinned to vector(16) (or
    to the ``dimension`` given: ``None``, unpinned)."""
    stores = await create_postgres_memory_stores(url, schema=schema, dimension=dimension)
    try:
        async with create_memory(
            tenant_id="acme",
            resource_id="ada",
            thread_id="t1",
            embedder=HashEmbedder(dimensions=16),
            vector_store=stores.vector_store,
        ) as memory:
            await memory.remember(
                [{"id": i, "text": t, "consent": {"source": "user"}} for i, t in items], wait=True
            )
    finally:
        await stores.close()


FACTS = [
    ("e0", "Ada keeps three beehives behind the barn"),
    ("e1", "The budget review moved to Thursday"),
    ("e2", "Grace drinks green tea every morning"),
    ("e3", "Linus rides a red bicycle to work"),
    ("e4", "The cat sleeps on the warm keyboard"),
]


def _queries(path, items: list[tuple[str, str]]) -> str:
    rows = [
        {"tenant_id": "acme", "resource_id": "ada", "thread_id": "t1", "query": text}
        | {"expected_ids": [id_]}
        for id_, text in items
    ]
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return str(path)


async def test_a_model_change_from_start_to_drop(postgres_url, schema, tmp_path):
    await _remember(postgres_url, schema, FACTS)
    at = ["--url", postgres_url, "--schema", schema]
    done = cli("models", "status", *at)
    assert done.returncode == 0, done.stderr
    assert "no generations" in done.stdout

    done = cli("models", "start", *at, "--embedder", OLD_SPEC, "--next-embedder", NEW_SPEC)
    assert done.returncode == 0, done.stderr
    assert f"started generation {NEW} (width 64)" in done.stdout
    done = cli("models", "switch", NEW, *at)  # nothing backfilled yet
    assert done.returncode == 1
    assert done.stderr.startswith("error: ")
    assert "5" in done.stderr

    done = cli("models", "backfill", *at, "--next-embedder", NEW_SPEC, "--batch-size", "2")
    assert done.returncode == 0, done.stderr
    assert f"stored 5 vectors of {NEW}" in done.stdout
    assert "0 entries still without one" in done.stdout
    queries = _queries(tmp_path / "q.jsonl", FACTS)
    gate = ["--embedder", OLD_SPEC, "--next-embedder", NEW_SPEC, "--queries", queries]
    done = cli("models", "compare", *at, *gate, "--k", "1")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "recall@1 drop" in done.stdout
    assert "ok: the gate passes" in done.stdout

    # a write after the backfill, by a host without next_embedder: the new model lacks it
    await _remember(postgres_url, schema, [("late", "Barbara plays the cello on Sundays")])
    late = _queries(tmp_path / "late.jsonl", [("late", "who plays the cello")])
    gate[-1] = late
    done = cli("models", "switch", NEW, *at, *gate, "--k", "1")
    assert done.returncode == 1
    assert "refused: recall@1 drops by 1.000, more than 0.020" in done.stdout
    assert "the switch was refused by the gate (--force to switch anyway)" in done.stdout
    assert "cello" not in done.stdout + done.stderr
    done = cli("models", "switch", NEW, *at, *gate, "--k", "1", "--force")
    assert done.returncode == 0, done.stderr
    assert f"recall now answers from {NEW} (shadow)" in done.stdout

    done = cli("doctor", *at, "--width", "16")  # the forced switch's backlog is a problem
    assert done.returncode == 1
    assert (
        f"generations: hash-v1-16 (primary, width 16): 6/6 entries; {NEW} (shadow, active, "
        "width 64): 5/6 entries"
    ) in done.stdout
    assert "problem: 1 indexed entries have no vector of the active model" in done.stdout
    done = cli("stats", *at)
    assert done.returncode == 0, done.stderr
    assert f"generation {NEW} (shadow, active, width 64)" in done.stdout
    assert "5/6 entries" in done.stdout
    done = cli("models", "backfill", *at, "--next-embedder", NEW_SPEC)
    assert "stored 1 vectors" in done.stdout
    done = cli("doctor", *at, "--width", "16")
    assert done.returncode == 0, done.stdout
    assert "(shadow, active, width 64): 6/6 entries" in done.stdout

    done = cli("models", "drop", NEW, *at, "--yes")  # the active one: refused
    assert done.returncode == 1
    done = cli("models", "rollback", *at)
    assert done.returncode == 0, done.stderr
    assert "recall answers from hash-v1-16 again (the primary)" in done.stdout
    done = cli("models", "status", *at)
    lines = done.stdout.splitlines()
    assert lines[0].startswith("hash-v1-16: primary, active, width 16, 6/6 vectors, 0 missing, ")
    assert lines[1].startswith(f"{NEW}: shadow, width 64, 6/6 vectors, 0 missing, 0 leased, ")
    done = cli("models", "drop", NEW, *at, "--yes")
    assert done.returncode == 0, done.stderr
    assert f"dropped {NEW}: 6 vectors deleted" in done.stdout
    assert NEW not in cli("models", "status", *at).stdout


async def test_switch_with_a_max_lag_passes_over_entries_written_within_it(postgres_url, schema):
    """Issue 46 item 12: a write after the backfill holds the strict switch back (exit 1); with
    --max-lag the entries written within it do not, and the command says how many are left out
    of recall until the backfill reaches them."""
    await _remember(postgres_url, schema, FACTS)
    at = ["--url", postgres_url, "--schema", schema]
    assert cli("models", "start", *at, "--embedder", OLD_SPEC, "--next-embedder", NEW_SPEC)
    assert cli("models", "backfill", *at, "--next-embedder", NEW_SPEC).returncode == 0
    await _remember(postgres_url, schema, [("late", "Barbara plays the cello on Sundays")])
    done = cli("models", "switch", NEW, *at)
    assert done.returncode == 1
    assert done.stderr.startswith("error: 1 indexed entries have no vector of the model")
    done = cli("models", "switch", NEW, *at, "--max-lag", "-1")
    assert done.returncode == 1
    assert "from 0 to 3600" in done.stderr
    assert "-1" not in done.stderr
    done = cli("models", "switch", NEW, *at, "--max-lag", "3600")
    assert done.returncode == 0, done.stderr
    assert f"recall now answers from {NEW} (shadow)" in done.stdout
    assert f"1 indexed entries have no vector of {NEW} yet and are not recalled" in done.stdout


async def test_promote_retires_the_old_model_of_another_width(postgres_url, schema):
    await _remember(postgres_url, schema, FACTS, dimension=None)
    at = ["--url", postgres_url, "--schema", schema]
    # `models start` loads HashEmbedder at the table's width: an unpinned one has none, so the
    # generation is registered from Python
    stores = await create_postgres_memory_stores(postgres_url, schema=schema)
    try:
        await stores.vector_store.start_generation(
            primary="hash-v1-16", primary_width=16, model=NEW, width=64, now=utcnow()
        )
    finally:
        await stores.close()
    done = cli("models", "backfill", *at, "--next-embedder", NEW_SPEC)
    assert done.returncode == 0, done.stderr
    done = cli("models", "promote", NEW, *at)  # not switched to yet
    assert done.returncode == 1
    assert "switch to it first" in done.stderr
    assert cli("models", "switch", NEW, *at).returncode == 0

    stores = await create_postgres_memory_stores(postgres_url, schema=schema)
    try:  # one batch: the entries' own vectors are of both models, which doctor tells
        step = await stores.vector_store.promote_generation(NEW, limit=2, now=utcnow())
        assert (step.moved, step.promoted) == (2, False)
    finally:
        await stores.close()
    done = cli("doctor", *at)
    assert done.returncode == 0, done.stdout
    assert (
        f"the entries' own vectors are of hash-v1-16, {NEW} (a promotion is not finished: "
        f"`prism-memory models promote {NEW}`)"
    ) in done.stdout

    done = cli("models", "promote", NEW, *at, "--batch-size", "2")
    assert done.returncode == 0, done.stderr
    assert f"{NEW} is the primary generation (3 entries moved" in done.stdout
    assert "`prism-memory models drop hash-v1-16` deletes them" in done.stdout
    lines = cli("models", "status", *at).stdout.splitlines()
    assert lines[0].startswith(f"{NEW}: primary, active, width 64, 5/5 vectors, 0 missing")
    assert lines[1].startswith("hash-v1-16: shadow, width 16, 5/5 vectors, 0 missing")
    # issue 46 item 11: an old-model writer (no next_embedder) adds an entry in a new thread
    # after the promotion; promoting again (already the primary) must not say "done" (exit 0),
    # or a script "promote until 0, then drop" fails at drop
    stores = await create_postgres_memory_stores(postgres_url, schema=schema)
    try:
        async with create_memory(
            tenant_id="acme",
            resource_id="ada",
            thread_id="t-old",
            embedder=HashEmbedder(dimensions=16),
            vector_store=stores.vector_store,
        ) as memory:
            await memory.remember([{"id": "old", "text": "written by the old model"}], wait=True)
    finally:
        await stores.close()
    done = cli("models", "promote", NEW, *at)
    assert done.returncode == 1, done.stdout
    assert f"1 indexed entries have no vector of {NEW} yet" in done.stdout
    assert cli("models", "drop", "hash-v1-16", *at, "--yes").returncode == 1  # still needed
    done = cli("models", "backfill", *at, "--next-embedder", NEW_SPEC)
    assert done.returncode == 0, done.stderr
    done = cli("models", "promote", NEW, *at)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "1/1" in done.stderr, done.stderr  # the bar: moved of the entries to move

    done = cli("models", "drop", "hash-v1-16", *at, "--yes")
    assert done.returncode == 0, done.stderr
    assert "dropped hash-v1-16: 6 vectors deleted" in done.stdout
    assert cli("models", "status", *at).stdout.startswith(f"{NEW}: primary, active, width 64")
    assert "own vectors" not in cli("doctor", *at).stdout

    # a host of the new model alone remembers and recalls on the promoted store
    stores = await create_postgres_memory_stores(postgres_url, schema=schema)
    try:
        async with create_memory(
            tenant_id="acme",
            resource_id="ada",
            thread_id="t1",
            embedder=HashEmbedder(dimensions=64),
            vector_store=stores.vector_store,
        ) as memory:
            await memory.remember(
                [{"id": "new", "text": "Ada paints the barn blue", "consent": {"source": "user"}}],
                wait=True,
            )
            hits = await memory.recall("who keeps beehives", top_k=2)
            assert hits.hits[0].record.id == "e0"
            hits = await memory.recall("Ada paints the barn blue", top_k=1)
            assert hits.hits[0].record.id == "new"
    finally:
        await stores.close()


async def test_promote_refuses_a_pinned_column_of_another_width(postgres_url, schema):
    await _remember(postgres_url, schema, FACTS)
    at = ["--url", postgres_url, "--schema", schema]
    for args in (
        ("start", *at, "--embedder", OLD_SPEC, "--next-embedder", NEW_SPEC),
        ("backfill", *at, "--next-embedder", NEW_SPEC),
        ("switch", NEW, *at),
    ):
        assert cli("models", *args).returncode == 0
    done = cli("models", "promote", NEW, *at)
    assert done.returncode == 1
    assert "pinned to vector(16)" in done.stderr
    assert "still answers" not in done.stdout
    lines = cli("models", "status", *at).stdout.splitlines()
    assert lines[0].startswith("hash-v1-16: primary")  # nothing changed


async def test_an_interrupted_backfill_keeps_what_it_stored_and_the_next_run_finishes(
    postgres_url, schema, monkeypatch
):
    await _remember(postgres_url, schema, FACTS)
    at = ["--url", postgres_url, "--schema", schema]
    start = cli("models", "start", *at, "--embedder", OLD_SPEC, "--next-embedder", NEW_SPEC)
    assert start.returncode == 0, start.stderr
    args = ["models", "backfill", *at, "--next-embedder", NEW_SPEC, "--batch-size", "2"]
    args += ["--lease-seconds", "1"]
    calls = {"n": 0}
    original = _backfill.embed_whole

    async def interrupted(*a, **kw):
        calls["n"] += 1
        if calls["n"] == 2:
            raise KeyboardInterrupt
        return await original(*a, **kw)

    monkeypatch.setattr(_backfill, "embed_whole", interrupted)
    assert await asyncio.to_thread(main, args) == 130
    monkeypatch.setattr(_backfill, "embed_whole", original)
    status = cli("models", "status", *at)
    assert (
        f"{NEW}: shadow, width 64, 2/5 vectors, 3 missing" in status.stdout
    )  # the first batch is stored; the second one's leases expire
    await asyncio.sleep(1.2)
    done = cli(*args)
    assert done.returncode == 0, done.stderr
    assert "0 entries still without one" in done.stdout


def test_the_models_commands_need_their_embedders(postgres_url, schema):
    done = cli("models", "start", "--url", postgres_url, "--schema", schema)
    assert done.returncode == 2
    assert "--embedder" in done.stderr
    done = cli("models", "backfill", "--url", postgres_url, "--schema", schema)
    assert done.returncode == 2
    assert "--next-embedder" in done.stderr
