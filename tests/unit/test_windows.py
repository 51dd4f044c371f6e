"""The embedder's window and long texts embedded whole (``prism_memory.windows``)."""

from __future__ import annotations

import itertools
import re
from collections.abc import Sequence
from datetime import UTC, datetime

import numpy as np
import pytest

from prism_memory import HashEmbedder, create_memory
from prism_memory.embedding import (
    DEFAULT_WINDOW_CHARS,
    EmbedderWindow,
    check_embedder,
    embed_batched,
    embedder_window,
)
from prism_memory.errors import CapExceededError, ConfigurationError, InvalidVectorError
from prism_memory.models import Candidate, MemoryRecord
from prism_memory.ranking import rerank
from prism_memory.testing import FirstWordsEmbedder
from prism_memory.windows import (
    WINDOW_MARGIN,
    WindowedVector,
    effective_cosine,
    embed_entries,
    embed_whole,
    split_windows,
)

WORD = re.compile(r"\S+")


def prose(words: int) -> str:
    """``words`` distinct words in sentences of eight and paragraphs of five sentences."""
    out: list[str] = []
    for at in range(words):
        out.append(f"w{at}")
        if at % 8 == 7:
            out[-1] += "."
            if at % 40 == 39:
                out[-1] += "\n\n"
    return " ".join(out).strip()


class Declared:
    """An embedder double with whatever window attributes a test gives it."""

    def __init__(self, **window: object) -> None:
        self.dimensions = 8
        self.model = "declared@1"
        self.batches: list[list[str]] = []
        for name, value in window.items():
            setattr(self, name, value)

    async def embed(self, texts: Sequence[str]) -> np.ndarray:
        self.batches.append(list(texts))
        return await HashEmbedder(8).embed(texts)


# ---- the split -----------------------------------------------------------------------------------


def test_a_text_within_the_window_is_its_only_window_unchanged() -> None:
    text = "  Ada   keeps bees.\n\nShe  sells honey.  "
    assert split_windows(text, len(text)) == [text]  # whitespace kept: embedded as today
    assert split_windows("x" * 1000, 1000) == ["x" * 1000]


@pytest.mark.parametrize(("words", "size"), [(1500, 1000), (300, 120), (90, 16), (2000, 16000)])
def test_every_word_lands_in_a_window_that_fits(words: int, size: int) -> None:
    text = prose(words)
    windows = split_windows(text, size)
    assert all(len(window) <= size for window in windows)
    seen = {word for window in windows for word in WORD.findall(window)}
    assert seen == set(WORD.findall(text))  # nothing dropped
    if len(text) > size:
        assert len(windows) > 1
        assert len(windows) <= 2 * len(text) // (size - size // 8) + 2  # bounded by the length


def test_windows_keep_order_and_overlap_by_whole_sentences() -> None:
    text = prose(1500)
    windows = split_windows(text, 1000)
    firsts = [int(WORD.findall(window)[0][1:].rstrip(".")) for window in windows]
    assert firsts == sorted(firsts)
    assert len(set(firsts)) == len(firsts)
    for before, after in itertools.pairwise(windows):
        shared = set(WORD.findall(before)) & set(WORD.findall(after))
        assert 0 < len(" ".join(sorted(shared))) <= 1000 // 8 + 8  # a sentence or more, capped


def test_a_word_longer_than_the_window_is_cut_not_dropped() -> None:
    word = "z" * 50
    windows = split_windows(f"start {word} end", 16)
    assert "".join(windows).replace(" ", "").count("z") == 50
    assert all(len(window) <= 16 for window in windows)


def test_a_text_needing_too_many_windows_is_refused_not_truncated() -> None:
    with pytest.raises(CapExceededError):
        split_windows("word " * 20_000, 16)


# ---- the declaration -----------------------------------------------------------------------------


def test_an_embedder_that_says_nothing_gets_the_default_window() -> None:
    assert embedder_window(Declared()) == EmbedderWindow(DEFAULT_WINDOW_CHARS, None, False)
    assert DEFAULT_WINDOW_CHARS == 1000
    assert embedder_window(Declared(max_chars=None, max_tokens=None)).chars == 1000


