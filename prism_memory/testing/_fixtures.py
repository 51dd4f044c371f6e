"""Test doubles with real behaviour: a clock you can move, embedders that wait, fail or lie."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

import numpy as np

from ..embedding import Embedder

__all__ = ["FlakyEmbedder", "GatedEmbedder", "ManualClock", "NonFiniteEmbedder"]


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
