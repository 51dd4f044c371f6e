"""Driver errors translated by SQLSTATE (``prism_memory.postgres._errors``), with stand-in driver
errors: no database, no network."""

from __future__ import annotations

from pathlib import Path

import pytest
from asyncpg import InterfaceError
from asyncpg.exceptions import InternalClientError
from sqlalchemy.exc import DBAPIError, SQLAlchemyError

from prism_memory.errors import (
    ConfigurationError,
    ConflictError,
    DimensionMismatchError,
    PrismMemoryError,
    StorageError,
    ValidationError,
)
from prism_memory.postgres import _errors
from prism_memory.postgres._errors import server_terminated, sqlstate_of, translate, wrap_db_errors


class CodedError(Exception):
    """A driver error as asyncpg reports it: a ``sqlstate`` attribute."""

    def __init__(self, message: str = "boom", sqlstate: object = None) -> None:
        super().__init__(message)
        self.sqlstate = sqlstate


class PgCodedError(Exception):
    """A driver error as psycopg reports it: a ``pgcode`` attribute."""

    def __init__(self, message: str = "boom", pgcode: object = None) -> None:
        super().__init__(message)
        self.pgcode = pgcode


def wrapped(orig: BaseException) -> DBAPIError:
    return DBAPIError("SELECT 1", None, orig)  # type: ignore[arg-type]


@pytest.fixture(autouse=True)
def no_embedded_server(monkeypatch):
    monkeypatch.setattr(_errors, "SERVER_LOGS", {})


# ---- sqlstate_of -------------------------------------------------------------------------------


def test_sqlstate_of_reads_asyncpg_sqlstate():
    assert sqlstate_of(CodedError(sqlstate="23505")) == "23505"


def test_sqlstate_of_reads_a_pgcode():
    assert sqlstate_of(PgCodedError(pgcode="42P01")) == "42P01"


def test_sqlstate_of_falls_back_to_pgcode_when_sqlstate_is_empty():
    error = PgCodedError(pgcode="42703")
    error.sqlstate = None  # type: ignore[attr-defined]
    assert sqlstate_of(error) == "42703"


@pytest.mark.parametrize("code", ["2350", "235050", "", 23505, None])
def test_sqlstate_of_ignores_a_code_that_is_not_five_characters(code):
    assert sqlstate_of(CodedError(sqlstate=code)) is None


def test_sqlstate_of_reads_the_wrapped_driver_error():
    assert sqlstate_of(wrapped(CodedError(sqlstate="22P02"))) == "22P02"


def test_sqlstate_of_follows_the_cause():
    error = RuntimeError("outer")
    error.__cause__ = CodedError(sqlstate="40001")
    assert sqlstate_of(error) == "40001"


def test_sqlstate_of_follows_the_wrapped_error_cause():
    inner = RuntimeError("no code here")
    inner.__cause__ = CodedError(sqlstate="40P01")
    assert sqlstate_of(wrapped(inner)) == "40P01"


def test_sqlstate_of_reads_the_wrapped_error_before_the_cause():
    error = RuntimeError("outer")
    error.orig = CodedError(sqlstate="23505")  # type: ignore[attr-defined]
    error.__cause__ = CodedError(sqlstate="40001")
    assert sqlstate_of(error) == "23505"


def test_sqlstate_of_does_not_follow_the_context():
    error = RuntimeError("outer")
    error.__context__ = CodedError(sqlstate="23505")
    assert sqlstate_of(error) is None


def test_sqlstate_of_a_plain_error_is_none():
    assert sqlstate_of(ValueError("x")) is None


def test_sqlstate_of_a_cycle_ends():
    first, second = RuntimeError("a"), RuntimeError("b")
    first.__cause__, second.__cause__ = second, first
    assert sqlstate_of(first) is None


# ---- server_terminated ------------------------------------------------------------------------


@pytest.mark.parametrize("code", ["08003", "08006", "08000", "57P01", "57P02", "57P03"])
def test_a_connection_exception_or_shutdown_is_a_terminated_server(code):
    assert server_terminated(CodedError(sqlstate=code)) == code


@pytest.mark.parametrize("code", ["57P04", "57014", "23505", "40001", "X0800"])
def test_other_codes_are_not_a_terminated_server(code):
    assert server_terminated(CodedError(sqlstate=code)) is None


