"""The adapter between RAG hits and recall's fusion in :mod:`prism_memory.ranking`.

It only translates: the two legs' hits become the inputs of ranking's fusion, whose order and
fused score come back unchanged. No scoring rule lives here.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from ..rag_types import RagHit
from ..ranking import DEFAULT_SCORING

__all__ = ["fuse_legs"]


def fuse_legs(
    vector_hits: Sequence[RagHit], lexical_hits: Sequence[RagHit], *, top_k: int
) -> list[RagHit]:
    """Fuse the vector and lexical legs' hits and return the best ``top_k``.

    Ties break on ``(source_id, chunk_index)``.
    """
    weight = DEFAULT_SCORING.lexical_weight
    merged: dict[tuple[str, int], RagHit] = {}
    for hit in vector_hits:
        merged[hit.key] = hit
    for hit in lexical_hits:
        found = merged.get(hit.key)
        merged[hit.key] = hit if found is None else replace(found, lexical=hit.lexical)
    fused = [
        replace(
            hit,
            score=(1.0 - weight) * (hit.semantic or 0.0) + weight * (hit.lexical or 0.0),
        )
        for hit in merged.values()
    ]
    fused.sort(key=lambda hit: (-hit.score, hit.source_id, hit.chunk_index))
    return fused[:top_k]
