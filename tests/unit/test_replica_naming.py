"""How a failing read replica is named in an error or a log line: where it is, never who logs in
(issue 46, item 3)."""

from __future__ import annotations

import pytest

from prism_memory.errors import ConfigurationError
from prism_memory.postgres import create_postgres_memory_stores
from prism_memory.postgres._engine import create_engine
from prism_memory.postgres._replica import describe_endpoint


async def test_a_replica_is_named_by_host_port_and_database_only():
    engine = create_engine(
        "postgresql://reader:s3cret-pw@replica.internal:5433/app?sslmode=require", pooled=False
    )
    try:
        assert describe_endpoint(engine) == "replica.internal:5433/app"
    finally:
        await engine.dispose()


async def test_a_socket_replica_is_named_by_its_directory():
    engine = create_engine("postgresql://reader:pw@/app?host=/run/pg&port=5434", pooled=False)
    try:
        name = describe_endpoint(engine)
    finally:
        await engine.dispose()
    assert name == "/run/pg:5434/app"
    assert "reader" not in name


@pytest.mark.parametrize(
    ("setting", "value"),
    [
        ("replica_timeout_seconds", 0.01),
        ("replica_timeout_seconds", float("nan")),
        ("replica_timeout_seconds", True),
        ("replica_retry_seconds", -1),
        ("replica_retry_seconds", "5"),
    ],
)
async def test_replica_bounds_are_checked_before_anything_connects(setting, value):
    url = "postgresql://reader@/nowhere?host=/nonexistent-socket-dir"
    with pytest.raises(ConfigurationError) as raised:
        await create_postgres_memory_stores(url, read_url=url, **{setting: value})
    assert setting in str(raised.value)
    assert str(value) not in str(raised.value)
