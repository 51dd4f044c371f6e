"""The adapter between RAG hits and recall's fusion, :func:`prism_memory.ranking.fuse`.

It only translates: the two legs' hits become :class:`~prism_memory.ranking.FusionCandidate`\\ s
(``sequence`` = chunk index, ``id`` = ``"<source_id>#<chunk_index>"``), and the fused order and
scores come back unchanged. No scoring rule lives here.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from ..errors import ConfigurationError
from ..lexical import CorpusStats
from ..models import DEFAULT_LEXICAL_WEIGHT, Vector
from ..rag_types import RagHit
from ..ranking import FusionCandidate, fuse

__all__ = ["fuse_legs"]


def fuse_legs(
    vector_hits: Sequence[RagHit],
    lexical_hits: Sequence[RagHit],
    *,
    query_vector: Vector,
    query_text: str,
    stats: CorpusStats,
    top_k: int,
    lexical_weight: float = DEFAULT_LEXICAL_WEIGHT,
) -> list[RagHit]:
    """Fuse the union of both legs' hits with :func:`~prism_memory.ranking.fuse`; best ``top_k``.

    Each returned hit carries ``score`` = the fused similarity, ``semantic`` = the true cosine and
    ``lexical`` = the raw BM25 against ``stats`` (the scope's statistics after ACL and filter).
    """
    merged: dict[tuple[str, int], RagHit] = {}
    for hit in (*vector_hits, *lexical_hits):
        merged.setdefault(hit.key, hit)
    candidates = []
    for hit in merged.values():
        if hit.embedding is None:  # every store returns vectors with its hits
            raise ConfigurationError(f"the store returned hit {hit.key} without its embedding")
        candidates.append(
            FusionCandidate(
                item=hit,
                id=f"{hit.source_id}#{hit.chunk_index}",
                sequence=hit.chunk_index,
                vector=hit.embedding,
                text=hit.text,
            )
        )
    fused = fuse(
        candidates,
        query_vector=query_vector,
        query_text=query_text,
        stats=stats,
        lexical_weight=lexical_weight,
    )
    return [
        replace(f.item, score=f.similarity, semantic=f.semantic, lexical=f.bm25)
        for f in fused[:top_k]
    ]