def test_a_declared_window_is_used() -> None:
    assert embedder_window(Declared(max_chars=500)) == EmbedderWindow(500, None, True, 500)
    assert embedder_window(Declared(max_tokens=254)) == EmbedderWindow(762, 254, True, None)
    assert embedder_window(Declared(max_tokens=254, max_chars=600)).chars == 600
    assert embedder_window(Declared(max_tokens=254, max_chars=6000)).chars == 762
    assert embedder_window(Declared(max_tokens=2)).chars == 16  # never under the smallest window


def test_the_hash_embedder_reads_any_text_whole() -> None:
    assert embedder_window(HashEmbedder(8)).chars >= 2**30
    assert split_windows(prose(20_000), embedder_window(HashEmbedder(8)).chars) == [prose(20_000)]


@pytest.mark.parametrize(
    "window",
    [
        {"max_chars": 15},
        {"max_chars": 0},
        {"max_chars": True},
        {"max_chars": 100.0},
        {"max_chars": "1000"},
        {"max_tokens": 0},
        {"max_tokens": -5},
        {"max_tokens": False},
    ],
)
def test_a_bad_declaration_is_refused_at_set_up(window: dict[str, object]) -> None:
    with pytest.raises(ConfigurationError, match=next(iter(window))):
        check_embedder(Declared(**window))
    with pytest.raises(ConfigurationError):
        create_memory(tenant_id="t", resource_id="r", thread_id="c", embedder=Declared(**window))


def test_a_sync_token_counter_is_refused_at_set_up() -> None:
    embedder = Declared(max_tokens=10, count_tokens=lambda texts: [1 for _ in texts])
    with pytest.raises(ConfigurationError, match="count_tokens"):
        check_embedder(embedder)


# ---- embedding whole -----------------------------------------------------------------------------


async def test_texts_within_the_window_get_exactly_todays_vectors() -> None:
    embedder = Declared()
    texts = ["Ada keeps bees", "x " * 499, prose(100)[:1000]]
    whole = await embed_whole(embedder, texts, batch_size=2)
    plain = await embed_batched(Declared(), texts, batch_size=2)
    assert whole.tobytes() == plain.tobytes()  # bit for bit
    assert embedder.batches == [texts[:2], texts[2:]]  # as they were given


async def test_a_long_entry_keeps_its_first_window_as_its_vector_and_its_later_windows() -> None:
    embedder = Declared(max_chars=300)
    long, short = prose(400), "Ada keeps bees"
    made = await embed_entries(embedder, [short, long], batch_size=4)
    windows = split_windows(long, 300)
    assert len(windows) > 3
    sent = [text for batch in embedder.batches for text in batch]
    assert sent == [short, *windows]
    assert all(len(batch) <= 4 for batch in embedder.batches)
    parts = await HashEmbedder(8).embed(windows)
    np.testing.assert_array_equal(made[0], (await HashEmbedder(8).embed([short]))[0])
    entry = made[1]
    assert isinstance(entry, WindowedVector)
    np.testing.assert_array_equal(entry.vector, parts[0])  # what the model saw of it before
    np.testing.assert_array_equal(entry.windows, parts[1:])
    assert entry.vector.dtype == entry.windows.dtype == np.float32
    # a query (or another model's vector) is the first window's alone; only it is embedded
    queried = Declared(max_chars=300)
    vectors = await embed_whole(queried, [short, long], batch_size=4)
    np.testing.assert_array_equal(vectors[1], parts[0])
    assert [t for batch in queried.batches for t in batch] == [short, windows[0]]


async def test_entries_within_the_window_get_exactly_todays_vectors() -> None:
    texts = ["Ada keeps bees", "x " * 499]
    made = await embed_entries(Declared(), texts, batch_size=2)
    plain = await embed_batched(Declared(), texts, batch_size=2)
    assert all(isinstance(vector, np.ndarray) for vector in made)
    assert np.stack(made).tobytes() == plain.tobytes()


def test_the_effective_cosine_gives_later_windows_the_margin() -> None:
    assert WINDOW_MARGIN == 0.15
    assert effective_cosine(0.4, []) == 0.4  # a short entry: its cosine as it is
    assert effective_cosine(0.4, [0.5]) == 0.4  # a later window must beat the first by δ
    assert effective_cosine(0.4, [0.2, 0.9]) == pytest.approx(0.75)  # the last paragraph's fact
    assert effective_cosine(-0.3, [-0.1]) == pytest.approx(-0.25)  # only later windows pay δ


