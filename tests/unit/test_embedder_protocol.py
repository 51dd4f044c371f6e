"""The Embedder protocol is checked when a memory is created, not in the background queue."""

from __future__ import annotations

import functools
from collections.abc import Sequence

import numpy as np
import pytest

from prism_memory import HashEmbedder, check_embedder, create_memory
from prism_memory.errors import ConfigurationError, DimensionMismatchError, ValidationError


def _memory(embedder: object):
    return create_memory(tenant_id="t", resource_id="r", thread_id="c", embedder=embedder)  # type: ignore[arg-type]


class SyncEmbedder:
    dimensions = 4

    def embed(self, texts: Sequence[str]):
        return np.ones((len(texts), 4), dtype=np.float32)


class NoDimensions:
    async def embed(self, texts: Sequence[str]):
        return np.ones((len(texts), 4), dtype=np.float32)


class Dimensions:
    def __init__(self, width: object) -> None:
        self.dimensions = width

    async def embed(self, texts: Sequence[str]):
        return np.ones((len(texts), 4), dtype=np.float32)


class NotCallable:
    dimensions = 4
    embed = "not a method"


class NoEmbed:
    dimensions = 4


class AsyncCallable:
    async def __call__(self, texts: Sequence[str]):
        return np.ones((len(texts), 4), dtype=np.float32)


class CallableObjectEmbedder:
    dimensions = 4
    embed = AsyncCallable()


class SyncCallable:
    def __call__(self, texts: Sequence[str]):
        return np.ones((len(texts), 4), dtype=np.float32)


class SyncCallableObjectEmbedder:
    dimensions = 4
    embed = SyncCallable()


class PartialEmbedder:
    dimensions = 4

    def __init__(self) -> None:
        self.embed = functools.partial(self._embed, scale=2.0)

    async def _embed(self, texts: Sequence[str], scale: float):
        return np.full((len(texts), 4), scale, dtype=np.float32)


class Named(HashEmbedder):
    def __init__(self, model: object) -> None:
        super().__init__(dimensions=8)
        self.model = model


def test_a_sync_embedder_fails_at_create_memory():
    with pytest.raises(ConfigurationError, match="coroutine function"):
        _memory(SyncEmbedder())


def test_a_sync_callable_object_as_embed_fails_at_create_memory():
    with pytest.raises(ConfigurationError, match="coroutine function"):
        _memory(SyncCallableObjectEmbedder())


@pytest.mark.parametrize(
    ("embedder", "message"),
    [
        (NoDimensions(), "no 'dimensions'"),
        (Dimensions(0), "positive integer"),
        (Dimensions(-3), "positive integer"),
        (Dimensions(True), "positive integer"),
        (Dimensions(4.0), "positive integer"),
        (Dimensions("4"), "positive integer"),
        (Dimensions(None), "positive integer"),
        (NotCallable(), "callable"),
        (NoEmbed(), "no 'embed'"),
        (object(), "no 'dimensions'"),
    ],
)
def test_wrong_shaped_embedders_fail_at_create_memory(embedder, message):
    with pytest.raises(ConfigurationError, match=message):
        _memory(embedder)


@pytest.mark.parametrize("model", ["", "   ", 7, "x" * 257, "line\nbreak"])
def test_an_invalid_model_identifier_fails_at_create_memory(model):
    with pytest.raises(ConfigurationError, match=r"embedder\.model"):
        _memory(Named(model))


def test_valid_embedders_pass_and_report_width_and_model():
    assert check_embedder(HashEmbedder(dimensions=12)) == (12, "hash-v1-12")
    assert check_embedder(Named("text-embedding-3-small@2024")) == (
        8,
        "text-embedding-3-small@2024",
    )
    assert check_embedder(CallableObjectEmbedder()) == (4, None)
    assert check_embedder(PartialEmbedder()) == (4, None)
    memory = _memory(Named("m@1"))
    assert memory.embedding_model == "m@1"


async def test_an_async_partial_embedder_really_embeds():
    memory = _memory(PartialEmbedder())
    async with memory:
        await memory.remember({"id": "a", "text": "hello"}, wait=True)
        assert (await memory.get("a")).status == "indexed"


def test_a_width_mismatch_with_a_pinned_store_is_still_a_dimension_error():
    from prism_memory import InMemoryVectorStore

    with pytest.raises(DimensionMismatchError):
        create_memory(
            tenant_id="t",
            resource_id="r",
            thread_id="c",
            embedder=HashEmbedder(dimensions=8),
            vector_store=InMemoryVectorStore(dimension=16),
        )


async def test_the_context_provider_waits_for_pending_writes_when_asked():
    memory = _memory(HashEmbedder(dimensions=16))
    async with memory:
        await memory.remember({"id": "a", "text": "the umbrella is by the door"})
        provider = memory.context_provider(working=False, include_pending=True)
        text = await provider.render("where is the umbrella?")
        assert "the umbrella is by the door" in text
    with pytest.raises(ValidationError, match="include_pending"):
        memory.context_provider(include_pending=-1)
