"""Bounded, sentence-aware chunking (pure).

:func:`chunk_text` splits a document into pieces of at most ``size`` characters:

1. The text is cut into *units*: paragraphs (blank lines) and, inside them, sentences (after
   ``.``, ``!``, ``?``, ``…`` and their CJK forms, followed by white space -- or directly, for CJK
   marks). Whitespace inside a unit is collapsed to single spaces.
2. A unit longer than ``size`` is cut at the last space before the limit (or hard at ``size`` when
   a word is longer than that), so no chunk ever exceeds ``size``.
3. Units are packed greedily, in order, into chunks of at most ``size`` characters (joined by one
   space). A new chunk starts with the trailing units of the previous one whose total length is at
   most ``overlap`` -- whole sentences only, and never the whole previous chunk, so every chunk
   adds new text and the chunk count is bounded by the number of units.

The same text and settings always give the same chunks (so content digests detect unchanged
documents). Defaults: ``size=800``, ``overlap=120`` characters.
"""

from __future__ import annotations

import re
from typing import Final

from ..errors import CapExceededError, ValidationError
from ..rag_types import MAX_CHUNK_CHARS, MAX_CHUNKS_PER_CALL, check_text

__all__ = ["DEFAULT_CHUNK_OVERLAP", "DEFAULT_CHUNK_SIZE", "MAX_SOURCE_CHARS", "chunk_text"]

DEFAULT_CHUNK_SIZE: Final = 800
"""Default largest chunk, in characters."""
DEFAULT_CHUNK_OVERLAP: Final = 120
"""Default most characters a chunk repeats from the previous one (whole sentences)."""
MAX_SOURCE_CHARS: Final = 4 * 1024 * 1024
"""Longest document :func:`chunk_text` accepts (characters)."""

_PARAGRAPH = re.compile(r"\n\s*\n")
_SENTENCE = re.compile(r"(?<=[.!?…])\s+|(?<=[。！？])")
_SPACE = re.compile(r"\s+")


def _check_settings(size: object, overlap: object) -> tuple[int, int]:
    if isinstance(size, bool) or not isinstance(size, int) or size < 16:
        raise ValidationError("chunk size must be an integer of at least 16 characters")
    if size > MAX_CHUNK_CHARS:
        raise CapExceededError(f"chunk size is over the cap {MAX_CHUNK_CHARS}")
    if isinstance(overlap, bool) or not isinstance(overlap, int) or overlap < 0:
        raise ValidationError("chunk overlap must be a non-negative integer")
    if overlap * 2 > size:
        raise ValidationError("chunk overlap must be at most half the chunk size")
    return size, overlap


def _split_long(unit: str, size: int) -> list[str]:
    pieces: list[str] = []
    while len(unit) > size:
        cut = unit.rfind(" ", 0, size + 1)
        if cut <= 0:
            cut = size
        pieces.append(unit[:cut].rstrip())
        unit = unit[cut:].lstrip()
    if unit:
        pieces.append(unit)
    return pieces


def _units(text: str, size: int) -> list[str]:
    units: list[str] = []
    for paragraph in _PARAGRAPH.split(text):
        for sentence in _SENTENCE.split(paragraph):
            unit = _SPACE.sub(" ", sentence).strip()
            if unit:
                units.extend(_split_long(unit, size))
    return units


def chunk_text(
    text: str, *, size: int = DEFAULT_CHUNK_SIZE, overlap: int = DEFAULT_CHUNK_OVERLAP
) -> list[str]:
    """Split ``text`` into sentence-aware chunks of at most ``size`` characters (see the module).

    Raises :class:`~prism_memory.errors.ValidationError` for empty text or bad settings and
    :class:`~prism_memory.errors.CapExceededError` for a text over :data:`MAX_SOURCE_CHARS` or one
    that would need more than 4,096 chunks.
    """
    size, overlap = _check_settings(size, overlap)
    check_text(text, "text")
    if len(text) > MAX_SOURCE_CHARS:
        raise CapExceededError(f"text is longer than {MAX_SOURCE_CHARS} characters")
    units = _units(text, size)
    chunks: list[str] = []
    current: list[str] = []
    length = 0
    for unit in units:
        added = len(unit) + (1 if current else 0)
        if current and length + added > size:
            chunks.append(" ".join(current))
            carried: list[str] = []
            carried_length = 0
            for previous in reversed(current[1:]):
                grown = carried_length + len(previous) + (1 if carried else 0)
                if grown > overlap or grown + len(unit) + 1 > size:
                    break
                carried.insert(0, previous)
                carried_length = grown
            current, length = carried, carried_length
            added = len(unit) + (1 if current else 0)
        current.append(unit)
        length += added
    if current:  # its last unit has not been emitted yet
        chunks.append(" ".join(current))
    if len(chunks) > MAX_CHUNKS_PER_CALL:
        raise CapExceededError(
            f"text makes {len(chunks)} chunks; the cap is {MAX_CHUNKS_PER_CALL} per source"
        )
    return chunks
