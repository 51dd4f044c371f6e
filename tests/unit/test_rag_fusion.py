"""``fuse_legs``: the RAG store's two legs fused by recall's fusion, translated and cut.

Expected scores are written out by hand from the documented fusion (λ = 0.5, cosine divided by the
best candidate's, BM25 divided by the better of the best and the ideal match).
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from prism_memory.errors import ConfigurationError
from prism_memory.lexical import CorpusStats
from prism_memory.rag._fusion import fuse_legs
from prism_memory.rag_types import RagHit

QUERY = np.array([1.0, 0.0], dtype=np.float32)
STATS = CorpusStats(documents=4, total_length=8, document_frequency={"pump": 1})


def hit(source: str, index: int, text: str, vector: tuple[float, float] | None, score: float = 0.0):
    embedding = None if vector is None else np.array(vector, dtype=np.float32)
    return RagHit(source, index, text, {}, 1, score, embedding=embedding)


def test_both_legs_are_fused_once_per_chunk_and_scored_by_the_fusion():
    near = hit("manual", 0, "valve seal", (1.0, 0.0), score=0.9)
    lexical = hit("memo", 2, "pump pump", (0.0, 1.0), score=3.0)
    again = hit("manual", 0, "valve seal", (1.0, 0.0), score=-7.0)  # the same chunk, other leg
    fused = fuse_legs(
        [near], [lexical, again], query_vector=QUERY, query_text="pump", stats=STATS, top_k=5
    )
    assert [h.key for h in fused] == [("manual", 0), ("memo", 2)]
    first, second = fused
    # normalised cosines 1 and 0: median 0.5, lexical weight 0.5 · 0.5 = 0.25
    # the nearest: 0.75 · cosine 1 / best 1; no query term
    assert (first.score, first.semantic, first.lexical) == (
        pytest.approx(0.75),
        pytest.approx(1.0),
        0.0,
    )
    # "pump" twice in a 2-term chunk, avgdl 2: bm25 = idf · 2 · 1.9 / (2 + 0.9), above 3 × its
    # chance (p = 1/4): the only evidence, so lexical 1 and the score 0.25 · 1
    idf = math.log(1 + 3.5 / 1.5)
    bm25 = idf * 2 * 1.9 / (2 + 0.9)
    assert bm25 > 3 * 0.25 * idf
    assert second.lexical == pytest.approx(bm25)  # the RAG hit carries the raw BM25
    assert second.semantic == pytest.approx(0.0)
    assert second.score == pytest.approx(0.25)
    assert (first.text, first.generation) == ("valve seal", 1)


def test_the_result_is_cut_to_top_k():
    hits = [hit("s", i, "words", (1.0, float(i))) for i in range(4)]
    fused = fuse_legs(hits, [], query_vector=QUERY, query_text="x", stats=STATS, top_k=2)
    assert [h.key for h in fused] == [("s", 0), ("s", 1)]


def test_a_hit_without_its_vector_is_a_configuration_error():
    with pytest.raises(ConfigurationError):
        fuse_legs(
            [hit("s", 0, "a", (1.0, 0.0))],
            [hit("s", 1, "b", None)],
            query_vector=QUERY,
            query_text="b",
            stats=STATS,
            top_k=3,
        )
