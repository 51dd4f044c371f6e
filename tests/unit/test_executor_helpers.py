"""The executor's small pure helpers (``prism_memory.postgres._executor``; issue 47's mutation run):
binds in order, the row count of a command status or a result, and which driver errors mean a lost
connection (stand-in driver errors and connections: no database)."""

from __future__ import annotations

from types import SimpleNamespace

import asyncpg
import pytest

from prism_memory.postgres._engine import connection_lost as _connection_lost
from prism_memory.postgres._executor import _bound, _changed, rowcount


class CodedError(Exception):
    def __init__(self, sqlstate: str) -> None:
        super().__init__("boom")
        self.sqlstate = sqlstate


class Driver:
    def __init__(self, closed: bool = False) -> None:
        self.closed = closed

    def is_closed(self) -> bool:
        return self.closed


def test_bound_orders_the_arguments_as_the_placeholders() -> None:
    assert _bound("SELECT :b, :a, :b", {"a": 1, "b": 2}) == ("SELECT $1, $2, $1", [2, 1])
    assert _bound("SELECT 1", None) == ("SELECT 1", [])
    with pytest.raises(KeyError):
        _bound("SELECT :a", None)


def test_changed_reads_a_command_status() -> None:
    assert _changed("UPDATE 3") == 3
    assert _changed("INSERT 0 12") == 12
    assert _changed("DELETE 0") == 0
    assert _changed("BEGIN") == 0
    assert _changed("SELECT 1") == 1


def test_rowcount_of_a_result() -> None:
    assert rowcount(SimpleNamespace(rowcount=4)) == 4
    assert rowcount(SimpleNamespace(rowcount=-1)) == 0
    assert rowcount(SimpleNamespace(rowcount=None)) == 0
    assert rowcount(SimpleNamespace(rowcount=0)) == 0
    assert rowcount(object()) == 0


@pytest.mark.parametrize(
    ("error", "lost"),
    [
        (asyncpg.exceptions.ConnectionDoesNotExistError("gone"), True),
        (asyncpg.exceptions.InternalClientError("bad"), True),
        (ConnectionResetError("reset"), True),
        (CodedError("08006"), True),
        (CodedError("57P01"), True),
        (CodedError("57014"), False),  # query_canceled: the connection is fine
        (CodedError("23505"), False),
        (ValueError("not a driver error"), False),
    ],
)
def test_which_errors_mean_a_lost_connection(error: BaseException, lost: bool) -> None:
    assert _connection_lost(error, Driver()) is lost
    assert _connection_lost(error, Driver(closed=True)) is True
    assert _connection_lost(error, None) is True
