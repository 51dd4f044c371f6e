"""What the RAG conformance check modules share: the kit, hand-built vectors and a per-check scope.

A leaf beside :mod:`._support`: the RAG check modules and the runner import it, it imports none of them.
"""

from __future__ import annotations

import uuid
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..embedding import Embedder
from ..models import Vector
from ..rag_types import (
    Chunk,
    RagHit,
    RagScope,
)
from ..stores.rag_base import RagStore
from ._support import _check

__all__ = ["RagConformanceKit", "RagKitFactory"]


@dataclass(frozen=True, slots=True)
class RagConformanceKit:
    """What a factory hands the RAG suite: the store under test and an embedder of its width."""

    store: RagStore
    embedder: Embedder


RagKitFactory = Callable[
    [], "RagConformanceKit | Mapping[str, Any] | Awaitable[RagConformanceKit | Mapping[str, Any]]"
]
"""Returns a :class:`RagConformanceKit` (or a mapping with the same keys), possibly awaitably."""


def _unit(width: int, axis: int) -> Vector:
    vector = np.zeros(width, dtype=np.float32)
    vector[axis % width] = 1.0
    return vector


def _toward(width: int, away: int, amount: float) -> Vector:
    """``e0 + amount · e_away``: its cosine to ``e0`` is ``1 / sqrt(1 + amount²)``."""
    vector = _unit(width, 0)
    vector[away % width] += amount
    return vector


def _cos(a: Vector, b: Vector) -> float:
    a64 = np.asarray(a, dtype=np.float64)
    b64 = np.asarray(b, dtype=np.float64)
    return float(a64 @ b64 / (np.linalg.norm(a64) * np.linalg.norm(b64)))


class _Case:
    def __init__(self, kit: RagConformanceKit) -> None:
        self.store = kit.store
        self.embedder = kit.embedder
        self.width = kit.embedder.dimensions
        _check(self.width >= 8, "the RAG conformance suite needs vectors at least 8 wide")
        self.tenant = f"t-{uuid.uuid4().hex[:12]}"
        self.scope = RagScope(self.tenant, "docs")

    def chunk(
        self,
        source: str,
        index: int,
        text: str,
        vector: Vector | None = None,
        metadata: Mapping[str, Any] | None = None,
    ) -> Chunk:
        return Chunk(
            source_id=source,
            index=index,
            text=text,
            embedding=_unit(self.width, 0) if vector is None else vector,
            metadata=dict(metadata or {}),
        )


def _keys(hits: Sequence[RagHit]) -> list[tuple[str, int]]:
    return [hit.key for hit in hits]


class _ModelEmbedder:
    """An embedder of another model at the same width: ``inner``'s vectors rolled by ``shift``
    places (another vector space: a text's vector differs from ``inner``'s), named ``model``; it
    counts the texts it embeds."""

    def __init__(self, inner: Embedder, model: str | None, shift: int = 0) -> None:
        self._inner = inner
        self.model = model
        self.shift = shift
        self.texts: list[str] = []

    @property
    def dimensions(self) -> int:
        return self._inner.dimensions

    async def embed(self, texts: Sequence[str]) -> Any:
        self.texts.extend(texts)
        vectors = np.asarray(await self._inner.embed(texts), dtype=np.float64)
        return np.roll(vectors, self.shift, axis=1)
