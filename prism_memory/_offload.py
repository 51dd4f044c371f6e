"""CPU-heavy preparation of large inputs runs on a worker thread, never on the event loop.

One process serves many callers on one event loop: a step that computes for a second stalls every
other caller for that second (issue 46: a tenant's ``remember`` of 100 texts of 16,000 characters
made another tenant's tiny recall wait 6.7 s). The step that grows with the input's size on the
write path is tokenizing the texts (:func:`prism_memory.lexical.tokenize`: Unicode normalisation,
the word regex, the stemmer); above :data:`OFFLOAD_CHARS` characters in all it runs here, on
anyio's worker threads, in slices of about :data:`SLICE_CHARS` characters, so the loop also runs
between slices. Smaller inputs are tokenized in place: a thread hop would cost more than it saves.

The worker still needs the GIL; the tokenizer spends its time in C (the regex and PyStemmer's
stemmer, whole text per call) and the loop takes the GIL back at least every
``sys.getswitchinterval()`` (5 ms by default). The results are those of the same functions run
in place: the tokenizer is pure.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import TypeVar

import anyio.to_thread

from .lexical import TextTerms, term_profile, text_terms, tokenize
from .models import Candidate

__all__ = [
    "OFFLOAD_CHARS",
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


async def off_loop(func: Callable[[Sequence[str]], list[T]], texts: Sequence[str]) -> list[T]:
    """``func(texts)`` -- a pure function of the texts, one result per text -- on worker threads
    slice by slice when ``texts`` hold more than :data:`OFFLOAD_CHARS` characters, else in place."""
    if sum(map(len, texts)) <= OFFLOAD_CHARS:
        return func(texts)
    results: list[T] = []
    for run in _slices(texts):
        results += await anyio.to_thread.run_sync(func, run)
    return results


def _terms(texts: Sequence[str]) -> list[TextTerms]:
    return [text_terms(text) for text in texts]


def _tokens(texts: Sequence[str]) -> list[tuple[str, ...]]:
    return [tuple(tokenize(text)) for text in texts]


async def terms_of_texts(texts: Sequence[str]) -> list[TextTerms]:
    """:func:`~prism_memory.lexical.text_terms` of each text, off the loop for a large input."""
    return await off_loop(_terms, texts)


async def tokens_of_texts(texts: Sequence[str]) -> list[tuple[str, ...]]:
    """:func:`~prism_memory.lexical.tokenize` of each text, off the loop for a large input."""
    return await off_loop(_tokens, texts)


def _profiles(texts: Sequence[str]) -> list[tuple[Mapping[str, int], int]]:
    return [term_profile(text) for text in texts]


async def profile_candidates(candidates: Sequence[Candidate]) -> None:
    """Give each candidate without a :attr:`~prism_memory.models.Candidate.profile` (a store
    that keeps none) the :func:`~prism_memory.lexical.term_profile` of its text -- on worker
    threads when they are long -- so the re-rank never tokenizes a large candidate set on the
    event loop. In place for a small set (the re-rank would make the same profiles)."""
    bare = [candidate for candidate in candidates if candidate.profile is None]
    if sum(len(candidate.text) for candidate in bare) <= OFFLOAD_CHARS:
        return
    made = await off_loop(_profiles, [candidate.text for candidate in bare])
    for candidate, profile in zip(bare, made, strict=True):
        candidate.profile = profile
