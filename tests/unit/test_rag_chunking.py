"""Pure parts of the RAG store: chunking, models, the ACL rule, filters."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from prism_memory.errors import CapExceededError, PrismMemoryError, ValidationError
from prism_memory.rag import AccessConstraint, Chunk, RagScope, SourceAccess, chunk_text
from prism_memory.rag.chunking import MAX_SOURCE_CHARS
from prism_memory.stores.rag_base import matches_filter

SENTENCES = [f"Sentence number {n} talks about topic {n % 7}." for n in range(40)]
TEXT = " ".join(SENTENCES)


def test_chunks_are_bounded_and_cover_every_sentence_in_order():
    chunks = chunk_text(TEXT, size=120, overlap=40)
    assert all(len(chunk) <= 120 for chunk in chunks)
    # every sentence appears whole, in some chunk, and first appearances keep document order
    firsts = [next(i for i, c in enumerate(chunks) if s in c) for s in SENTENCES]
    assert firsts == sorted(firsts)
    assert len(chunks) > 10


def test_chunks_break_between_sentences_not_inside_them():
    for chunk in chunk_text(TEXT, size=120, overlap=0):
        assert chunk.startswith("Sentence number ")
        assert chunk.endswith(".")


def test_overlap_repeats_whole_trailing_sentences_within_its_budget():
    chunks = chunk_text(TEXT, size=120, overlap=60)
    for previous, current in itertools.pairwise(chunks):
        shared = [s for s in SENTENCES if s in previous and s in current]
        assert shared, "consecutive chunks share a sentence when overlap allows one"
        assert sum(len(s) + 1 for s in shared) - 1 <= 60
        assert current.startswith(shared[0])
    without = chunk_text(TEXT, size=120, overlap=0)
    assert all(
        not any(s in a and s in b for s in SENTENCES) for a, b in itertools.pairwise(without)
    )
    assert len(without) < len(chunks)


def test_paragraphs_end_sentences_and_whitespace_collapses():
    chunks = chunk_text(
        "Title line\n\nFirst   para\tgraph text.\nSame paragraph.", size=20, overlap=0
    )
    assert chunks == ["Title line", "First para graph", "text.", "Same paragraph."]


def test_a_word_longer_than_the_size_is_cut_hard():
    chunks = chunk_text("x" * 50 + " tail", size=20, overlap=0)
    assert chunks == ["x" * 20, "x" * 20, "x" * 10 + " tail"]


def test_cjk_sentence_marks_split_without_spaces():
    text = "第一句话很长。第二句话也很长！第三句？"
    assert chunk_text(text, size=16, overlap=0) == ["第一句话很长。 第二句话也很长！", "第三句？"]


def test_chunking_is_deterministic():
    assert chunk_text(TEXT, size=200, overlap=50) == chunk_text(TEXT, size=200, overlap=50)


@pytest.mark.parametrize(
    ("text", "size", "overlap", "error"),
    [
        ("", 100, 0, ValidationError),
        ("   \n ", 100, 0, ValidationError),
        ("a\x00b", 100, 0, ValidationError),
        ("ok", 15, 0, ValidationError),
        ("ok", 100, 51, ValidationError),
        ("ok", 100, -1, ValidationError),
        ("ok", 20_000, 0, CapExceededError),
        ("x" * (MAX_SOURCE_CHARS + 1), 100, 0, CapExceededError),
        ("word " * 20_000, 16, 0, CapExceededError),  # more than 4,096 chunks
    ],
)
def test_bad_chunking_input_raises_typed_errors(text, size, overlap, error):
    with pytest.raises(error):
        chunk_text(text, size=size, overlap=overlap)


@settings(max_examples=60, deadline=None)
@given(
    st.text(alphabet=st.sampled_from("ab .!?\n"), min_size=1, max_size=600),
    st.integers(16, 120),
    st.integers(0, 8),
)
def test_property_bounded_and_lossless_words(text, size, overlap):
    if not text.strip():
        return
    chunks = chunk_text(text, size=size, overlap=overlap)
    assert all(0 < len(chunk) <= size for chunk in chunks)
    words = "".join(text.split())
    # without overlap, the chunks hold exactly the text's non-space characters, in order
    if overlap == 0:
        assert "".join("".join(chunk.split()) for chunk in chunks) == words


def test_scope_validation_and_key():
    assert RagScope("t", "r").key == '["r", null]'
    assert RagScope("t", "r", "c").key == '["r", "c"]'
    assert RagScope("t", "r", "c").key != RagScope("t", '"r", "c"').key
    assert RagScope.of({"tenant_id": "t", "resource_id": "r"}) == RagScope("t", "r")
    for bad in (
        lambda: RagScope("", "r"),
        lambda: RagScope("t", " "),
        lambda: RagScope("t", "r", ""),
        lambda: RagScope("t", "r\n"),
        lambda: RagScope(1, "r"),  # type: ignore[arg-type]
        lambda: RagScope.of({"tenant_id": "t", "resource_id": "r", "thread_id": "x"}),
        lambda: RagScope.of("t"),  # type: ignore[arg-type]
    ):
        with pytest.raises(PrismMemoryError):
            bad()


def test_chunk_digest_and_validation():
    chunk = Chunk("s", 0, "hello", np.ones(4, dtype=np.float32))
    assert chunk.digest == "2cf24dba5fb0a30e26e83b2ac5b9e29e1b161e5c1fa7425e73043362938b9824"
    with pytest.raises(ValidationError):
        Chunk("s", 0, "hello", np.ones(4), digest="0" * 64)
    with pytest.raises(ValidationError):
        Chunk("s", True, "hello", np.ones(4))  # type: ignore[arg-type]
    with pytest.raises(ValidationError):
        Chunk("s", 0, "hello", np.ones(4), metadata={"x": float("nan")})
    with pytest.raises(ValidationError):
        Chunk("s", 0, "hello", np.ones(4), metadata={"x": object()})


def test_access_rule():
    grants = SourceAccess(("ann",), ("eng", "ops"), 3)
    assert grants.allows(AccessConstraint("ann"))
    assert grants.allows(AccessConstraint("bob", ("ops",)))
    assert grants.allows(AccessConstraint("bob", ("ops",), access_version=3))
    assert not grants.allows(AccessConstraint("bob", ("ops",), access_version=2))
    assert not grants.allows(AccessConstraint("bob", ("sales",)))
    assert not grants.allows(AccessConstraint("ann", access_version=4))
    assert AccessConstraint("p", ["a", "b", "a"]).group_ids == ("a", "b")  # type: ignore[arg-type]
    with pytest.raises(ValidationError):
        AccessConstraint("p", "eng")  # type: ignore[arg-type]
    with pytest.raises(ValidationError):
        AccessConstraint("p", access_version=0)
    with pytest.raises(CapExceededError):
        SourceAccess(tuple(f"p{i}" for i in range(1025)), (), 1)


def test_filter_is_exact_json_equality():
    metadata = {"n": 1, "b": True, "s": "x", "z": None, "l": [1, 2]}
    assert matches_filter(metadata, None)
    assert matches_filter(metadata, {"n": 1.0, "s": "x"})
    assert matches_filter(metadata, {"z": None})
    assert not matches_filter(metadata, {"n": True})
    assert not matches_filter(metadata, {"b": 1})
    assert not matches_filter(metadata, {"l": 1})
    assert not matches_filter(metadata, {"missing": None})
    assert not matches_filter(metadata, {"s": "X"})
