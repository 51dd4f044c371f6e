"""Fixtures of the command-line tests (plain sync tests that run ``prism-memory`` in a subprocess)."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Iterator

import pytest
from sqlalchemy import text

from prism_memory.postgres._engine import create_engine


@pytest.fixture
def schema(postgres_url: str) -> Iterator[str]:
    """A fresh schema name for a command to create; dropped (``CASCADE``) after the test."""
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
