"""Long texts embedded whole: split into windows that fit the embedder; an entry keeps every
window's vector.

An embedding model reads a bounded *window* of its input (all-MiniLM-L6-v2: 256 word pieces,
about 180 English words) and silently drops the rest. So that an entry is searchable by
everything it says, :func:`embed_entries` -- the one place an entry's text becomes its vectors --
splits a text longer than the embedder's window (:func:`~prism_memory.embedding.embedder_window`)
into windows that fit and embeds every window (in the embedder's batches). The entry's *main*
vector is its first window's -- exactly what the model saw of it before, and for a text within
the window its only vector, bit for bit what :func:`~prism_memory.embedding.embed_batched` gives
-- and the later windows' vectors are kept beside it (:class:`WindowedVector`).

Recall scores such an entry by its best window with a margin (:func:`effective_cosine`)::

    effective_cos = max(cos(q, first window), max over later windows j of cos(q, window_j) - δ)

with ``δ =`` :data:`WINDOW_MARGIN` = 0.15: a later window counts only when it is clearly closer to
the query than the entry's opening (the fact in its last paragraph), never as a lucky extra draw.
Measured on BEAM (long assistant answers), the normalised mean of the windows cost 4-6 points of
cosine recall and the plain max over windows 6.5, while δ = 0.15 keeps recall within 0.2 points
of the first window alone (docs/semantics.md). :func:`embed_whole` gives a text its main
vector only (queries, and the vectors of another model than the entry's own).

:func:`split_windows` is the pure split: sentence-aware (``prism_memory.rag.chunking``), each
window at most ``max_chars`` characters, consecutive windows sharing up to an eighth of that in
whole sentences, and every word of the text in some window (whitespace runs become one space in a
split text). The count grows with the text's length, which ``Limits.payload_bytes`` caps: never
more windows than sentences (a sentence longer than a window counts as its pieces), and a window
that is not the last is at least half full unless its next sentence is long; a text that would
need more than 4,096 windows raises :class:`~prism_memory.errors.CapExceededError`.

An embedder that declares ``max_tokens`` and offers ``count_tokens`` has its windows counted: a
text within ``max_tokens`` tokens stays whole; a longer one is split at about 4 characters a token
(English prose), and a window over the limit is split again, smaller, until every window fits (a
text of at most ``max_tokens`` UTF-8 bytes is never counted: no tokenizer makes more tokens than
bytes).
"""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Sequence
from functools import partial
from typing import Any, Final, cast

import numpy as np

from ._offload import off_loop
from ._windowed import WINDOW_MARGIN, WindowedVector, effective_cosine, own_parts
from .embedding import MIN_WINDOW_CHARS, Embedder, EmbedderWindow, embed_batched, embedder_window
from .errors import InvalidVectorError
from .models import Vector
from .rag.chunking import chunk_text
from .rag_types import MAX_CHUNK_CHARS

__all__ = [
    "OVERLAP_DIVISOR",
    "WINDOW_MARGIN",
    "WindowedVector",
    "effective_cosine",
    "embed_entries",
    "embed_whole",
    "own_parts",
    "split_windows",
]

OVERLAP_DIVISOR: Final = 8
"""Consecutive windows share at most ``max_chars // 8`` characters (whole sentences)."""
_ROUNDS: Final = 6
"""Most rounds of counting and splitting again for an embedder that counts its tokens."""
_NAMES: Final = ("max_chars", "max_tokens")
_GUESS: Final = 4
"""Characters per token of the first split of a text an embedder counts (English prose)."""
_SHRINK: Final = 0.9
"""A window over the token limit is split again at this share of its proportional size."""


