"""Test doubles with real behaviour: a clock you can move, embedders that wait, fail or lie."""

from __future__ import annotations

import asyncio
import re
import time
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

import numpy as np

from ..embedding import DEFAULT_WINDOW_CHARS, Embedder

__all__ = [
    "FirstWordsEmbedder",
    "FlakyEmbedder",
    "GatedEmbedder",
    "ManualClock",
    "NonFiniteEmbedder",
]


class ManualClock:
    """A clock that follows real time from ``start`` plus whatever :meth:`advance` added."""

    def __init__(self, start: datetime | None = None) -> None:
        self._start = start or datetime.now(UTC)
        self._origin = time.monotonic()
        self._offset = timedelta()

    def __call__(self) -> datetime:
        return self._start + timedelta(seconds=time.monotonic() - self._origin) + self._offset

    def advance(self, **delta: float) -> None:
        """Move the clock forward by a :class:`~datetime.timedelta` given as keywords."""
        self._offset += timedelta(**delta)


class GatedEmbedder:
    """Wraps an embedder; every call blocks until :meth:`release` (counts texts embedded)."""

    def __init__(self, inner: Embedder) -> None:
        self._inner = inner
        self._gate = asyncio.Event()
        self.calls = 0
        self.texts: list[str] = []

    @property
    def dimensions(self) -> int:
        """The inner embedder's width."""
        return self._inner.dimensions

    def release(self) -> None:
        """Let every waiting and future call through."""
        self._gate.set()

    async def embed(self, texts: Sequence[str]) -> Any:
        """Wait for the gate, then delegate."""
        self.calls += 1
        await self._gate.wait()
        self.texts.extend(texts)
        return await self._inner.embed(texts)


class NonFiniteEmbedder:
    """Returns vectors of the right width holding ``value`` (NaN by default) for matching texts."""

    def __init__(self, inner: Embedder, *, poison: str = "", value: float = float("nan")) -> None:
        self._inner = inner
        self._poison = poison
        self._value = value

    @property
    def dimensions(self) -> int:
        """The inner embedder's width."""
        return self._inner.dimensions

    async def embed(self, texts: Sequence[str]) -> Any:
        """Embed; texts containing ``poison`` (all, when empty) get a non-finite vector."""
        vectors = np.array(await self._inner.embed(texts), dtype=np.float64)
        for row, text in enumerate(texts):
            if self._poison in text:
                vectors[row, 0] = self._value
        return vectors


class FlakyEmbedder:
    """Raises ``ConnectionError`` for its first ``failures`` calls, then delegates."""

    def __init__(self, inner: Embedder, failures: int = 1) -> None:
        self._inner = inner
        self.failures = failures
        self.calls = 0

    @property
    def dimensions(self) -> int:
        """The inner embedder's width."""
        return self._inner.dimensions

    async def embed(self, texts: Sequence[str]) -> Any:
        """Fail, or delegate."""
        self.calls += 1
        if self.calls <= self.failures:
            raise ConnectionError("embedding service unavailable")
        return await self._inner.embed(texts)


_WORD = re.compile(r"\w+")


class FirstWordsEmbedder:
    """A small concept model that, like a transformer, reads only the start of a text.

    Each word of a concept in :attr:`CONCEPTS` adds 1 to that concept's dimension (other words
    count for nothing; a text without any is the last dimension) and the vector is L2-normalised:
    texts about one concept are close whatever their words, texts about two others are
    orthogonal. What is past its window is dropped silently, as a transformer drops the tokens past
    its own. ``declare`` says what it tells about that window:

    - ``"tokens"``: ``max_tokens = window`` and ``count_tokens`` (it counts words); it reads its
      first ``window`` words;
    - ``"nothing"``: no window declared; it reads its first
      :data:`~prism_memory.embedding.DEFAULT_WINDOW_CHARS` characters (the default window);
    - ``"wrong"``: claims to read any text whole (``max_chars`` unlimited) but reads its first
      ``window`` words -- how every embedder was used before windows existed.

    Its ``model`` is the same whatever it declares, so a thread indexed by one is re-indexed by
    another (``rebuild_index``).
    """

    CONCEPTS: tuple[tuple[str, ...], ...] = (
        ("garden", "soil", "compost", "seeds", "tomatoes", "watering", "mulch", "weeds", "harvest"),
        ("passport", "visa", "embassy", "flight", "boarding", "luggage"),
        ("cello", "violin", "concert", "orchestra", "rehearsal", "symphony"),
        ("recipe", "oven", "flour", "butter", "dough", "baking"),
    )
    """The words of each concept, in dimension order."""

    def __init__(self, dimensions: int, *, window: int = 200, declare: str = "tokens") -> None:
        if declare not in ("tokens", "nothing", "wrong"):
            raise ValueError("declare must be 'tokens', 'nothing' or 'wrong'")
        self._dimensions = dimensions
        self._window = window
        self._declare = declare
        self.model = f"first-words-v1-{dimensions}"
        """The model identity recorded with every vector."""
        self._concept = {word: at for at, words in enumerate(self.CONCEPTS) for word in words}
        self.seen: list[str] = []
        """Every text it embedded, as it read it (after its cut)."""

    @property
    def dimensions(self) -> int:
        """Width of the vectors."""
        return self._dimensions

    @property
    def max_tokens(self) -> int | None:
        """The window in words when ``declare="tokens"``, else ``None``."""
        return self._window if self._declare == "tokens" else None

    @property
    def max_chars(self) -> int | None:
        """Unlimited when ``declare="wrong"`` (a false claim), else ``None``."""
        return 2**40 if self._declare == "wrong" else None

    async def count_tokens(self, texts: Sequence[str]) -> list[int]:
        """How many words each text holds (its tokens)."""
        return [len(_WORD.findall(text)) for text in texts]

    def _read(self, text: str) -> list[str]:
        if self._declare == "nothing":
            return _WORD.findall(text[:DEFAULT_WINDOW_CHARS].lower())
        return _WORD.findall(text.lower())[: self._window]

    async def embed(self, texts: Sequence[str]) -> Any:
        """One vector per text, from what it reads of it."""
        rows = np.zeros((len(texts), self._dimensions), dtype=np.float64)
        for row, text in zip(rows, texts, strict=True):
            words = self._read(text)
            self.seen.append(" ".join(words))
            for word in words:
                at = self._concept.get(word)
                if at is not None:
                    row[at % self._dimensions] += 1.0
            if not row.any():
                row[len(self.CONCEPTS) % self._dimensions] = 1.0
        return (rows / np.linalg.norm(rows, axis=1, keepdims=True)).astype(np.float32)
