"""Fixtures of the framework-integration tests: stores on both backends, offline embeddings."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from typing import Any

import numpy as np
import pytest
from langchain_core.embeddings import Embeddings

from prism_memory.integrations.langgraph import PrismStore


class CharacterEmbeddings(Embeddings):
    """Offline, deterministic embeddings: a text's character histogram over ``dims`` buckets
    (``ord(c) % dims``), L2-normalised. Texts sharing characters are close, as LangGraph's own
    store tests need."""

    def __init__(self, dims: int) -> None:
        self.dims = dims

    def _one(self, text: str) -> list[float]:
        vector = np.zeros(self.dims)
        for character in text:
            vector[ord(character) % self.dims] += 1.0
        norm = float(np.linalg.norm(vector))
        return (vector / norm if norm else vector).tolist()

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        return [self._one(text) for text in texts]

    def embed_query(self, text: str) -> list[float]:
        return self._one(text)


@pytest.fixture
def fake_embeddings() -> CharacterEmbeddings:
    return CharacterEmbeddings(dims=500)


MakeStore = Callable[..., AbstractAsyncContextManager[PrismStore]]


class Racer:
    """Arms ``vector_store`` (of either backend) so that ``racer`` runs right before its first
    ``method`` call (default ``put_entries``) on ``thread``: after the PrismStore writing there
    has read the key, before it writes."""

    def __init__(self, vector_store: Any, thread: str, method: str = "put_entries") -> None:
        self.racer: Callable[[], Awaitable[Any]] | None = None
        original = getattr(vector_store, method)

        async def raced(scope: Any, *args: Any, **options: Any) -> Any:
            if scope.thread_id == thread and self.racer is not None:
                racer, self.racer = self.racer, None
                await racer()
            return await original(scope, *args, **options)

        setattr(vector_store, method, raced)


@pytest.fixture
def arm_race() -> type[Racer]:
    """:class:`Racer`: ``race = arm_race(vector_store, thread)``, then ``race.racer = ...``."""
    return Racer


@pytest.fixture
def store_on(request: pytest.FixtureRequest) -> Callable[[str], MakeStore]:
    """``store_on("memory" | "postgres")``: the :data:`MakeStore` factory of that backend."""

    def factory(backend: str) -> MakeStore:
        if backend == "memory":

            @asynccontextmanager
            async def in_memory(**kwargs: Any) -> AsyncIterator[PrismStore]:
                yield PrismStore(**kwargs)

            return in_memory
        url: str = request.getfixturevalue("postgres_url")
        make_postgres_stores = request.getfixturevalue("make_postgres_stores")

        @asynccontextmanager
        async def on_postgres(**kwargs: Any) -> AsyncIterator[PrismStore]:
            schema = f"lg_test_{uuid.uuid4().hex[:12]}"
            async with PrismStore.from_conn_string(url, schema=schema, **kwargs) as store:
                await store.setup()  # creates the schema
                # handing the schema to make_postgres_stores has it dropped at teardown
                index = kwargs.get("index") or {}
                await (
                    await make_postgres_stores(schema=schema, dimension=index.get("dims"))
                ).close()
                yield store

        return on_postgres

    return factory


@pytest.fixture(params=["memory", "postgres"])
def make_store(request: pytest.FixtureRequest, store_on: Callable[[str], MakeStore]) -> MakeStore:
    """``async with make_store(index=...) as store``: an empty :class:`PrismStore`, in memory or
    on PostgreSQL through ``from_conn_string`` (a fresh schema, ``setup()`` run)."""
    return store_on(request.param)
