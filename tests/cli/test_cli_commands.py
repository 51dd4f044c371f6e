"""``prism-memory`` as an operator runs it: subprocesses against a real PostgreSQL."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import uuid
from collections.abc import Iterator

import pytest
from sqlalchemy import text

from prism_memory import HashEmbedder, Memory, create_memory
from prism_memory.cli import main
from prism_memory.postgres import create_postgres_memory_stores, migrate
from prism_memory.postgres._engine import create_engine

pytestmark = pytest.mark.postgres

REFUSED = "postgresql://nobody@127.0.0.1:1/none"


def cli(*args: str, stdin: str = "") -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "PRISM_MEMORY_DATABASE_URL"}
    return subprocess.run(
        [sys.executable, "-m", "prism_memory", *args],
        input=stdin,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        env=env,
    )


@pytest.fixture
def schema(postgres_url: str) -> Iterator[str]:
    name = f"pm_cli_{uuid.uuid4().hex[:10]}"
    yield name

    async def drop() -> None:
        engine = create_engine(postgres_url, pooled=False)
        try:
            async with engine.begin() as conn:
                await conn.execute(text(f'DROP SCHEMA IF EXISTS "{name}" CASCADE'))
        finally:
            await engine.dispose()

    asyncio.run(drop())


def _tables(url: str, schema: str) -> set[str]:
    async def read() -> set[str]:
        engine = create_engine(url, pooled=False)
        try:
            async with engine.connect() as conn:
                rows = await conn.execute(
                    text("SELECT tablename FROM pg_tables WHERE schemaname = :s"), {"s": schema}
                )
                return set(rows.scalars())
        finally:
            await engine.dispose()

    return asyncio.run(read())


def test_migrate_upgrade_says_what_it_did_and_downgrade_needs_a_target_and_a_yes(
    postgres_url, schema
):
    head = migrate.head_revision()
    done = cli("migrate", "upgrade", "head", "--url", postgres_url, "--schema", schema)
    assert done.returncode == 0, done.stderr
    assert f"upgraded {schema}.semantic_memory: (empty) -> {head}" in done.stdout
    again = cli("migrate", "upgrade", "head", "--url", postgres_url, "--schema", schema)
    assert f"already at {head}" in again.stdout
    current = cli("migrate", "current", "--url", postgres_url, "--schema", schema)
    assert current.stdout.strip() == head

    refused = cli("migrate", "downgrade", "--url", postgres_url, "--schema", schema)
    assert refused.returncode != 0
    assert refused.stderr.strip().splitlines() == [
        "error: downgrade needs an explicit target: a revision id, or `base` to drop every "
        "prism_memory table (see `prism-memory migrate current`)"
    ]
    declined = cli(
        "migrate", "downgrade", "base", "--url", postgres_url, "--schema", schema, stdin="n\n"
    )
    assert declined.returncode == 1
    assert "drops every prism_memory table and its data" in declined.stdout
    assert "semantic_memory" in _tables(postgres_url, schema)

    confirmed = cli(
        "migrate", "downgrade", "base", "--url", postgres_url, "--schema", schema, "--yes"
    )
    assert confirmed.returncode == 0, confirmed.stderr
    assert f"downgraded {schema}.semantic_memory: {head} -> (empty)" in confirmed.stdout
    assert _tables(postgres_url, schema) == {"semantic_memory_alembic_version"}


def test_the_module_cli_downgrade_has_no_default_target(postgres_url, schema, capsys):
    with pytest.raises(SystemExit) as exited:
        migrate.main(["downgrade", "--url", postgres_url, "--schema", schema])
    assert exited.value.code == 2
    assert "--revision" in capsys.readouterr().err


def test_a_refused_connection_is_one_line_and_verbose_shows_the_traceback():
    done = cli("migrate", "current", "--url", REFUSED)
    assert done.returncode == 1
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    assert lines[0].startswith("error: ")
    assert "Connect call failed" in lines[0] or "refused" in lines[0].lower()
    verbose = cli("--verbose", "migrate", "current", "--url", REFUSED)
    assert verbose.returncode == 1
    assert "Traceback (most recent call last)" in verbose.stderr


async def _migrated(url: str, schema: str, dimension: int) -> None:
    stores = await create_postgres_memory_stores(url, schema=schema, dimension=dimension)
    await stores.close()


async def test_doctor_is_quiet_on_a_healthy_schema(postgres_url, schema):
    await _migrated(postgres_url, schema, 16)
    done = cli("doctor", "--url", postgres_url, "--schema", schema, "--width", "16")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "ok: no problems found" in done.stdout
    assert "problem:" not in done.stdout


async def test_doctor_reports_a_width_mismatch_and_a_missing_index(postgres_url, schema):
    await _migrated(postgres_url, schema, 16)
    engine = create_engine(postgres_url, pooled=False)
    try:
        async with engine.begin() as conn:
            await conn.execute(text(f'DROP INDEX "{schema}".semantic_memory_lineage_gin'))
    finally:
        await engine.dispose()
    done = cli(
        "doctor",
        "--url",
        postgres_url,
        "--schema",
        schema,
        "--embedder",
        "prism_memory:HashEmbedder",
    )
    assert done.returncode == 1
    problems = [line for line in done.stdout.splitlines() if line.startswith("problem: ")]
    assert problems == [
        f"problem: width mismatch: {schema}.semantic_memory.embedding is vector(16) but the "
        "embedder is 64 wide",
        f"problem: index {schema}.semantic_memory_lineage_gin is missing",
    ]


def test_doctor_names_a_schema_that_was_never_migrated(postgres_url, schema):
    done = cli("doctor", "--url", postgres_url, "--schema", schema)
    assert done.returncode == 1
    assert f"problem: no version table {schema}.semantic_memory_alembic_version" in done.stdout
    assert f"problem: table {schema}.semantic_memory does not exist" in done.stdout


async def _memory_with_entries(url: str, schema: str, count: int) -> None:
    stores = await create_postgres_memory_stores(url, schema=schema, dimension=16)
    try:
        memory: Memory
        async with create_memory(
            tenant_id="acme",
            resource_id="ada",
            thread_id="t1",
            embedder=HashEmbedder(dimensions=16),
            vector_store=stores.vector_store,
            working_store=stores.working_store,
        ) as memory:
            await memory.remember(
                [
                    {"id": f"e{i:02d}", "text": f"entry {i}", "consent": {"source": "user"}}
                    for i in range(count)
                ],
                wait=True,
            )
    finally:
        await stores.close()


async def test_stats_counts_entries_and_tenants(postgres_url, schema):
    await _memory_with_entries(postgres_url, schema, 3)
    done = cli("stats", "--url", postgres_url, "--schema", schema)
    assert done.returncode == 0, done.stderr
    assert "entries indexed" in done.stdout
    indexed_line = next(line for line in done.stdout.splitlines() if "entries indexed" in line)
    assert indexed_line.split()[-2] == "3"
    assert "acme" in done.stdout


async def test_export_resumes_after_an_interrupt_without_repeating_a_line(
    postgres_url, schema, tmp_path, monkeypatch
):
    await _memory_with_entries(postgres_url, schema, 7)
    out = tmp_path / "ada.jsonl"
    args = ["export", "--url", postgres_url, "--schema", schema, "--tenant", "acme"]
    args += ["--resource", "ada", "--thread", "t1", "--out", str(out), "--page-size", "3"]

    calls = {"n": 0}
    original = Memory.export_memory

    async def interrupted(self, **kwargs):
        calls["n"] += 1
        if calls["n"] == 2:
            raise KeyboardInterrupt
        return await original(self, **kwargs)

    monkeypatch.setattr(Memory, "export_memory", interrupted)
    code = await asyncio.to_thread(main, args)
    assert code == 130
    state = json.loads((tmp_path / "ada.jsonl.cursor").read_text())
    assert state["exported"] == 3
    # a half-written page after the saved offset is cut off on resume
    with out.open("a") as handle:
        handle.write('{"partial": ')
    monkeypatch.setattr(Memory, "export_memory", original)
    assert await asyncio.to_thread(main, args) == 0
    ids = [json.loads(line)["id"] for line in out.read_text().splitlines()]
    assert ids == [f"e{i:02d}" for i in range(7)]
    assert not (tmp_path / "ada.jsonl.cursor").exists()


async def test_rebuild_reembeds_a_thread_and_resumes_from_its_state_file(
    postgres_url, schema, tmp_path, monkeypatch
):
    await _memory_with_entries(postgres_url, schema, 5)
    state = tmp_path / "rebuild.json"
    args = ["rebuild", "--url", postgres_url, "--schema", schema, "--tenant", "acme"]
    args += ["--resource", "ada", "--thread", "t1", "--state", str(state), "--batch-size", "2"]
    calls = {"n": 0}
    original = Memory.rebuild_index

    async def interrupted(self, **kwargs):
        calls["n"] += 1
        if calls["n"] == 2:
            raise KeyboardInterrupt
        return await original(self, **kwargs)

    monkeypatch.setattr(Memory, "rebuild_index", interrupted)
    assert await asyncio.to_thread(main, args) == 130
    saved = json.loads(state.read_text())
    assert saved["rebuilt"] == 2
    assert saved["cursor"] is not None
    monkeypatch.setattr(Memory, "rebuild_index", original)
    assert await asyncio.to_thread(main, args) == 0
    assert not state.exists()


def test_the_module_cli_says_what_it_did_and_a_refused_connection_is_one_line(
    postgres_url, schema, capsys
):
    assert migrate.main(["upgrade", "--url", postgres_url, "--schema", schema]) == 0
    head = migrate.head_revision()
    assert (
        capsys.readouterr().out.strip() == f"upgraded {schema}.semantic_memory: (empty) -> {head}"
    )
    assert migrate.main(["current", "--url", REFUSED]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1
    assert err[0].startswith("error: reading the schema revision failed")


def test_the_readme_demo_command_runs_as_a_module() -> None:
    done = cli("demo")
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("backend: in-memory reference store")
    assert "== context block (chronological, what a prompt gets) ==" in done.stdout
