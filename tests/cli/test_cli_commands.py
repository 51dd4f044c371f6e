"""``prism-memory`` as an operator runs it: subprocesses against a real PostgreSQL."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys

import pytest
from sqlalchemy import text

from prism_memory import EmbeddingModelMismatchError, HashEmbedder, Memory, create_memory
from prism_memory.cli import main
from prism_memory.postgres import PostgresMemoryStores, create_postgres_memory_stores, migrate
from prism_memory.postgres._engine import create_engine

pytestmark = pytest.mark.postgres

REFUSED = "postgresql://nobody@127.0.0.1:1/none"


def cli(
    *args: str, stdin: str = "", pythonpath: str | None = None
) -> subprocess.CompletedProcess[str]:
    # no COLUMNS: rich would take its width from it; a pipe alone must not cut a line
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in {"PRISM_MEMORY_DATABASE_URL", "COLUMNS", "LINES"}
    }
    if pythonpath is not None:
        env["PYTHONPATH"] = pythonpath
    return subprocess.run(
        [sys.executable, "-m", "prism_memory", *args],
        input=stdin,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        env=env,
    )


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


def test_doctor_warns_of_a_pgvector_older_than_0_8_4(postgres_url, schema, capsys, monkeypatch):
    """Issue 46 item 16b, against the real server: its pgvector (0.8.6 on the embedded one) draws
    no warning; with the threshold raised past it, the same server's version is warned of --
    named, with the fix -- and the exit status stays 0 (a warning, not a problem)."""
    from prism_memory.postgres import ops

    asyncio.run(_migrated(postgres_url, schema, 16))
    at = ["doctor", "--url", postgres_url, "--schema", schema, "--width", "16"]
    assert main(at) == 0
    healthy = capsys.readouterr().out
    assert "warning:" not in healthy
    version = next(line for line in healthy.splitlines() if line.startswith("pgvector: "))[10:]
    monkeypatch.setattr(ops, "HNSW_SAFE_PGVECTOR", (99, 0, 0))
    assert main(at) == 0
    out = capsys.readouterr().out
    assert f"warning: pgvector {version} is older than 99.0.0: an HNSW index can be " in out
    assert "ALTER EXTENSION vector UPDATE" in out
    assert "ok: no problems found (see the warnings)" in out


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


def _ada(stores: PostgresMemoryStores) -> Memory:
    """acme/ada/t1 with HashEmbedder(16) (hash-v1-16) on ``stores``."""
    return create_memory(
        tenant_id="acme",
        resource_id="ada",
        thread_id="t1",
        embedder=HashEmbedder(dimensions=16),
        vector_store=stores.vector_store,
        working_store=stores.working_store,
    )


async def _memory_with_entries(url: str, schema: str, count: int) -> None:
    stores = await create_postgres_memory_stores(url, schema=schema, dimension=16)
    try:
        memory: Memory
        async with _ada(stores) as memory:
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


async def test_stats_in_a_pipe_prints_a_long_tenant_id_whole(postgres_url, schema):
    """Issue 46 item 15: piped, rich assumed 80 columns and cut the tenant id with "…"."""
    tenant = "tenant-" + "x" * 120
    stores = await create_postgres_memory_stores(postgres_url, schema=schema, dimension=16)
    try:
        async with create_memory(
            tenant_id=tenant,
            resource_id="ada",
            thread_id="t1",
            embedder=HashEmbedder(dimensions=16),
            vector_store=stores.vector_store,
            working_store=stores.working_store,
        ) as memory:
            await memory.remember([{"text": "one entry"}], wait=True)
    finally:
        await stores.close()
    done = cli("stats", "--url", postgres_url, "--schema", schema)
    assert done.returncode == 0, done.stderr
    assert "…" not in done.stdout
    row = next(line for line in done.stdout.splitlines() if tenant in line)
    assert row.split("│")[2].strip() == "1"


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
    args += ["--embedder", "prism_memory:HashEmbedder"]
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


OTHER_MODEL = """
from prism_memory import HashEmbedder


class Other(HashEmbedder):
    def __init__(self, dimensions=16):
        super().__init__(dimensions)
        self.model = "other-model-v2"


def make_embedder(dimensions=16):
    return Other(dimensions)
