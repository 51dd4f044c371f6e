"""CPU-heavy preparation of large inputs runs on a worker thread, never on the event loop.

One process serves many callers on one event loop: a step that computes for a second stalls every
other caller for that second (issue 46: a tenant's ``remember`` of 100 texts of 16,000 characters
made another tenant's tiny recall wait 6.7 s). The steps that grow with the input's size on the
write path are pure functions of each text: tokenizing (:func:`prism_memory.lexical.tokenize`:
Unicode normalisation, the word regex, the stemmer), the split into the embedder's windows
(:func:`prism_memory.windows.split_windows`: ~0.1 s for 100 texts of 16,000 characters) and
:class:`~prism_memory.embedding.HashEmbedder`'s hashing. Above :data:`OFFLOAD_CHARS` characters
in all each runs here (:func:`off_loop`), on the event loop's default executor (worker threads),
in slices of about :data:`SLICE_CHARS` characters, so the loop also runs between slices. Smaller
inputs are handled in place: a thread hop would cost more than it saves. (The embedder's batches
are the host's code, awaited one by one: :func:`~prism_memory.embedding.embed_batched` lets the
loop run between them.)
The rest of ``remember``'s preparation (the input checks, the redactor, the id digest: ~0.2 ms for
a text of 16,000 characters) stays on the loop, where the host's redactor expects to run, and
lets the loop run every :data:`PREPARE_SLICE_CHARS` characters.

The worker still needs the GIL. Left alone, the event loop's thread would wait up to
``sys.getswitchinterval()`` (5 ms) for it each time it wakes (every request, every socket read)
while a worker computes; so the worker pauses for :data:`GIL_PAUSE` once a millisecond of work
has passed (checked after each text: about 1 ms for 16,000 characters with the C stemmer), and
the loop waits about that long at most. The
results are those of the same functions run in place: each is pure.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Sequence
from typing import TypeVar

from ._columns import CandidateColumns, Profile
from .lexical import TextTerms, remembered_profile, term_profile, text_terms, tokenize
from .models import Candidate

__all__ = [
    "OFFLOAD_CHARS",
    "PREPARE_SLICE_CHARS",
    "SLICE_CHARS",
    "off_loop",
    "profile_candidates",
    "terms_of_texts",
    "tokens_of_texts",
]

OFFLOAD_CHARS = 32_768
"""Texts of more characters than this in all are tokenized on a worker thread (about 2 ms of
tokenizing with the C stemmer, 20 ms with the pure Python one)."""
SLICE_CHARS = 131_072
"""About this many characters are tokenized per worker-thread call."""
PREPARE_SLICE_CHARS = 32_768
"""``remember`` lets the event loop run after checking, redacting and digesting about this many
characters (on the loop: the redactor is the host's code, called where the host called)."""
GIL_PAUSE = 0.0002
"""The worker's pause after each millisecond of work (see :func:`_each`): at most 20 %."""

T = TypeVar("T")


def _slices(texts: Sequence[str]) -> list[Sequence[str]]:
    """``texts`` cut in consecutive runs of about :data:`SLICE_CHARS` characters."""
    runs: list[Sequence[str]] = []
    start = size = 0
    for at, text in enumerate(texts):
        size += len(text)
        if size >= SLICE_CHARS:
            runs.append(texts[start : at + 1])
            start, size = at + 1, 0
    if start < len(texts):
        runs.append(texts[start:])
    return runs


def _each(func: Callable[[str], T], texts: Sequence[str]) -> list[T]:
    """``func`` of each text on a worker thread, pausing :data:`GIL_PAUSE` s once a millisecond
    of work has passed: the pause hands the GIL to the event loop's thread if it waits for it,
    so the loop waits about a millisecond instead of the interpreter's switch interval (5 ms) at
    every turn."""
    results = []
    worked = time.perf_counter()
    for text in texts:
        results.append(func(text))
        if time.perf_counter() - worked >= 0.001:
            time.sleep(GIL_PAUSE)
            worked = time.perf_counter()
    return results


async def off_loop(func: Callable[[str], T], texts: Sequence[str]) -> list[T]:
    """``func`` -- a pure function of one text -- of each of ``texts``: on worker threads slice
    by slice when ``texts`` hold more than :data:`OFFLOAD_CHARS` characters, else in place."""
    if sum(map(len, texts)) <= OFFLOAD_CHARS:
        return [func(text) for text in texts]
    loop = asyncio.get_running_loop()
    results: list[T] = []
    for run in _slices(texts):
        results += await loop.run_in_executor(None, _each, func, run)
    return results


def _tokens(text: str) -> tuple[str, ...]:
    return tuple(tokenize(text))


async def terms_of_texts(texts: Sequence[str]) -> list[TextTerms]:
    """:func:`~prism_memory.lexical.text_terms` of each text, off the loop for a large input."""
    return await off_loop(text_terms, texts)


async def tokens_of_texts(texts: Sequence[str]) -> list[tuple[str, ...]]:
    """:func:`~prism_memory.lexical.tokenize` of each text, off the loop for a large input."""
    return await off_loop(_tokens, texts)


async def profile_candidates(candidates: Sequence[Candidate]) -> None:
    """Give each candidate without a :attr:`~prism_memory.models.Candidate.profile` (a store
    that keeps none) the :func:`~prism_memory.lexical.term_profile` of its text -- on worker
    threads when they are long -- so the re-rank never tokenizes a large candidate set on the
    event loop. In place for a small set (the re-rank would make the same profiles); columns
    (:class:`~prism_memory._columns.CandidateColumns`) get their ``profiles`` column."""
    if isinstance(candidates, CandidateColumns):
        await _profile_columns(candidates)
        return
    bare = [candidate for candidate in candidates if candidate.profile is None]
    if sum(len(candidate.text) for candidate in bare) <= OFFLOAD_CHARS:
        return
    for candidate in bare:  # memoised ones first, on the loop (a dict lookup each)
        candidate.profile = remembered_profile(candidate.text)
    bare = [candidate for candidate in bare if candidate.profile is None]
    made = await off_loop(term_profile, [candidate.text for candidate in bare])
    for candidate, profile in zip(bare, made, strict=True):
        candidate.profile = profile


async def _profile_columns(columns: CandidateColumns) -> None:
    """:func:`profile_candidates` of candidates as columns: the texts without a kept profile."""
    texts, kept = columns.texts, columns.profiles
    bare = [at for at in range(len(texts)) if kept is None or kept[at] is None]
    if sum(len(texts[at]) for at in bare) <= OFFLOAD_CHARS:
        return
    profiles: list[Profile | None] = list(kept) if kept is not None else [None] * len(texts)
    for at in bare:  # memoised ones first, on the loop (a dict lookup each)
        profiles[at] = remembered_profile(texts[at])
    bare = [at for at in bare if profiles[at] is None]
    made = await off_loop(term_profile, [texts[at] for at in bare])
    for at, profile in zip(bare, made, strict=True):
        profiles[at] = profile
    columns.profiles = profiles
