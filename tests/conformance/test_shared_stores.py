"""``run_memory_conformance`` with a factory that hands every check the same stores -- what a host
adapter on one database does: each check works under a fresh tenant and leaves the store-wide
state (generations, entries of another model, leases) as it found it, so none depends on what an
earlier check wrote."""

from __future__ import annotations

import logging

import pytest

from prism_memory import HashEmbedder, InMemoryVectorStore, InMemoryWorkingStore
from prism_memory.testing import ConformanceKit, run_memory_conformance


@pytest.fixture(params=["memory", "postgres"])
async def shared(request: pytest.FixtureRequest) -> ConformanceKit:
    embedder = HashEmbedder(dimensions=64)
    if request.param == "memory":
        return ConformanceKit(embedder, InMemoryVectorStore(), InMemoryWorkingStore())
    stores = await request.getfixturevalue("make_postgres_stores")(dimension=64)
    return ConformanceKit(embedder, stores.vector_store, stores.working_store)


async def test_every_check_passes_on_one_shared_pair_of_stores(
    shared: ConformanceKit, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.CRITICAL)  # the checks' own failing embedders log on purpose
    await run_memory_conformance(lambda: shared)