def split_windows(text: str, max_chars: int) -> list[str]:
    """``text`` as windows of at most ``max_chars`` characters (see the module).

    A text of at most ``max_chars`` characters is returned as it is, as the only window. Raises
    :class:`~prism_memory.errors.ValidationError` for ``max_chars`` under 16 (or an empty text to
    split) and :class:`~prism_memory.errors.CapExceededError` when the text would need more than
    4,096 windows -- never truncates.
    """
    if len(text) <= max_chars:
        return [text]
    size = min(max_chars, MAX_CHUNK_CHARS)
    return chunk_text(text, size=size, overlap=size // OVERLAP_DIVISOR)


async def embed_entries(
    embedder: Embedder,
    texts: Sequence[str],
    *,
    batch_size: int = 32,
    dimensions: int | None = None,
) -> list[Vector | WindowedVector]:
    """Embed each of ``texts`` as an entry: per text its vector when it fits the embedder's
    window, else a :class:`WindowedVector` (its first window's vector and its later windows').

    A text longer than the embedder's window is split into windows that fit
    (:func:`split_windows`, counted when the embedder can count its tokens); all windows of all
    texts are embedded through :func:`~prism_memory.embedding.embed_batched` (batches of at most
    ``batch_size``, every vector checked). When every text fits, the vectors are exactly the rows
    of ``embed_batched(embedder, texts)``.
    """
    window = embedder_window(embedder)
    pieces = await _windows(embedder, window, texts)
    flat = [piece for found in pieces for piece in found]
    vectors = await embed_batched(embedder, flat, batch_size=batch_size, dimensions=dimensions)
    made: list[Vector | WindowedVector] = []
    start = 0
    for found in pieces:
        if len(found) == 1:
            made.append(cast("Vector", vectors[start]))
        else:
            later = vectors[start + 1 : start + len(found)]
            made.append(WindowedVector(cast("Vector", vectors[start]), later))
        start += len(found)
    return made


async def embed_whole(
    embedder: Embedder,
    texts: Sequence[str],
    *,
    batch_size: int = 32,
    dimensions: int | None = None,
) -> Vector:
    """Each of ``texts``'s main vector: a ``(len(texts), width)`` float32 matrix, one row per
    text -- its first window's vector (:func:`split_windows`, counted when the embedder can count
    its tokens), so no text is handed to the embedder past its window.

    Queries are embedded so (a query longer than the window is read by its first window, as the
    model would read it), and so are the vectors of another model than an entry's own (a model
    change's vectors carry no windows). When every text fits, this is exactly
    ``embed_batched(embedder, texts)``; only first windows are embedded.
    """
    window = await _window_of(embedder)
    pieces = await _windows(embedder, window, texts)
    firsts = [found[0] for found in pieces]
    return await embed_batched(embedder, firsts, batch_size=batch_size, dimensions=dimensions)


async def _window_of(embedder: Embedder) -> EmbedderWindow:
    """The embedder's window; read in a worker thread when it is a property (reading
    ``SentenceTransformerEmbedder.max_tokens`` may load the model), so the loop keeps serving."""
    if any(isinstance(inspect.getattr_static(embedder, name, None), property) for name in _NAMES):
        return await asyncio.to_thread(embedder_window, embedder)
    return embedder_window(embedder)


async def _windows(
    embedder: Embedder, window: EmbedderWindow, texts: Sequence[str]
) -> list[list[str]]:
    count = getattr(embedder, "count_tokens", None)
    if window.tokens is None or count is None:
        return await _split_all(texts, window.chars)
    limit = window.tokens
    # each window with whether it is known to fit; a text is first tried whole (or in windows of
    # the embedder's own max_chars, when it declares one too)
    firsts = (
        [[text] for text in texts]
        if window.max_chars is None
        else await _split_all(texts, window.max_chars)
    )
    found: list[list[tuple[str, bool]]] = [
        [(piece, _fits_bytes(piece, limit)) for piece in pieces] for pieces in firsts
    ]
    first = True
    for _ in range(_ROUNDS):
        todo = [(at, i) for at, row in enumerate(found) for i, (_, ok) in enumerate(row) if not ok]
        if not todo:
            break
        counts = await _count(count, [found[at][i][0] for at, i in todo])
        for (at, i), tokens in reversed(list(zip(todo, counts, strict=True))):
            piece = found[at][i][0]
            if tokens <= limit:
                found[at][i] = (piece, True)
                continue
            size = _first_size(window, limit) if first else _smaller(len(piece), tokens, limit)
            found[at][i : i + 1] = [(p, _fits_bytes(p, limit)) for p in split_windows(piece, size)]
        first = False
    else:  # still over after every round: split by a size no tokenizer can exceed
        for row in found:
            row[:] = [
                (p, True)
                for piece, ok in row
                for p in (
                    [piece] if ok else split_windows(piece, max(MIN_WINDOW_CHARS, limit // 4))
                )
            ]
    return [[piece for piece, _ in row] for row in found]


async def _split_all(texts: Sequence[str], max_chars: int) -> list[list[str]]:
    """:func:`split_windows` of each text. The split is pure and grows with the texts: those to
    split are split on worker threads when they are large (prism_memory._offload), so the event
    loop keeps serving; the chunker is handed over directly, so the call never comes back here."""
    long = [text for text in texts if len(text) > max_chars]
    if not long:  # every text fits: each is its only window
        return [[text] for text in texts]
    size = min(max_chars, MAX_CHUNK_CHARS)
    split = partial(chunk_text, size=size, overlap=size // OVERLAP_DIVISOR)
    made = iter(await off_loop(split, long))
    return [next(made) if len(text) > max_chars else [text] for text in texts]


def _first_size(window: EmbedderWindow, limit: int) -> int:
    """Where a counted text over its tokens is split first: about English prose's 4 characters a
    token (windows are counted next, and a window over the limit is split again)."""
    return min(window.max_chars or MAX_CHUNK_CHARS, max(MIN_WINDOW_CHARS, limit * _GUESS))


def _fits_bytes(text: str, tokens: int) -> bool:
    """No tokenizer makes more tokens than a text has UTF-8 bytes (special tokens aside)."""
    return len(text) <= tokens and len(text.encode("utf-8")) <= tokens


def _smaller(chars: int, tokens: int, limit: int) -> int:
    """A size for a window of ``chars`` characters that counted ``tokens`` over ``limit``."""
    return max(MIN_WINDOW_CHARS, min(chars - 1, int(chars * limit / tokens * _SHRINK)))


async def _count(count: Any, texts: list[str]) -> list[int]:
    counted = list(await count(texts))
    if len(counted) != len(texts) or not all(
        isinstance(n, int | np.integer) and not isinstance(n, bool) and n >= 0 for n in counted
    ):
        raise InvalidVectorError("embedder.count_tokens must return one count (an int) per text")
    return [int(n) for n in counted]