def test_a_terminated_server_is_read_from_a_pgcode():
    assert server_terminated(PgCodedError(pgcode="57P01")) == "57P01"


def test_a_terminated_server_is_found_behind_the_context():
    # SQLAlchemy's "Can't reconnect until invalid transaction is rolled back", explained behind
    error = wrapped(CodedError("cannot reconnect", sqlstate="25000"))
    error.__context__ = wrapped(CodedError("connection is closed", sqlstate="08003"))
    assert server_terminated(error) == "08003"


def test_a_terminated_server_is_found_behind_the_cause_of_a_wrapped_error():
    inner = RuntimeError("inner")
    inner.__cause__ = CodedError(sqlstate="57P02")
    assert server_terminated(wrapped(inner)) == "57P02"


def test_an_error_seen_twice_in_the_chain_does_not_hide_the_rest():
    shared = RuntimeError("met twice")
    error = RuntimeError("outer")
    error.__cause__ = CodedError(sqlstate="57P01")
    error.__context__ = shared
    error.orig = shared  # type: ignore[attr-defined]
    assert server_terminated(error) == "57P01"


def test_a_chain_without_a_termination_says_none():
    error = RuntimeError("outer")
    error.__cause__ = CodedError(sqlstate="23505")
    error.orig = "not an exception"  # type: ignore[attr-defined]
    assert server_terminated(error) is None


def test_a_context_cycle_ends():
    first, second = RuntimeError("a"), RuntimeError("b")
    first.__context__, second.__context__ = second, first
    assert server_terminated(first) is None


# ---- translate --------------------------------------------------------------------------------


def test_a_terminated_server_is_a_storage_error_pointing_at_the_server_log():
    error = translate(wrapped(CodedError("terminating connection", sqlstate="57P01")), "recall")
    assert type(error) is StorageError
    assert str(error) == (
        "recall failed: the PostgreSQL server process terminated or dropped the connection "
        "(SQLSTATE 57P01); the server's log says why"
    )


def test_a_pooler_refusing_a_startup_parameter_is_a_configuration_error_naming_it():
    # what asyncpg raises when PgBouncer refuses the start-up packet: a protocol violation
    # (08P01), which alone would read as a terminated server with an unrelated log
    refusal = CodedError("unsupported startup parameter: plan_cache_mode", sqlstate="08P01")
    error = translate(wrapped(refusal), "opening the stores")
    assert type(error) is ConfigurationError
    assert str(error) == (
        "opening the stores failed: the connection pooler refused the startup parameter "
        "'plan_cache_mode'; behind a transaction-mode pooler (PgBouncer and the like) open the "
        "stores with pooling='transaction' (docs/postgres.md, 'Behind a connection pooler')"
    )
    assert _errors.pooler_refusal(wrapped(refusal)) == "plan_cache_mode"
    assert _errors.pooler_refusal(CodedError("terminating connection", sqlstate="57P01")) is None


def test_a_statement_prepared_on_another_server_connection_points_at_pooler_mode():
    error = translate(
        CodedError('prepared statement "__asyncpg_stmt_1__" does not exist', sqlstate="26000"),
        "search",
    )
    assert type(error) is StorageError
    assert str(error).startswith('search failed: prepared statement "__asyncpg_stmt_1__" does')
    assert "pooling='transaction'" in str(error)


def test_a_terminated_embedded_server_names_its_logs(monkeypatch):
    logs = {Path("/tmp/pg/a"): Path("/tmp/pg/a.log"), Path("/tmp/pg/b"): Path("/tmp/pg/b.log")}
    monkeypatch.setattr(_errors, "SERVER_LOGS", logs)
    error = translate(CodedError(sqlstate="08003"), "remember")
    assert str(error) == (
        "remember failed: the PostgreSQL server process terminated or dropped the connection "
        "(SQLSTATE 08003); the embedded server's log is /tmp/pg/a.log, /tmp/pg/b.log"
    )


def test_a_unique_violation_is_a_conflict_with_the_first_line_of_the_driver_message():
    error = translate(wrapped(CodedError("duplicate key\nDETAIL: Key (id)=(e1)", "23505")), "put")
    assert type(error) is ConflictError
    assert str(error) == "put failed: duplicate key"


