"""How an engine is made and which pooling mode a store runs in (``prism_memory.postgres._engine``;
issue 47's mutation run), without a database: the mode from argument, URL or environment, the URL
checks, the engine's pool and listeners, and the room and idle-ping decisions of the pool (the
pooler and its server connections are in ``tests/topology/``)."""

from __future__ import annotations

import time
from types import SimpleNamespace
from typing import Any

import pytest
from sqlalchemy import event
from sqlalchemy.exc import DisconnectionError
from sqlalchemy.ext.asyncio import create_async_engine
from sqlalchemy.pool import NullPool, QueuePool

from prism_memory.errors import ConfigurationError
from prism_memory.postgres import _engine
from prism_memory.postgres._engine import (
    IDLE_PING_SECONDS,
    POOLING_ENV,
    checked_pooling,
    create_engine,
    normalize_url,
    pooling_of,
    resolve_pooling,
    sets_plans,
    transaction_pooled,
)

URL = "postgresql://ada:secret@db.example:5433/mem"


@pytest.fixture(autouse=True)
def _no_pooling_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(POOLING_ENV, raising=False)


def test_the_pooling_mode_by_argument_url_or_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    assert POOLING_ENV == "PRISM_MEMORY_POOLING"
    plain = "postgresql+asyncpg://ada:secret@db.example:5433/mem"
    assert resolve_pooling(URL, None) == (plain, "session")
    assert resolve_pooling(URL + "?prism_pooling=transaction", None) == (plain, "transaction")
    assert resolve_pooling(URL + "?prism_pooling=transaction", "session") == (plain, "session")
    assert resolve_pooling(URL + "?sslmode=require&prism_pooling=session", "transaction") == (
        plain + "?sslmode=require",
        "transaction",
    )
    monkeypatch.setenv(POOLING_ENV, "transaction")
    assert resolve_pooling(URL, None) == (plain, "transaction")
    assert resolve_pooling(URL + "?prism_pooling=session", None)[1] == "session"
    monkeypatch.setenv(POOLING_ENV, "")
    assert resolve_pooling(URL, None)[1] == "session"


