"""Vector checks, the hashing embedder and batched embedding."""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import pytest

from prism_memory import HashEmbedder, assert_finite_vector, embed_batched
from prism_memory.errors import (
    CapExceededError,
    DimensionMismatchError,
    InvalidVectorError,
    PrismMemoryError,
    ValidationError,
)

# ---- assert_finite_vector ----------------------------------------------------------------------


def test_a_list_of_floats_becomes_a_float32_vector():
    out = assert_finite_vector([0.5, -1.25, 3.0])
    assert out.dtype == np.float32
    assert out.shape == (3,)
    assert out.tolist() == [0.5, -1.25, 3.0]


def test_numpy_integer_input_is_accepted():
    out = assert_finite_vector(np.array([1, 2, 3], dtype=np.int64))
    assert out.dtype == np.float32
    assert out.tolist() == [1.0, 2.0, 3.0]


def test_numpy_integer_scalars_in_a_list_are_accepted():
    out = assert_finite_vector([np.int32(4), np.float16(0.5), 7])
    assert out.tolist() == [4.0, 0.5, 7.0]


def test_unsigned_numpy_input_is_accepted():
    assert assert_finite_vector(np.array([0, 9], dtype=np.uint8)).tolist() == [0.0, 9.0]


def test_a_tuple_is_accepted():
    assert assert_finite_vector((1.0, 2.0)).tolist() == [1.0, 2.0]


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), float("-inf")])
def test_non_finite_values_in_a_list_are_rejected(bad):
    with pytest.raises(InvalidVectorError):
        assert_finite_vector([0.1, bad, 0.3])


@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
def test_non_finite_values_in_an_array_are_rejected(bad):
    with pytest.raises(InvalidVectorError):
        assert_finite_vector(np.array([0.1, bad], dtype=np.float64))


@pytest.mark.parametrize("big", [1e39, -1e39, 3.5e38])
def test_values_overflowing_float32_are_rejected(big):
    # float32 max is about 3.4028e38; these are finite in float64 only.
    assert math.isfinite(big)
    with pytest.raises(InvalidVectorError):
        assert_finite_vector([0.0, big])
    with pytest.raises(InvalidVectorError):
        assert_finite_vector(np.array([0.0, big], dtype=np.float64))


def test_the_largest_float32_value_is_accepted():
    biggest = float(np.finfo(np.float32).max)
    assert assert_finite_vector([biggest])[0] == np.float32(biggest)


def test_an_integer_too_large_for_float32_is_rejected():
    with pytest.raises(InvalidVectorError):
        assert_finite_vector([10**39])


def test_an_integer_too_large_for_any_float_is_rejected_with_a_prism_error():
    # int(10**400) cannot become a float64 at all; the check must still answer with its own error.
    with pytest.raises(InvalidVectorError):
        assert_finite_vector([1.0, 10**400])


def test_complex_numbers_are_rejected_not_truncated():
    with pytest.raises(InvalidVectorError):
        assert_finite_vector([np.complex128(1 + 2j), 0.5])
    with pytest.raises(InvalidVectorError):
        assert_finite_vector(np.array([1 + 2j, 0.5]))


@pytest.mark.parametrize(
    "given",
    [[1, 2.5, -3], [1, 2.5, np.float32(-3)], [np.int64(1), 2.5, -3.0]],
    ids=["plain", "numpy-scalar", "numpy-int"],
)
def test_a_list_of_plain_or_numpy_numbers_is_taken_as_given(given):
    # plain floats and ints take the fast path, numpy scalars the item-by-item one: same result
    result = assert_finite_vector(given)
    assert result.dtype == np.float32
    assert result.tolist() == [1.0, 2.5, -3.0]


@pytest.mark.parametrize("bad", [[True, 1.0], [1.0, False], [np.True_, 0.0]])
def test_booleans_in_a_list_are_rejected(bad):
    with pytest.raises(InvalidVectorError):
        assert_finite_vector(bad)


def test_a_boolean_array_is_rejected():
    with pytest.raises(InvalidVectorError):
        assert_finite_vector(np.array([True, False]))


@pytest.mark.parametrize(
    "bad", ["0.5,0.5", b"\x00\x01", ["0.5", 1.0], [None, 1.0], {"a": 1.0}, 3.0]
)
def test_strings_and_other_non_numbers_are_rejected(bad):
    with pytest.raises(InvalidVectorError):
        assert_finite_vector(bad)


