"""HashEmbedder's vectors are exactly the documented feature hashing, so they stay stable.

Vectors a store already holds are compared with vectors embedded later; if HashEmbedder's output
drifted between versions, recall over old rows would silently degrade. The expected vectors come from
an independent implementation of the documented recipe (below, using only ``hashlib``), not from
``prism_memory``.
"""

from __future__ import annotations

import hashlib
import math
import re

import numpy as np
import pytest

from prism_memory import HashEmbedder
from prism_memory.embedding import assert_finite_vector
from prism_memory.errors import InvalidVectorError


def reference(text: str, dimensions: int) -> list[float]:
    """The recipe: lower-cased word unigrams (weight 2) and the character trigrams of each word padded
    with one space on each side (weight 0.5), each hashed with BLAKE2b (8-byte digest); bytes 0–3
    little-endian modulo the width pick the bucket, the lowest bit of byte 4 the sign (1 → +, 0 → −);
    then L2-normalised. No features at all gives the first unit vector."""
    sums = [0.0] * dimensions
    words = re.findall(r"\w+", text.lower())
    features = [("w:" + w, 2.0) for w in words]
    for w in words:
        padded = " " + w + " "
        features += [("c:" + padded[i : i + 3], 0.5) for i in range(len(padded) - 2)]
    for feature, weight in features:
        digest = hashlib.blake2b(feature.encode(), digest_size=8).digest()
        bucket = int.from_bytes(digest[0:4], "little") % dimensions
        sums[bucket] += weight if digest[4] % 2 == 1 else -weight
    norm = math.sqrt(sum(x * x for x in sums))
    if norm == 0:
        return [1.0] + [0.0] * (dimensions - 1)
    return [x / norm for x in sums]


@pytest.mark.parametrize(
    ("text", "dimensions"),
    [
        ("a", 4),
        ("Red apples, GREEN pears!", 16),
        ("the cat sat on the mat", 64),
        ("naïve café — 東京 2024", 32),
        ("ab", 7),
    ],
)
async def test_vectors_follow_the_documented_recipe(text, dimensions):
    embedder = HashEmbedder(dimensions)
    expected = np.asarray(reference(text, dimensions), dtype=np.float32)
    assert np.array_equal(embedder.embed_one(text), expected)
    (row,) = await embedder.embed([text])
    assert row.dtype == np.float32
    assert np.array_equal(row, expected)


@pytest.mark.parametrize("text", ["", "   ", "!?", "—"])
def test_a_text_without_words_is_the_first_unit_vector(text):
    assert HashEmbedder(5).embed_one(text).tolist() == [1.0, 0.0, 0.0, 0.0, 0.0]


def test_one_dimension_is_enough():
    embedder = HashEmbedder(1)
    assert embedder.dimensions == 1
    assert embedder.embed_one("anything").tolist() in ([1.0], [-1.0])


def test_defaults_and_repr():
    assert HashEmbedder().dimensions == 64
    assert repr(HashEmbedder(12)) == "HashEmbedder(dimensions=12)"


def test_an_unlabelled_vector_is_called_an_embedding_in_errors():
    with pytest.raises(InvalidVectorError, match=r"^embedding holds NaN"):
        assert_finite_vector([math.nan])
