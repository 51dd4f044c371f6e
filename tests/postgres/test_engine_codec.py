"""A connection opened before ``CREATE EXTENSION vector`` gets pgvector's codec on its next checkout
(``prism_memory.postgres._engine``; issue 47's mutation run), on the real PostgreSQL: a fresh
database without the extension, one pooled connection kept across it."""

from __future__ import annotations

import uuid

import numpy as np
import pytest
from sqlalchemy import text
from sqlalchemy.engine import make_url

from prism_memory.postgres._engine import create_engine
from prism_memory.postgres._executor import Executor

pytestmark = pytest.mark.postgres

VECTOR = "SELECT CAST('[1,2,3]' AS vector) AS v"


async def test_the_codec_arrives_with_the_extension(postgres_url: str) -> None:
    name = f"pm_codec_{uuid.uuid4().hex[:10]}"
    admin = create_engine(postgres_url, pooled=False).execution_options(
        isolation_level="AUTOCOMMIT"
    )
    async with admin.connect() as conn:
        await conn.execute(text(f'CREATE DATABASE "{name}"'))
    url = make_url(postgres_url).set(database=name).render_as_string(hide_password=False)
    executor = Executor(create_engine(url, pool_size=1), owns_engine=True, sets_plans=True)
    try:
        # the one pooled connection opens while the database has no vector type
        assert await executor.fetchval("probe", "SELECT 1") == 1
        await executor._primary.kept.release()  # back to the pool, as it stays
        await executor.write("probe", "CREATE EXTENSION vector")
        await executor._primary.kept.release()
        (value,) = await executor.fetch("probe", VECTOR)
        assert isinstance(value["v"], np.ndarray)  # decoded by the codec, not vector's text
        assert value["v"].tolist() == [1.0, 2.0, 3.0]
    finally:
        await executor.close()
        async with admin.connect() as conn:
            await conn.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        await admin.dispose()


RECORD_VALUES = (
    "'ünï ☃'::text, ''::text, NULL::text, true, false, CAST(2147483647 AS integer), "
    "CAST(-9007199254740993 AS bigint), CAST(-7 AS smallint), CAST(-0.1 AS float8), "
    "CAST('NaN' AS float8), CAST('2024-02-29 23:59:59.999999+05:30' AS timestamptz), "
    "CAST('0001-01-01 00:00:00+00' AS timestamptz), CAST('infinity' AS timestamptz), "
    "CAST('-infinity' AS timestamptz), CAST('{\"é\": [1, null]}' AS jsonb)::text"
)


async def test_decode_record_reads_what_asyncpg_decodes(postgres_url: str) -> None:
    """A search's deferred columns come as ``record_send`` bytes: decoded in Python, each field is
    the value asyncpg decodes from the same column (edge values of every type the columns have)."""
    from prism_memory.postgres._codec import decode_record

    executor = Executor(create_engine(postgres_url, pool_size=1), owns_engine=True)
    try:
        (typed,) = await executor.fetch("probe", f"SELECT {RECORD_VALUES}")
        sent = await executor.fetchval("probe", f"SELECT record_send(ROW({RECORD_VALUES}))")
    finally:
        await executor.close()
    decoded = decode_record(sent)
    expected = list(typed.values())
    assert decoded[:9] == expected[:9]
    assert decoded[10:] == expected[10:]
    assert np.isnan(decoded[9])
    assert np.isnan(expected[9])
    assert [type(value) for value in decoded] == [type(value) for value in expected]
    assert [getattr(v, "tzinfo", None) for v in decoded] == [
        getattr(v, "tzinfo", None) for v in expected
    ]