def test_a_string_array_is_rejected():
    with pytest.raises(InvalidVectorError):
        assert_finite_vector(np.array(["1.0", "2.0"]))


def test_an_object_array_is_rejected():
    with pytest.raises(InvalidVectorError):
        assert_finite_vector(np.array([1.0, None], dtype=object))


@pytest.mark.parametrize("nested", [[[1.0, 2.0]], [[1.0], [2.0]], [1.0, [2.0]]])
def test_nested_lists_are_rejected(nested):
    with pytest.raises(InvalidVectorError):
        assert_finite_vector(nested)


@pytest.mark.parametrize("shape", [(1, 3), (2, 2), ()])
def test_arrays_that_are_not_one_dimensional_are_rejected(shape):
    with pytest.raises(InvalidVectorError):
        assert_finite_vector(np.ones(shape, dtype=np.float32))


@pytest.mark.parametrize("empty", [[], (), np.array([], dtype=np.float32)])
def test_empty_vectors_are_rejected(empty):
    with pytest.raises(InvalidVectorError):
        assert_finite_vector(empty)


def test_wrong_width_is_a_dimension_mismatch():
    with pytest.raises(DimensionMismatchError):
        assert_finite_vector([1.0, 2.0, 3.0], expected_length=4)
    with pytest.raises(DimensionMismatchError):
        assert_finite_vector(np.zeros(5, dtype=np.float32), expected_length=4)


def test_right_width_passes():
    assert assert_finite_vector([1.0, 2.0, 3.0, 4.0], expected_length=4).shape == (4,)


def test_the_label_names_the_vector_in_the_error():
    with pytest.raises(InvalidVectorError, match="query embedding"):
        assert_finite_vector([float("nan")], "query embedding")


def test_invalid_vector_errors_are_prism_validation_errors():
    assert issubclass(InvalidVectorError, ValidationError)
    assert issubclass(DimensionMismatchError, InvalidVectorError)
    assert issubclass(InvalidVectorError, PrismMemoryError)


# ---- HashEmbedder ------------------------------------------------------------------------------


def _cos(a, b):
    a = np.asarray(a, dtype=np.float64)
    b = np.asarray(b, dtype=np.float64)
    return float(a @ b / (np.linalg.norm(a) * np.linalg.norm(b)))


async def test_hash_embedder_is_deterministic_across_instances():
    texts = ["the cat sat on the mat", "Ünïcode wörds too", ""]
    first = await HashEmbedder(48).embed(texts)
    second = await HashEmbedder(48).embed(texts)
    assert np.array_equal(first, second)


async def test_hash_embedder_returns_one_unit_float32_row_per_text():
    texts = ["alpha", "beta gamma delta", "", "!!!"]
    out = await HashEmbedder(32).embed(texts)
    assert out.shape == (4, 32)
    assert out.dtype == np.float32
    for row in out:
        assert math.isclose(float(np.linalg.norm(row.astype(np.float64))), 1.0, rel_tol=1e-5)


async def test_hash_embedder_of_no_texts_is_an_empty_matrix():
    out = await HashEmbedder(16).embed([])
    assert out.shape == (0, 16)


async def test_texts_sharing_words_are_closer_than_unrelated_texts():
    embedder = HashEmbedder(256)
    base, shared, unrelated = await embedder.embed(
        [
            "my favourite colour is blue",
            "the colour blue is my favourite",
            "quarterly tax filings arrive tomorrow",
        ]
    )
    assert _cos(base, shared) > _cos(base, unrelated) + 0.3


async def test_identical_texts_have_cosine_one_and_case_does_not_matter():
    a, b = await HashEmbedder(64).embed(["Hello World", "hello world"])
    assert math.isclose(_cos(a, b), 1.0, rel_tol=1e-6)


async def test_hash_embedder_embed_one_matches_batch_row():
    embedder = HashEmbedder(40)
    one = embedder.embed_one("x y z")
    assert one.shape == (40,)
    assert np.array_equal((await embedder.embed(["q", "x y z"]))[1], one)


@pytest.mark.parametrize("bad", [0, -3, True, 2.5, "64", None])
def test_hash_embedder_dimensions_must_be_a_positive_integer(bad):
    with pytest.raises(ValidationError):
        HashEmbedder(bad)  # type: ignore[arg-type]


