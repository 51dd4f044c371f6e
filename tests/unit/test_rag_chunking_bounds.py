"""``chunk_text`` at its bounds: exact chunks where a sentence, a cut or an overlap just fits.

Each expected list is worked out by hand from the rules in ``prism_memory.rag.chunking``: sentences
are packed while the chunk stays within ``size`` (joined by one space); a sentence longer than
``size`` is cut at the last space that keeps the piece within ``size`` (hard at ``size`` when there is
none); a new chunk starts with the previous chunk's trailing whole sentences -- never its first --
as long as they fit in ``overlap`` characters and leave room for the next sentence.
"""

from __future__ import annotations

import pytest

from prism_memory.errors import CapExceededError, ValidationError
from prism_memory.rag import chunk_text
from prism_memory.rag.chunking import DEFAULT_CHUNK_OVERLAP, DEFAULT_CHUNK_SIZE, MAX_SOURCE_CHARS
from prism_memory.rag_types import MAX_CHUNK_CHARS, MAX_CHUNKS_PER_CALL


def test_the_documented_defaults_and_caps():
    assert (DEFAULT_CHUNK_SIZE, DEFAULT_CHUNK_OVERLAP) == (800, 120)
    assert MAX_SOURCE_CHARS == 4_194_304
    assert (MAX_CHUNK_CHARS, MAX_CHUNKS_PER_CALL) == (16_000, 4096)


def test_the_defaults_are_what_chunk_text_uses():
    words = " ".join(f"w{n:03d}" for n in range(400))  # 1,999 characters, no sentence marks
    assert chunk_text(words) == chunk_text(words, size=800, overlap=120)
    assert [len(c) for c in chunk_text(words)] == [799, 799, 399]


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        # a sentence of exactly the size stays whole, spaces and all
        ("aaaaaaa bbbbbbbb", ["aaaaaaa bbbbbbbb"]),
        # the last space at index 16 (= size) still cuts: the piece is 16 characters
        ("aaaa bbbbbbbbbbb ccccc", ["aaaa bbbbbbbbbbb", "ccccc"]),
        # a space at index 17 is past the size: cut at the one before
        ("aaaa bbbbbbbbbbbb ccc", ["aaaa", "bbbbbbbbbbbb ccc"]),
        # a space at index 1 is a cut like any other
        ("a " + "b" * 20, ["a", "b" * 16, "bbbb"]),
        # no space at all: cut hard at the size
        ("c" * 33, ["c" * 16, "c" * 16, "c"]),
    ],
)
def test_a_long_sentence_is_cut_at_the_last_space_within_the_size(text, expected):
    assert chunk_text(text, size=16, overlap=0) == expected


@pytest.mark.parametrize(
    ("text", "size", "overlap", "expected"),
    [
        # the trailing sentence is exactly the overlap, and with the next one exactly the size
        ("Aaaaaaa. Bbbbbbb. Ccccccc.", 17, 8, ["Aaaaaaa. Bbbbbbb.", "Bbbbbbb. Ccccccc."]),
        # one character less of overlap: nothing is carried
        ("Aaaaaaa. Bbbbbbb. Ccccccc.", 17, 7, ["Aaaaaaa. Bbbbbbb.", "Ccccccc."]),
        # two sentences carried, in order, their joining space counted: "Cc. Dd." is 7
        (
            "Aa. Bb. Cc. Dd. Ee. Ff. Gg.",
            16,
            7,
            ["Aa. Bb. Cc. Dd.", "Cc. Dd. Ee. Ff.", "Ee. Ff. Gg."],
        ),
        ("Aa. Bb. Cc. Dd. Ee. Ff. Gg.", 16, 6, ["Aa. Bb. Cc. Dd.", "Dd. Ee. Ff. Gg."]),
        # carrying stops at the first sentence that does not fit; an earlier one is never taken
        (
            "Xx. Aa. Llllllllll. Bb. Nnnnnnnnnnnnnnnnnnnnnnnnnnnn.",
            40,
            12,
            ["Xx. Aa. Llllllllll. Bb.", "Bb. Nnnnnnnnnnnnnnnnnnnnnnnnnnnn."],
        ),
        # after a carry, the chunk fills up to the size again, counting every joining space
        (
            "Aa. Bb. Cc. Dd. Ee. Ff. Gg. Hh. Ii.",
            16,
            8,
            ["Aa. Bb. Cc. Dd.", "Cc. Dd. Ee. Ff.", "Ee. Ff. Gg. Hh.", "Gg. Hh. Ii."],
        ),
    ],
)
def test_overlap_carries_whole_trailing_sentences_that_fit(text, size, overlap, expected):
    assert chunk_text(text, size=size, overlap=overlap) == expected


