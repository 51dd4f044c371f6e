"""The shipped conformance suite, run on every backend (one test per check and backend)."""

from __future__ import annotations

import pytest

from prism_memory import HashEmbedder, InMemoryVectorStore, InMemoryWorkingStore
from prism_memory.testing import CONFORMANCE_CHECKS, ConformanceKit, run_conformance_check


@pytest.fixture(params=["memory", "postgres"])
async def kit(request: pytest.FixtureRequest) -> ConformanceKit:
    embedder = HashEmbedder(dimensions=64)
    if request.param == "memory":
        return ConformanceKit(embedder, InMemoryVectorStore(), InMemoryWorkingStore())
    make_postgres_stores = request.getfixturevalue("make_postgres_stores")
    stores = await make_postgres_stores(dimension=64)
    return ConformanceKit(embedder, stores.vector_store, stores.working_store)


@pytest.mark.parametrize("check", list(CONFORMANCE_CHECKS))
async def test_conformance(kit: ConformanceKit, check: str) -> None:
    await run_conformance_check(check, lambda: kit)
