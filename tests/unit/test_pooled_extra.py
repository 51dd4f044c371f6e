"""The pooled mode's reads need psycopg 3 (the ``pooled`` extra); the default mode does not."""

from __future__ import annotations

import sys

import pytest

from prism_memory.errors import ConfigurationError
from prism_memory.postgres._engine import create_engine
from prism_memory.postgres._executor import Executor
from prism_memory.postgres._pipelined import Row, _row_class, conninfo_of, pipelined_reads

URL = "postgresql+asyncpg://someone:secret@db.example:6432/app?ssl=require"


async def test_transaction_pooling_without_psycopg_names_the_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "psycopg", None)  # an import of it fails
    engine = create_engine(URL, pooling="transaction")
    try:
        with pytest.raises(ConfigurationError, match=r"prism-memory\[pooled\]") as caught:
            Executor(engine, owns_engine=False, pooling="transaction")
        assert "secret" not in str(caught.value)
        with pytest.raises(ConfigurationError, match=r"prism-memory\[pooled\]"):
            pipelined_reads(engine)
    finally:
        await engine.dispose()


async def test_the_default_mode_needs_no_psycopg(monkeypatch):
    monkeypatch.setitem(sys.modules, "psycopg", None)
    engine = create_engine(URL)
    try:
        executor = Executor(engine, owns_engine=False)
        assert executor.pooling == "session"
    finally:
        await engine.dispose()


def test_conninfo_keeps_the_address_and_maps_ssl():
    from sqlalchemy.engine import make_url

    info = make_url(conninfo_of(make_url(URL)))
    assert (info.drivername, info.host, info.port, info.database) == (
        "postgresql",
        "db.example",
        6432,
        "app",
    )
    assert (info.username, info.password) == ("someone", "secret")
    assert dict(info.query) == {"sslmode": "require"}


def test_a_row_reads_by_position_and_by_name_like_a_record():
    row = _row_class(("id", "score"))(("e1", 0.5))
    assert isinstance(row, Row)
    assert (row[0], row["id"], row[1], row["score"], row[-1]) == ("e1", "e1", 0.5, 0.5, 0.5)
    assert dict(row) == {"id": "e1", "score": 0.5}
    assert list(row) == ["e1", 0.5]
    assert row.get("missing") is None
    with pytest.raises(KeyError):
        row["missing"]