def test_the_largest_chunk_size_is_accepted():
    assert chunk_text("one sentence.", size=MAX_CHUNK_CHARS, overlap=0) == ["one sentence."]
    with pytest.raises(CapExceededError):
        chunk_text("one sentence.", size=MAX_CHUNK_CHARS + 1, overlap=0)


def test_a_text_of_the_largest_length_is_accepted():
    chunks = chunk_text("x" * MAX_SOURCE_CHARS, size=MAX_CHUNK_CHARS, overlap=0)
    assert [len(c) for c in chunks] == [16_000] * 262 + [2_304]
    with pytest.raises(CapExceededError):
        chunk_text("x" * (MAX_SOURCE_CHARS + 1), size=MAX_CHUNK_CHARS, overlap=0)


def test_exactly_the_most_chunks_are_accepted():
    sentence = "abcdefghijklmno."  # 16 characters: one chunk each at size 16
    assert len(chunk_text(" ".join([sentence] * 4096), size=16, overlap=0)) == 4096
    with pytest.raises(CapExceededError):
        chunk_text(" ".join([sentence] * 4097), size=16, overlap=0)


def test_an_empty_text_is_named_text_in_the_error():
    with pytest.raises(ValidationError, match=r"^text must not be empty$"):
        chunk_text("  ", size=16, overlap=0)


def test_paragraph_sentence_and_space_rules():
    # a blank line ends a sentence; ". " and "!" and "?" end one; runs of space become one
    text = "First part\n  \nSecond  part. Third\tpart! Fourth?Fifth"
    assert chunk_text(text, size=16, overlap=0) == [
        "First part",
        "Second part.",
        "Third part!",
        "Fourth?Fifth",
    ]


def test_a_sentence_of_exactly_the_size_is_not_cut():
    # "aaaa bbbbbbbbbbb" is 16 characters: cut at its space it would pack as "x. aaaa"
    assert chunk_text("x. aaaa bbbbbbbbbbb", size=16, overlap=0) == ["x.", "aaaa bbbbbbbbbbb"]


def test_a_space_right_after_the_first_character_is_still_a_cut():
    # the last space within 16 is at position 1: the piece is "a", then the word is cut hard
    assert chunk_text("a " + "b" * 20, size=16, overlap=0) == ["a", "b" * 16, "bbbb"]


def test_no_sentence_is_carried_when_it_and_the_next_exceed_the_size_by_one():
    # "bbbbbbbbb." fits the overlap (10), but with " ccccccccc." it would be 21 > 20
    assert chunk_text("aaaa. bbbbbbbbb. ccccccccc.", size=20, overlap=10) == [
        "aaaa. bbbbbbbbb.",
        "ccccccccc.",
    ]


def test_after_a_carry_the_next_sentence_joins_when_it_fills_the_size_exactly():
    # carried "bb." + " cccccccc." is 13; + " ddddd." is exactly 20
    assert chunk_text("aaaaaaaaaaaa. bb. cccccccc. ddddd.", size=20, overlap=5) == [
        "aaaaaaaaaaaa. bb.",
        "bb. cccccccc. ddddd.",
    ]


def test_after_a_carry_the_next_sentence_starts_a_chunk_when_it_is_one_over():
    # carried "bb." + " cccccccc." is 13; + " dddddd." would be 21
    assert chunk_text("aaaaaaaaaaaa. bb. cccccccc. dddddd.", size=20, overlap=5) == [
        "aaaaaaaaaaaa. bb.",
        "bb. cccccccc.",
        "dddddd.",
    ]


def test_without_a_carry_a_new_chunk_fills_the_size_exactly():
    # nothing carried (overlap 0): "uuuuuuuuu." + " vvvvvvvv." is exactly 20
    assert chunk_text("aaaaaaaaaaaaaaaaaa. uuuuuuuuu. vvvvvvvv.", size=20, overlap=0) == [
        "aaaaaaaaaaaaaaaaaa.",
        "uuuuuuuuu. vvvvvvvv.",
    ]
