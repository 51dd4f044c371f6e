"""Revision prism_memory_0004: existing rows get the library's own terms, and it reverses."""

from __future__ import annotations

import pytest
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine

from prism_memory.lexical import tokenize
from prism_memory.postgres import migrate

pytestmark = pytest.mark.postgres

TEXTS = {
    "e1": "Painting sunsets, she painted 3 of them!",
    "e2": "Ünïcode ﬁsh and 東京 — naïve café",
    "e3": "",
    "e4": "don't stop",
}


async def _rows(engine: AsyncEngine, schema: str, columns: str) -> dict[str, tuple[object, ...]]:
    async with engine.connect() as conn:
        rows = await conn.execute(text(f'SELECT id, {columns} FROM "{schema}".mem ORDER BY id'))
        return {row[0]: tuple(row[1:]) for row in rows}


async def test_upgrade_retokenizes_existing_rows_and_downgrade_restores_the_parser(engine, schema):
    await migrate.upgrade(engine, schema=schema, table="mem", revision="prism_memory_0002")
    async with engine.begin() as conn:
        for entry_id, body in TEXTS.items():
            await conn.execute(
                text(
                    f'INSERT INTO "{schema}".mem (tenant_id, resource_id, thread_id, id, text, role, '
                    "metadata, consent_explicit, consent_source, consent_scope, consent_visible, "
                    "sequence, occurred_at, created_at, written_at, importance, legal_hold, status, "
                    "revision, attempts) VALUES ('t', 'r', 'th', :id, :text, 'user', '{}'::jsonb, "
                    "false, 'user', 'thread', true, 0, now(), now(), now(), 1.0, false, 'pending', "
                    "1, 0)"
                ),
                {"id": entry_id, "text": body},
            )
    before = await _rows(engine, schema, "tsvector_to_array(text_tsv)")
    assert "paint" not in before["e1"][0]  # the database's own parser does not stem

    await migrate.upgrade(engine, schema=schema, table="mem")
    after = await _rows(engine, schema, "tsvector_to_array(text_tsv), term_count")
    for entry_id, body in TEXTS.items():
        terms = tokenize(body)
        lexemes, count = after[entry_id]
        assert (sorted(lexemes), count) == (sorted(set(terms)), len(terms)), entry_id
    assert "paint" in after["e1"][0]

    await migrate.downgrade(engine, schema=schema, table="mem", revision="prism_memory_0002")
    assert await _rows(engine, schema, "tsvector_to_array(text_tsv)") == before
