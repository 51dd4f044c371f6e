"""Revision prism_memory_0012: RAG chunks gain a nullable ``embedding_model``; existing chunks keep
their rows (not recorded: ``NULL``), and the downgrade drops the column and nothing else."""

from __future__ import annotations

import pytest
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine

from prism_memory.postgres import create_postgres_vector_store, migrate
from prism_memory.rag import Chunk, RagScope

pytestmark = pytest.mark.postgres

COLUMN = (
    "SELECT count(*) FROM information_schema.columns WHERE table_schema = :s "
    "AND table_name = 'semantic_memory_rag_chunks' AND column_name = 'embedding_model'"
)


async def _has_column(engine: AsyncEngine, schema: str) -> bool:
    async with engine.connect() as conn:
        return bool((await conn.execute(text(COLUMN), {"s": schema})).scalar_one())


async def _chunk_texts(engine: AsyncEngine, schema: str) -> list[str]:
    async with engine.connect() as conn:
        rows = await conn.execute(
            text(f'SELECT text FROM "{schema}".semantic_memory_rag_chunks ORDER BY source_id DESC')
        )
        return list(rows.scalars())


async def test_0012_adds_the_chunk_model_and_reverses(engine, schema):
    await migrate.upgrade(engine, schema=schema, dimension=4, revision="prism_memory_0011")
    assert not await _has_column(engine, schema)
    async with engine.begin() as conn:
        await conn.execute(
            text(
                f'INSERT INTO "{schema}".semantic_memory_rag_chunks (tenant_id, scope, generation, '
                "source_id, chunk_index, text, metadata, digest, embedding, text_tsv, term_count, "
                "created_at) VALUES ('t', :scope, 0, 'old', 0, 'an old chunk', '{}'::jsonb, :digest, "
                "'[1,0,0,0]', 'chunk:2 old:1', 2, now())"
            ),
            {
                "scope": RagScope("t", "docs").key,
                "digest": Chunk("old", 0, "an old chunk", [1.0]).digest,
            },
        )

    await migrate.upgrade(engine, schema=schema, dimension=4, revision="prism_memory_0012")
    assert await migrate.current_revision(engine, schema=schema) == "prism_memory_0012"
    await migrate.upgrade(engine, schema=schema, dimension=4)
    assert await _has_column(engine, schema)
    store = await create_postgres_vector_store(engine=engine, schema=schema)
    (old,) = await store.get_by_source(RagScope("t", "docs"), "old")
    assert old.embedding_model is None  # not recorded: trusted as the query's model
    await store.upsert(
        RagScope("t", "docs"), [Chunk("new", 0, "a new chunk", [0, 1, 0, 0], embedding_model="m@1")]
    )
    (new,) = await store.get_by_source(RagScope("t", "docs"), "new")
    assert new.embedding_model == "m@1"

    await migrate.downgrade(engine, schema=schema, dimension=4, revision="prism_memory_0011")
    assert await migrate.current_revision(engine, schema=schema) == "prism_memory_0011"
    assert not await _has_column(engine, schema)
    assert await _chunk_texts(engine, schema) == ["an old chunk", "a new chunk"]
