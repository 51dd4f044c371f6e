"""A large ``remember`` leaves the event loop free past its tokenizing too (issue 46 item 1, the
load benchmark): its texts are split into the embedder's windows on worker threads, the embedder's
batches let the loop run between them, and ``HashEmbedder`` embeds a large batch off the loop.
Small inputs stay on the loop; the results are the same either way."""

from __future__ import annotations

import asyncio
import random
import string
import threading
from collections.abc import AsyncIterator, Sequence
from typing import Any

import numpy as np
import pytest

from prism_memory import HashEmbedder, InMemoryVectorStore, create_memory, embedding, windows
from prism_memory._offload import OFFLOAD_CHARS
from prism_memory.embedding import embed_batched, embedder_window
from prism_memory.models import Vector

BACKENDS = [pytest.param("memory", id="memory"), pytest.param("postgres", id="postgres")]


def _distinct_words(seed: int, chars: int) -> str:
    rng = random.Random(seed)
    words: list[str] = []
    size = 0
    while size < chars - 12:
        word = "".join(rng.choice(string.ascii_lowercase) for _ in range(rng.randint(4, 10)))
        words.append(word)
        size += len(word) + 1
    return " ".join(words)[:chars]


class WindowedEmbedder:
    """HashEmbedder's vectors behind a window of 1,000 characters (a long text is split)."""

    max_chars = 1_000
    dimensions = 64
    model = "windowed-hash-64"

    def __init__(self) -> None:
        self._hash = HashEmbedder(dimensions=64)

    async def embed(self, texts: Sequence[str]) -> Vector:
        return np.stack([self._hash.embed_one(text) for text in texts])


@pytest.fixture(params=BACKENDS)
def backend(request: pytest.FixtureRequest) -> str:
    if request.param == "postgres":
        request.applymarker(pytest.mark.postgres)
    return str(request.param)


@pytest.fixture
async def vector_store(request: pytest.FixtureRequest, backend: str) -> AsyncIterator[Any]:
    if backend == "memory":
        yield InMemoryVectorStore(dimension=64)
        return
    make = request.getfixturevalue("make_postgres_stores")
    stores = await make(dimension=64)
    try:
        yield stores.vector_store
    finally:
        await stores.close()


async def test_a_large_batch_is_split_into_windows_off_the_event_loop(
    vector_store: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every split of the batch's long texts runs on another thread than the event loop's (on
    the old code each ran on the loop: ~0.1 s for 100 texts of 16,000 characters); a small
    input's split stays on the loop; the entries are recalled by any window as before."""
    splits: list[tuple[int, int]] = []
    real = windows.chunk_text

    def recorded(text: str, *, size: int, overlap: int) -> list[str]:
        splits.append((threading.get_ident(), len(text)))
        return real(text, size=size, overlap=overlap)

    monkeypatch.setattr(windows, "chunk_text", recorded)
    memory = create_memory(
        tenant_id="t",
        resource_id="r",
        thread_id="big",
        embedder=WindowedEmbedder(),
        vector_store=vector_store,
    )
    loop_thread = threading.get_ident()
    small = [_distinct_words(100 + seed, 3_000) for seed in range(2)]
    await memory.remember([{"text": text} for text in small], wait=True)
    assert splits
    assert {thread for thread, _ in splits} == {loop_thread}  # small: in place
    splits.clear()
    texts = [_distinct_words(seed, 16_000) for seed in range(8)]
    assert sum(map(len, texts)) > OFFLOAD_CHARS
    await memory.remember([{"text": text} for text in texts], wait=True)
    long_splits = [thread for thread, size in splits if size > 15_000]
    assert len(long_splits) >= len(texts)
    assert loop_thread not in long_splits
    late = " ".join(texts[5].split()[-30:])  # words of the text's last window only
    result = await memory.recall(late, top_k=3)
    assert texts[5] in [hit.text for hit in result.hits]


async def test_windows_made_off_the_loop_are_the_ones_made_in_place() -> None:
    embedder = WindowedEmbedder()
    texts = [_distinct_words(seed, 16_000) for seed in range(4)]
    made = await windows._windows(embedder, embedder_window(embedder), texts)
    assert made == [windows.split_windows(text, 1_000) for text in texts]


async def test_the_embedders_batches_let_the_event_loop_run_between_them() -> None:
    """An embedder that computes without awaiting would hold the loop for the whole input; a
    ticker task now runs between its batches (on the old code every batch ran back to back)."""
    ticks = 0

    async def ticker() -> None:
        nonlocal ticks
        while True:
            ticks += 1
            await asyncio.sleep(0)

    seen: list[int] = []

    class Busy:
        dimensions = 4
        model = "busy-4"

        async def embed(self, texts: Sequence[str]) -> Vector:
            seen.append(ticks)
            return np.ones((len(texts), 4), dtype=np.float32)

    task = asyncio.create_task(ticker())
    await asyncio.sleep(0)
    try:
        vectors = await embed_batched(Busy(), ["text"] * 96, batch_size=32)
    finally:
        task.cancel()
    assert vectors.shape == (96, 4)
    assert len(seen) == 3
    assert seen[0] < seen[1] < seen[2]


async def test_hash_embedder_embeds_a_large_batch_off_the_event_loop(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Pure Python (~25 ms per 16,000 characters): a large batch is embedded on worker threads,
    a small one in place, with the same vectors."""
    embedder = HashEmbedder(dimensions=32)
    texts = [_distinct_words(seed, 16_000) for seed in range(3)]
    expected = np.stack([embedder.embed_one(text) for text in texts])
    threads: list[int] = []
    real = embedding.hash_vector

    def recorded(text: str, dimensions: int) -> Vector:
        threads.append(threading.get_ident())
        return real(text, dimensions)

    monkeypatch.setattr(embedding, "hash_vector", recorded)
    loop_thread = threading.get_ident()
    made = await embedder.embed(texts)
    assert np.array_equal(made, expected)
    assert len(threads) == len(texts)
    assert loop_thread not in threads
    threads.clear()
    await embedder.embed(["a short text", "another"])
    assert threads == [loop_thread, loop_thread]
