"""Edges of the hybrid fusion and the cosine that mutation testing found untested."""

from __future__ import annotations

import dataclasses
from datetime import UTC, datetime

import numpy as np
import pytest

from prism_memory.models import Candidate, MemoryRecord, RecallScoring
from prism_memory.ranking import FusionCandidate, cosine, explain, fuse, rerank

# float32 values whose float64 cosine with themselves rounds to 1 + 1 ulp before clamping
OVERSHOOTING = np.array([1.3040000200271606, 0.9470809698104858, -0.7037352323532104], np.float32)
T = datetime(2024, 1, 1, tzinfo=UTC)


def test_cosine_never_leaves_minus_one_to_one():
    q = OVERSHOOTING.astype(np.float64)
    assert float(np.dot(q, q)) / float(np.linalg.norm(q) * np.linalg.norm(q)) > 1.0  # unclamped
    assert cosine(OVERSHOOTING, OVERSHOOTING) == 1.0
    assert cosine(OVERSHOOTING, -OVERSHOOTING) == -1.0


def candidate(entry_id, vector, text, sequence=1):
    return FusionCandidate(entry_id, entry_id, sequence, np.asarray(vector, np.float32), text)


def test_fuse_returns_the_best_first():
    fused = fuse(
        [
            candidate("far", [0.0, 1.0], "x", sequence=1),
            candidate("near", [1.0, 0.0], "x", sequence=2),
            candidate("mid", [1.0, 1.0], "x", sequence=3),
        ],
        query_vector=np.array([1.0, 0.0], np.float32),
        query_text="nothing shared",
    )
    assert [f.id for f in fused] == ["near", "mid", "far"]
    assert [f.similarity for f in fused] == sorted((f.similarity for f in fused), reverse=True)


@pytest.mark.parametrize("query_text", ["", "!!! ---", "   "])
def test_a_query_without_terms_has_no_lexical_signal(query_text):
    fused = fuse(
        [candidate("a", [1.0, 0.0], "alpha"), candidate("b", [0.0, 1.0], "beta")],
        query_vector=np.array([1.0, 0.0], np.float32),
        query_text=query_text,
        lexical_weight=0.5,
    )
    assert [(f.bm25, f.lexical) for f in fused] == [(0.0, 0.0), (0.0, 0.0)]
    assert [f.bm25_scale for f in fused] == [1.0, 1.0]  # documented: 1 when the best BM25 is 0
    # normalised cosines 1 and 0: median 0.5, lexical weight 0.5 · 0.5; (1 − 0.25)·cosine/1 + 0
    assert [f.similarity for f in fused] == [0.75, 0.0]


def test_all_zero_signals_keep_a_scale_of_one():
    (only,) = fuse(
        [candidate("a", [0.0, 0.0], "alpha")],
        query_vector=np.array([1.0, 0.0], np.float32),
        query_text="omega",
    )
    assert (only.semantic, only.semantic_scale, only.bm25, only.bm25_scale) == (0.0, 1.0, 0.0, 1.0)
    assert only.similarity == 0.0


def test_fusion_values_are_immutable():
    made = candidate("a", [1.0, 0.0], "alpha")
    (fused,) = fuse([made], query_vector=np.array([1.0, 0.0], np.float32), query_text="alpha")
    with pytest.raises(dataclasses.FrozenInstanceError):
        made.text = "changed"  # type: ignore[misc]
    with pytest.raises(dataclasses.FrozenInstanceError):
        fused.similarity = 0.0  # type: ignore[misc]


def test_explain_names_each_part_of_the_formula():
    record = MemoryRecord(
        tenant_id="t",
        resource_id="r",
        thread_id="th",
        id="a",
        text="alpha",
        role="user",
        metadata={},
        consent=None,
        sequence=1,
        occurred_at=T,
        created_at=T,
        written_at=T,
        importance=1.0,
    )
    hits = rerank(
        [Candidate(record=record, vector=np.array([1.0, 0.0], np.float32))],
        query_vector=np.array([1.0, 0.0], np.float32),
        query_text="alpha",
        top_k=1,
        now=T,
    )
    (explanation,) = explain(hits, RecallScoring())
    assert set(explanation.how) == {"semantic", "lexical", "similarity", "score"}
    assert explanation.how["semantic"].startswith("cosine(query vector, entry vector)")


def test_fused_cosines_equal_cosine_for_any_lengths():
    query = OVERSHOOTING * np.float32(0.5)  # not a unit vector
    vectors = {
        "same": OVERSHOOTING,
        "opposite": -OVERSHOOTING,
        "zero": np.zeros(3, np.float32),
        "short": np.array([0.1, 0.0, 0.0], np.float32),
        "long": np.array([0.0, 7.0, 1.0], np.float32),
    }
    fused = fuse(
        [candidate(name, v, "x") for name, v in vectors.items()],
        query_vector=query,
        query_text="",
    )
    semantic = {f.id: f.semantic for f in fused}
    assert semantic == {name: cosine(query, v) for name, v in vectors.items()}
    assert (semantic["same"], semantic["opposite"], semantic["zero"]) == (1.0, -1.0, 0.0)
    assert semantic["short"] == pytest.approx(float(query[0]) / float(np.linalg.norm(query)))