"""


async def _models(url: str, schema: str) -> list[tuple[str, str | None]]:
    engine = create_engine(url, pooled=False)
    try:
        async with engine.connect() as conn:
            rows = await conn.execute(
                text(f'SELECT id, embedding_model FROM "{schema}".semantic_memory ORDER BY id')
            )
            return [(str(i), m) for i, m in rows.all()]
    finally:
        await engine.dispose()


async def test_commands_that_write_vectors_use_the_model_the_table_holds(
    postgres_url, schema, tmp_path
):
    await _memory_with_entries(postgres_url, schema, 3)  # HashEmbedder(16): hash-v1-16
    before = await _models(postgres_url, schema)
    assert before == [(f"e{i:02d}", "hash-v1-16") for i in range(3)]
    thread = ["--url", postgres_url, "--schema", schema, "--tenant", "acme", "--resource", "ada"]
    thread += ["--thread", "t1", "--state", str(tmp_path / "rebuild.json")]

    # no --embedder: one line, exit 2, nothing written (there is no default embedder)
    for args in (["rebuild", *thread], ["worker", "--url", postgres_url, "--schema", schema]):
        done = await asyncio.to_thread(cli, *args)
        assert done.returncode == 2, done.stderr
        assert (
            "Invalid value for --embedder: this command writes vectors: name the embedder that "
            "made the table's vectors (module:factory; there is no default)"
        ) in done.stderr
    # an embedder module that cannot be imported says where it must be
    missing = await asyncio.to_thread(cli, "rebuild", *thread, "--embedder", "my_embedders:make")
    assert missing.returncode == 1
    assert missing.stderr.strip().splitlines() == [
        "error: --embedder: no module named 'my_embedders'; it must be importable where "
        "prism-memory runs (installed in this environment, or its folder on PYTHONPATH)"
    ]
    # another model: refused with one line, nothing written
    (tmp_path / "other_models.py").write_text(OTHER_MODEL)
    other = ["--embedder", "other_models:make_embedder"]
    refused = await asyncio.to_thread(cli, "rebuild", *thread, *other, pythonpath=str(tmp_path))
    assert refused.returncode == 1
    (line,) = refused.stderr.strip().splitlines()
    assert line.startswith(
        "error: the thread's vectors were made by ['hash-v1-16'], this memory embeds with "
        "'other-model-v2': nothing was written."
    ), line
    assert await _models(postgres_url, schema) == before
    worker = await asyncio.to_thread(
        cli, "worker", "--url", postgres_url, "--schema", schema, *other, pythonpath=str(tmp_path)
    )
    assert worker.returncode == 1
    assert worker.stderr.strip().splitlines()[-1] == (
        f"error: {schema}.semantic_memory holds vectors made by ['hash-v1-16']; this worker's "
        "embedder is 'other-model-v2', and would mix them. Run the worker with that model, or "
        "switch models first (docs/operations.md, 'Switching models')"
    )
    assert "alembic" not in worker.stderr.lower()

    # the switch (docs/operations.md): re-embed everything with the new model, then switch
    switched = await asyncio.to_thread(
        cli, "rebuild", *thread, *other, "--switch-model", pythonpath=str(tmp_path)
    )
    assert switched.returncode == 0, switched.stderr
    assert "re-embedded 3 entries of acme/ada/t1" in switched.stdout
    assert await _models(postgres_url, schema) == [
        (f"e{i:02d}", "other-model-v2") for i in range(3)
    ]
    stores = await create_postgres_memory_stores(postgres_url, schema=schema, dimension=16)
    try:
        old = _ada(stores)
        with pytest.raises(EmbeddingModelMismatchError):
            await old.recall("entry 1")
        await old.aclose()
    finally:
        await stores.close()


async def test_migrate_upgrade_with_another_width_names_both_and_changes_nothing(
    postgres_url, schema
):
    await _migrated(postgres_url, schema, 16)
    done = cli(
        "migrate", "upgrade", "head", "--url", postgres_url, "--schema", schema, "--dimension", "64"
    )
    assert done.returncode == 1
    assert done.stderr.strip().splitlines() == [
        f"error: {schema}.semantic_memory.embedding is pinned to vector(16) but dimension 64 "
        "was asked for: nothing was changed (the revisions never re-type an existing column)"
    ]
    assert "nothing to do" not in done.stdout
    same = cli(
        "migrate", "upgrade", "head", "--url", postgres_url, "--schema", schema, "--dimension", "16"
    )
    assert same.returncode == 0, same.stderr
    assert "already at" in same.stdout


async def test_doctor_prints_its_findings_and_no_alembic_log(postgres_url, schema):
    await _migrated(postgres_url, schema, 16)
    done = cli("doctor", "--url", postgres_url, "--schema", schema, "--width", "16")
    assert done.returncode == 0, done.stderr
    assert done.stderr == ""
    verbose = cli("--verbose", "doctor", "--url", postgres_url, "--schema", schema, "--width", "16")
    assert verbose.returncode == 0


def test_mcp_with_a_dimension_on_an_unpinned_table_stops_with_one_line(
    postgres_url, schema, tmp_path
):
    """Issue 46 item 20: the HTTP example's ``--dimension 384`` on a table the stdio config
    created unpinned. One typed line naming the option, exit 1, nothing served or changed."""
    pytest.importorskip("mcp")
    done = cli("migrate", "upgrade", "head", "--url", postgres_url, "--schema", schema)
    assert done.returncode == 0, done.stderr
    tokens = tmp_path / "tokens.json"
    identity = {"tenant_id": "t1", "resource_id": "ada", "thread_id": "c1"}
    tokens.write_text(json.dumps({"a-long-random-token-0123456789": identity}))
    served = cli(
        "mcp", "--embedder", "prism_memory:HashEmbedder", "--transport", "http",
        "--auth-tokens", str(tokens), "--port", "1", "--dimension", "384",
        "--url", postgres_url, "--schema", schema,
    )  # fmt: skip
    assert served.returncode == 1
    assert "Traceback" not in served.stderr
    lines = served.stderr.strip().splitlines()
    assert len(lines) == 1, served.stderr
    assert lines[0].startswith("error: --dimension pins a new table only"), lines[0]
    assert "drop --dimension" in lines[0]
    doctor = cli("doctor", "--url", postgres_url, "--schema", schema)
    assert "embedding: vector\n" in doctor.stdout, doctor.stdout  # still unpinned