def test_hash_embedder_reports_its_width():
    assert HashEmbedder(7).dimensions == 7
    assert HashEmbedder().dimensions == 64


# ---- embed_batched -----------------------------------------------------------------------------


class RecordingEmbedder:
    """Delegates to a HashEmbedder and records the size of every call."""

    def __init__(self, dimensions: int = 8) -> None:
        self._inner = HashEmbedder(dimensions)
        self.batches: list[list[str]] = []

    @property
    def dimensions(self) -> int:
        return self._inner.dimensions

    async def embed(self, texts: Sequence[str]):
        self.batches.append(list(texts))
        return await self._inner.embed(texts)


class ScriptedEmbedder:
    """Returns whatever ``make(texts)`` builds."""

    def __init__(self, make, dimensions: int = 4) -> None:
        self._make = make
        self._dimensions = dimensions

    @property
    def dimensions(self) -> int:
        return self._dimensions

    async def embed(self, texts: Sequence[str]):
        return self._make(list(texts))


@pytest.mark.parametrize(
    ("count", "batch_size", "sizes"),
    [
        (10, 3, [3, 3, 3, 1]),
        (9, 3, [3, 3, 3]),
        (1, 5, [1]),
        (5, 1, [1, 1, 1, 1, 1]),
        (130, 128, [128, 2]),
    ],
)
async def test_embed_batched_splits_into_batches_of_at_most_batch_size(count, batch_size, sizes):
    embedder = RecordingEmbedder()
    texts = [f"text number {i}" for i in range(count)]
    out = await embed_batched(embedder, texts, batch_size=batch_size)
    assert [len(batch) for batch in embedder.batches] == sizes
    assert [t for batch in embedder.batches for t in batch] == texts  # order kept, each once
    assert out.shape == (count, 8)
    assert out.dtype == np.float32


async def test_embed_batched_rows_match_their_texts():
    embedder = RecordingEmbedder(16)
    texts = ["apple pie", "banana split", "cherry tart"]
    out = await embed_batched(embedder, texts, batch_size=2)
    reference = HashEmbedder(16)
    for row, text in zip(out, texts, strict=True):
        assert np.array_equal(row, reference.embed_one(text))


class BufferEmbedder:
    """An embedder that writes every answer into the same buffer (as some model runners do)."""

    def __init__(self) -> None:
        self.buffer = np.zeros((1, 4), dtype=np.float32)

    @property
    def dimensions(self) -> int:
        return 4

    async def embed(self, texts: Sequence[str]):
        self.buffer[:] = float(len(texts[0]))
        return self.buffer


async def test_embed_batched_returns_its_own_copy_of_the_embedders_answer():
    embedder = BufferEmbedder()
    first = await embed_batched(embedder, ["ab"])
    await embed_batched(embedder, ["abcdef"])  # rewrites the embedder's buffer
    assert first.tolist() == [[2.0, 2.0, 2.0, 2.0]]


async def test_embed_batched_of_nothing_makes_no_call():
    embedder = RecordingEmbedder(6)
    out = await embed_batched(embedder, [], batch_size=4)
    assert embedder.batches == []
    assert out.shape == (0, 6)


async def test_embed_batched_default_batch_size_is_32():
    embedder = RecordingEmbedder()
    await embed_batched(embedder, [str(i) for i in range(33)])
    assert [len(b) for b in embedder.batches] == [32, 1]


async def test_embed_batched_over_128_is_a_cap_error_before_any_call():
    embedder = RecordingEmbedder()
    with pytest.raises(CapExceededError):
        await embed_batched(embedder, ["a"], batch_size=129)
    assert embedder.batches == []


@pytest.mark.parametrize("bad", [0, -1, True, 2.0])
async def test_embed_batched_batch_size_must_be_a_positive_integer(bad):
    with pytest.raises(ValidationError):
        await embed_batched(RecordingEmbedder(), ["a"], batch_size=bad)


async def test_embedder_returning_too_few_vectors_is_rejected():
    embedder = ScriptedEmbedder(lambda texts: np.ones((len(texts) - 1, 4), dtype=np.float32))
    with pytest.raises(InvalidVectorError):
        await embed_batched(embedder, ["a", "b", "c"], batch_size=3)