@pytest.mark.parametrize("code", ["42P01", "42704", "3F000", "42883", "42703"])
def test_a_missing_object_is_a_configuration_error_asking_for_migrations(code):
    error = translate(wrapped(CodedError("relation does not exist", code)), "recall")
    assert type(error) is ConfigurationError
    assert str(error) == (
        "recall failed: relation does not exist (is the schema migrated? run the prism_memory "
        "Alembic revisions, or drop skip_migrations=True)"
    )


def test_a_data_exception_naming_dimensions_is_a_dimension_mismatch():
    error = translate(wrapped(CodedError("expected 384 dimensions, not 3", "22000")), "put")
    assert type(error) is DimensionMismatchError
    assert str(error) == "put failed: expected 384 dimensions, not 3"


@pytest.mark.parametrize("code", ["22P02", "22003", "23503", "23514", "23502"])
def test_other_data_and_integrity_errors_are_validation_errors(code):
    error = translate(wrapped(CodedError("bad value", code)), "put")
    assert type(error) is ValidationError
    assert str(error) == "put failed: bad value"


@pytest.mark.parametrize("code", ["40001", "53100", "XX000", None])
def test_anything_else_is_a_storage_error(code):
    error = translate(wrapped(CodedError("something broke", code)), "claim")
    assert type(error) is StorageError
    assert str(error) == "claim failed: something broke"


def test_the_detail_of_an_unwrapped_error_is_its_own_first_line():
    error = translate(OSError("  connection refused\nretrying  "), "connect")
    assert str(error) == "connect failed: connection refused"


def test_an_error_without_text_gives_the_action_alone():
    assert str(translate(TimeoutError(), "claim")) == "claim failed"


@pytest.mark.parametrize("text", ["", "   ", "\n"])
def test_a_wrapped_error_without_text_gives_the_action_alone(text):
    error = translate(wrapped(CodedError(text, "40001")), "claim")
    assert type(error) is StorageError
    assert str(error) == "claim failed"


def test_a_blank_error_gives_the_action_alone():
    assert str(translate(RuntimeError("  \n "), "claim")) == "claim failed"


def test_a_value_the_driver_quotes_is_never_repeated():
    orig = CodedError(
        "invalid input for query argument $2: 'sk-secret-123' (expected str)", "22P02"
    )
    error = translate(wrapped(orig), "put")
    assert type(error) is ValidationError
    assert str(error) == "put failed: invalid input for query argument $2: (value not shown)"


# ---- wrap_db_errors ---------------------------------------------------------------------------


def test_nothing_raised_passes_through():
    with wrap_db_errors("recall"):
        value = 1
    assert value == 1


def test_our_own_error_passes_unchanged():
    ours = ValidationError("already ours")
    with pytest.raises(ValidationError) as raised, wrap_db_errors("recall"):
        raise ours
    assert raised.value is ours


@pytest.mark.parametrize(
    ("driver_error", "expected", "message"),
    [
        (wrapped(CodedError("duplicate key", "23505")), ConflictError, "put failed: duplicate key"),
        (SQLAlchemyError("pool exhausted"), StorageError, "put failed: pool exhausted"),
        (OSError("connection refused"), StorageError, "put failed: connection refused"),
        (InterfaceError("connection is closed"), StorageError, "put failed: connection is closed"),
        # asyncpg's own state error on a connection the server ended a moment ago (not an
        # InterfaceError): seen on a write racing the server's termination notice
        (
            InternalClientError("another operation (2) is in progress"),
            StorageError,
            "put failed: another operation (2) is in progress",
        ),
        (CodedError("bad value", "22P02"), ValidationError, "put failed: bad value"),
    ],
)
def test_a_driver_error_is_raised_translated_and_chained(driver_error, expected, message):
    with pytest.raises(PrismMemoryError) as raised, wrap_db_errors("put"):
        raise driver_error
    assert type(raised.value) is expected
    assert str(raised.value) == message
    assert raised.value.__cause__ is driver_error


def test_an_error_without_sqlstate_is_raised_as_it_is():
    error = KeyError("not a driver error")
    with pytest.raises(KeyError) as raised, wrap_db_errors("put"):
        raise error
    assert raised.value is error


def test_the_module_names_its_public_functions():
    assert sorted(_errors.__all__) == [
        "pooler_refusal",
        "server_terminated",
        "sqlstate_of",
        "translate",
        "wrap_db_errors",
    ]