def test_a_bad_pooling_mode_is_refused_by_where_it_came_from(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    with pytest.raises(ConfigurationError, match=r"^pooling must be"):
        resolve_pooling(URL, "statement")  # type: ignore[arg-type]
    with pytest.raises(ConfigurationError, match="the URL's prism_pooling must be"):
        resolve_pooling(URL + "?prism_pooling=statement", None)
    with pytest.raises(ConfigurationError, match="more than once"):
        resolve_pooling(URL + "?prism_pooling=session&prism_pooling=transaction", None)
    monkeypatch.setenv(POOLING_ENV, "nope")
    with pytest.raises(ConfigurationError, match=f"^{POOLING_ENV} must be"):
        resolve_pooling(URL, None)
    assert checked_pooling(None) is None
    assert checked_pooling("transaction") == "transaction"
    assert checked_pooling("session") == "session"
    with pytest.raises(ConfigurationError, match=r"^--pooling must be"):
        checked_pooling("x")


def test_urls_are_normalized_with_their_password() -> None:
    assert normalize_url(URL) == "postgresql+asyncpg://ada:secret@db.example:5433/mem"
    assert normalize_url("postgres://u@h/db") == "postgresql+asyncpg://u@h/db"
    assert normalize_url("postgresql+psycopg://u@h/db") == "postgresql+asyncpg://u@h/db"
    with pytest.raises(ConfigurationError, match="needs a PostgreSQL URL"):
        normalize_url("sqlite:///x.db")
    with pytest.raises(ConfigurationError, match="invalid database URL"):
        normalize_url("not a url at all")


def test_an_engine_for_each_pooling_mode(monkeypatch: pytest.MonkeyPatch) -> None:
    session = create_engine(URL)
    transaction = create_engine(URL + "?prism_pooling=transaction")
    unpooled = create_engine(URL, pooled=False, pooling="transaction")
    try:
        assert isinstance(session.sync_engine.pool, QueuePool)
        assert session.sync_engine.pool._pool.use_lifo is True  # type: ignore[attr-defined]
        assert isinstance(unpooled.sync_engine.pool, NullPool)
        for engine in (session, transaction, unpooled):
            assert sets_plans(engine)
            assert engine.sync_engine.hide_parameters is True
            assert event.contains(engine.sync_engine, "connect", _engine._on_connect)
            assert event.contains(engine.sync_engine, "checkout", _engine._on_checkout)
        assert not transaction_pooled(session)
        assert transaction_pooled(transaction)
        assert transaction_pooled(unpooled)
        assert pooling_of(session, None) == "session"
        assert pooling_of(transaction, None) == "transaction"
        assert pooling_of(session, "transaction") == "transaction"
        monkeypatch.setenv(POOLING_ENV, "transaction")
        assert pooling_of(session, None) == "transaction"
        with pytest.raises(ConfigurationError, match=r"^pooling must be"):
            pooling_of(session, "x")  # type: ignore[arg-type]
        # idle pings on pooled engines only, and not when every checkout pings anyway
        assert event.contains(session.sync_engine, "checkout", _engine._ping_if_idle)
        assert event.contains(session.sync_engine, "checkin", _engine._on_checkin)
        assert not event.contains(unpooled.sync_engine, "checkout", _engine._ping_if_idle)
        pinged = create_engine(URL, pool_pre_ping=True)
        assert not event.contains(pinged.sync_engine, "checkout", _engine._ping_if_idle)
        host = create_async_engine("postgresql+asyncpg://u@h/db")
        assert not sets_plans(host)
        assert not transaction_pooled(host)
    finally:
        for engine in (session, transaction, unpooled):
            engine.sync_engine.dispose()


def test_behind_a_transaction_pooler_nothing_is_named() -> None:
    assert _engine._statement_name() == ""


def test_only_the_asyncpg_driver_is_taken() -> None:
    engine = create_async_engine("postgresql+psycopg://u@h/db")
    with pytest.raises(ConfigurationError, match="asyncpg driver"):
        _engine.install_vector_codec(engine)


def _pool(size: int, overflow: int) -> QueuePool:
    return QueuePool(
        lambda: SimpleNamespace(close=lambda: None), pool_size=size, max_overflow=overflow
    )


def test_room_in_a_pool() -> None:
    assert _engine._has_room(NullPool(lambda: None)) is False
    empty = _pool(1, 0)
    assert _engine._has_room(empty) is True  # nothing open yet: room below pool_size … or not
    held = empty.connect()
    assert _engine._has_room(empty) is False  # one open, none idle, no overflow
    held.close()
    assert _engine._has_room(empty) is True  # one idle
    unbounded = _pool(1, -1)
    first = unbounded.connect()
    assert _engine._has_room(unbounded) is True
    first.close()
    spare = _pool(1, 1)
    taken = [spare.connect()]
    assert _engine._has_room(spare) is True  # one overflow connection left
    taken.append(spare.connect())
    assert _engine._has_room(spare) is False
    for connection in taken:
        connection.close()


class _Record:
    def __init__(self, last: float | None) -> None:
        self.info: dict[str, Any] = {} if last is None else {_engine._LAST_USED: last}


class _Dbapi:
    def __init__(self, alive: bool) -> None:
        self.alive, self.pings = alive, 0

    def ping(self) -> None:
        self.pings += 1
        if not self.alive:
            raise OSError("gone")


def test_an_idle_connection_is_pinged_on_checkout() -> None:
    fresh = _Dbapi(alive=False)
    _engine._ping_if_idle(fresh, _Record(None), None)  # never used: no ping
    _engine._ping_if_idle(fresh, _Record(time.monotonic()), None)  # used a moment ago
    assert fresh.pings == 0
    idle = time.monotonic() - IDLE_PING_SECONDS - 1
    alive = _Dbapi(alive=True)
    _engine._ping_if_idle(alive, _Record(idle), None)
    assert alive.pings == 1
    with pytest.raises(DisconnectionError):
        _engine._ping_if_idle(_Dbapi(alive=False), _Record(idle), None)


def test_checkin_marks_when_a_connection_was_last_used() -> None:
    record = _Record(None)
    before = time.monotonic()
    _engine._on_checkin(None, record)
    assert before <= record.info[_engine._LAST_USED] <= time.monotonic()
    kept = _Record(None)
    kept.info[_engine._KEPT_SINCE] = 12.5  # a kept connection: when it was kept
    _engine._on_checkin(None, kept)
    assert kept.info[_engine._LAST_USED] == 12.5
    assert _engine._KEPT_SINCE not in kept.info
    _engine._on_checkin(None, None)  # a connection already detached: nothing to mark


class _CapturedError(Exception):
    """Raised by the connect hook below: the connection parameters, and no network."""


async def _connect_parameters(engine: Any) -> dict[str, Any]:
    seen: dict[str, Any] = {}

    def capture(dialect: Any, record: Any, cargs: Any, cparams: dict[str, Any]) -> None:
        seen.update(cparams)
        raise _CapturedError

    event.listen(engine.sync_engine, "do_connect", capture)
    with pytest.raises(_CapturedError):
        async with engine.connect():
            pass
    return seen


async def test_what_each_mode_asks_of_the_server() -> None:
    session = await _connect_parameters(create_engine(URL, connect_args={"timeout": 7}))
    assert session["timeout"] == 7  # the caller's own arguments are kept
    assert session["server_settings"] == _engine.SERVER_SETTINGS
    assert _engine.SERVER_SETTINGS == {
        "application_name": "prism_memory",
        "plan_cache_mode": "auto",
        "max_parallel_workers_per_gather": "0",
    }
    assert "statement_cache_size" not in session
    pooled = await _connect_parameters(
        create_engine(
            URL,
            pooling="transaction",
            connect_args={"timeout": 7, "server_settings": {"search_path": "x"}},
        )
    )
    assert pooled["timeout"] == 7
    # only application_name: a pooler refuses other startup parameters (and the caller's own)
    assert pooled["server_settings"] == {"application_name": "prism_memory", "search_path": "x"}
    assert pooled["statement_cache_size"] == 0
    assert pooled["prepared_statement_cache_size"] == 0
    assert pooled["prepared_statement_name_func"]() == ""