async def test_embedder_returning_too_many_vectors_is_rejected():
    embedder = ScriptedEmbedder(lambda texts: np.ones((len(texts) + 1, 4), dtype=np.float32))
    with pytest.raises(InvalidVectorError):
        await embed_batched(embedder, ["a", "b"], batch_size=8)


async def test_embedder_returning_nothing_with_a_length_is_rejected():
    with pytest.raises(InvalidVectorError):
        await embed_batched(ScriptedEmbedder(lambda texts: None), ["a"])


async def test_embedder_returning_nan_is_rejected():
    def make(texts):
        out = np.ones((len(texts), 4), dtype=np.float64)
        out[-1, 2] = np.nan
        return out

    with pytest.raises(InvalidVectorError):
        await embed_batched(ScriptedEmbedder(make), ["a", "b"], batch_size=2)


async def test_embedder_returning_nan_in_a_later_batch_is_rejected():
    def make(texts):
        rows = [[1.0, 0.0, 0.0, 0.0] for _ in texts]
        if "poison" in texts:
            rows[texts.index("poison")][0] = float("inf")
        return rows

    with pytest.raises(InvalidVectorError):
        await embed_batched(ScriptedEmbedder(make), ["a", "b", "c", "poison"], batch_size=2)


async def test_embedder_returning_the_wrong_width_is_a_dimension_mismatch():
    embedder = ScriptedEmbedder(lambda texts: np.ones((len(texts), 3)), dimensions=4)
    with pytest.raises(DimensionMismatchError):
        await embed_batched(embedder, ["a"])


async def test_embedder_returning_a_three_dimensional_array_is_rejected():
    # (texts, width, 1): the right row count and width, one axis too many
    embedder = ScriptedEmbedder(lambda texts: np.ones((len(texts), 4, 1)), dimensions=4)
    with pytest.raises(InvalidVectorError):
        await embed_batched(embedder, ["a", "b"])


async def test_embedder_returning_zero_width_vectors_is_rejected():
    embedder = ScriptedEmbedder(lambda texts: np.ones((len(texts), 0)), dimensions=0)
    with pytest.raises(InvalidVectorError):
        await embed_batched(embedder, ["a", "b"])


async def test_a_wrong_width_matrix_with_as_many_rows_as_the_width_is_a_dimension_mismatch():
    # 4 texts, 4 expected dimensions, a (4, 5) answer: the row count equals the width
    embedder = ScriptedEmbedder(lambda texts: np.ones((len(texts), 5)), dimensions=4)
    with pytest.raises(DimensionMismatchError):
        await embed_batched(embedder, ["a", "b", "c", "d"])
    # and a (5, 4)-shaped mistake the other way round never passes for 4 texts either
    embedder = ScriptedEmbedder(lambda texts: np.ones((5, 4)), dimensions=4)
    with pytest.raises(InvalidVectorError):
        await embed_batched(embedder, ["a", "b", "c", "d"])


async def test_an_embedder_returning_a_boolean_array_is_rejected():
    embedder = ScriptedEmbedder(lambda texts: np.ones((len(texts), 4), dtype=bool), dimensions=4)
    with pytest.raises(InvalidVectorError):
        await embed_batched(embedder, ["a", "b"])


@pytest.mark.parametrize("dtype", [np.float64, np.float16, np.int32, np.uint8])
async def test_any_numeric_array_comes_back_as_float32(dtype):
    rows = [[1, 2, 3, 4], [5, 6, 7, 8]]
    embedder = ScriptedEmbedder(lambda texts: np.array(rows, dtype=dtype), dimensions=4)
    out = await embed_batched(embedder, ["a", "b"])
    assert out.dtype == np.float32
    assert out.tolist() == [[1.0, 2.0, 3.0, 4.0], [5.0, 6.0, 7.0, 8.0]]


async def test_explicit_dimensions_override_the_embedders_claim():
    embedder = ScriptedEmbedder(lambda texts: np.ones((len(texts), 4)), dimensions=4)
    with pytest.raises(DimensionMismatchError):
        await embed_batched(embedder, ["a"], dimensions=5)


async def test_embedder_may_return_a_list_of_lists():
    embedder = ScriptedEmbedder(
        lambda texts: [[float(i), 1.0, 0.0, 0.0] for i in range(len(texts))]
    )
    out = await embed_batched(embedder, ["a", "b"])
    assert out.tolist() == [[0.0, 1.0, 0.0, 0.0], [1.0, 1.0, 0.0, 0.0]]