def test_the_rerank_scores_an_entry_by_its_best_window_with_the_margin() -> None:
    now = datetime(2026, 1, 1, tzinfo=UTC)

    def record(entry_id: str, sequence: int) -> MemoryRecord:
        return MemoryRecord(
            tenant_id="t", resource_id="r", thread_id="th", id=entry_id, text="x",
            role="user", metadata={}, consent=None, sequence=sequence, occurred_at=now,
            created_at=now, written_at=now, importance=0.0,
        )  # fmt: skip

    query = np.array([1.0, 0.0, 0.0], dtype=np.float32)
    first = np.array([0.6, 0.8, 0.0], dtype=np.float32)  # cosine 0.6
    later = np.array([[0.0, 0.0, 1.0], [1.0, 0.0, 0.0]], dtype=np.float32)  # cosines 0, 1

    def semantic(*candidates: Candidate) -> dict[str, float]:
        hits = rerank(candidates, query_vector=query, query_text="x", top_k=5, now=now)
        return {hit.id: hit.semantic for hit in hits}

    short = Candidate(record("short", 0), first)
    long = Candidate(record("long", 1), first, windows=later)
    close = Candidate(record("close", 2), first, windows=later[:1].copy())
    found = semantic(short, long, close)
    assert found["short"] == pytest.approx(0.6)  # unchanged without windows
    assert found["long"] == pytest.approx(1.0 - WINDOW_MARGIN)  # 1 − δ > 0.6
    assert found["close"] == pytest.approx(0.6)  # a later window below the first counts nothing
    assert semantic(short) == {"short": pytest.approx(0.6)}  # the no-window path


async def test_an_embedder_that_counts_tokens_gets_windows_that_fit() -> None:
    embedder = FirstWordsEmbedder(8, window=50)
    fits = " ".join(["longword"] * 50)  # 449 characters, 50 tokens: one window
    over = prose(1500)
    await embed_entries(embedder, [fits, over])
    assert embedder.seen[0] == fits
    pieces = embedder.seen[1:]
    assert len(pieces) > 1
    assert all(len(piece.split()) <= 50 for piece in pieces)  # each read whole
    assert {w.rstrip(".") for piece in pieces for w in piece.split()} == {
        w.rstrip(".") for w in over.lower().split()
    }


async def test_windows_over_the_count_are_split_again_until_they_fit() -> None:
    class Dense(FirstWordsEmbedder):
        async def count_tokens(self, texts: Sequence[str]) -> list[int]:
            return [len(text) for text in texts]  # a character a token: 3 per token is too many

    embedder = Dense(8, window=40)
    text = prose(300)
    await embed_entries(embedder, [text])
    assert len(embedder.seen) > 1
    assert all(len(piece) <= 40 for piece in embedder.seen)


async def test_a_counter_that_answers_nonsense_is_an_error() -> None:
    class Broken(FirstWordsEmbedder):
        async def count_tokens(self, texts: Sequence[str]) -> list[int]:
            return [1]

    with pytest.raises(InvalidVectorError, match="count_tokens"):
        await embed_entries(Broken(8, window=10), [prose(100), prose(50)])


async def test_the_double_reads_only_its_window_like_a_transformer() -> None:
    cut = FirstWordsEmbedder(8, window=10, declare="wrong")
    await cut.embed([prose(100)])
    assert len(cut.seen[0].split()) == 10
    default = FirstWordsEmbedder(8, declare="nothing")
    assert embedder_window(default).declared is False
    await default.embed([prose(1000)])
    assert len(default.seen[0]) < DEFAULT_WINDOW_CHARS


async def test_a_declared_max_chars_holds_for_an_embedder_that_counts_too() -> None:
    class Both(FirstWordsEmbedder):
        max_chars = 100

    embedder = Both(8, window=1000)  # 1,000 words fit its tokens, not its 100 characters
    text = prose(60)
    assert len(text) > 100
    await embed_entries(embedder, [text])
    assert len(embedder.seen) > 1
    assert all(len(piece) <= 100 for piece in embedder.seen)
