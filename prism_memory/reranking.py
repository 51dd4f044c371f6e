"""The optional reranking stage of recall: a host's model reorders the best fused candidates.

:class:`Reranker` is the small async protocol a host implements around a cross-encoder or an LLM
(:class:`~prism_memory.embedders.cross_encoder.SentenceTransformerReranker` ships one). A memory
given one (``create_memory(reranker=...)``, or ``recall(reranker=...)`` for one call) recalls in
four steps:

1. the store selects up to ``4 × top_k`` candidates, every one of which passed the exclusion
   rules (invisible, revoked, non-consented, invalidated, expired, held and not-yet-embedded
   entries are never selected; a parent's entries only through a live grant);
2. the fusion of :mod:`prism_memory.ranking` orders them (with the recency and importance blend
   when asked);
3. the best ``depth`` of that order -- the reranker's optional ``depth``, else every candidate,
   and never fewer than ``top_k`` -- go to ``rerank(query, texts)`` in one call, each text as it
   would leave the memory (scrubbed);
4. they are ordered by its score descending, then sequence ascending, then id ascending, and the
   first ``top_k`` are the hits. Each hit keeps its fused ``score`` and carries ``rerank_score``;
   ``explain=True`` names the reranker and its score per hit.

Without a reranker recall is exactly the fusion's order. A reranker's failure raises
:class:`~prism_memory.errors.RerankerError` (its own exception as the cause); so does an answer
that is not one finite number per text. Neither message repeats a text, the query or a score.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any, Protocol, runtime_checkable

import numpy as np

from .errors import ConfigurationError, PrismMemoryError, RerankerError
from .limits import CEILINGS
from .models import RecallExplanation, RecallHit

__all__ = [
    "MAX_RERANK_DEPTH",
    "Reranked",
    "Reranker",
    "check_reranker",
    "explain_reranked",
    "rerank_count",
    "rerank_hits",
]

MAX_RERANK_DEPTH = 4 * CEILINGS["top_k"]
"""The most candidates one recall hands a reranker: all a ``top_k`` at its ceiling fetches (128)."""

_MAX_MODEL = 256


@runtime_checkable
class Reranker(Protocol):
    """Scores how well each text answers a query; recall orders its best candidates by it.

    ``rerank`` must be a coroutine function (``async def``): it receives the query and at most
    :data:`MAX_RERANK_DEPTH` (128) texts in one call and returns one finite number per text, in
    order (a sequence of floats or a 1-D numeric array); higher means more relevant. Run a
    synchronous model in a worker thread (``asyncio.to_thread``) inside it.

    ``model`` names the reranking model (and its version): a non-empty printable string of at most
    256 characters, shown by ``recall(explain=True)``. An optional ``depth`` (an integer in
    ``[1, 128]``) bounds how many of the best fused candidates it is shown per recall (default:
    all ``4 × top_k`` fetched; never fewer than ``top_k``). :func:`check_reranker` (run by
    ``create_memory`` and ``recall``) refuses anything else up front.
    """

    @property
    def model(self) -> str:
        """The reranking model's name and version."""
        ...

    async def rerank(self, query: str, texts: Sequence[str]) -> Sequence[float]:
        """One relevance score per text, in order; higher is better."""
        ...


def _is_async_callable(func: object) -> bool:
    while isinstance(func, functools.partial):
        func = func.func
    if inspect.iscoroutinefunction(func):
        return True
    if inspect.isroutine(func):
        return False
    return inspect.iscoroutinefunction(type(func).__call__)


def check_reranker(reranker: object) -> Reranker:
    """``reranker`` if it implements :class:`Reranker`, else :class:`ConfigurationError`.

    Checks that ``rerank`` is a coroutine function, that ``model`` is a non-empty printable string
    of at most 256 characters, and that ``depth``, when present and not ``None``, is an integer in
    ``[1, 128]``. The messages never repeat the values.
    """
    rerank = getattr(reranker, "rerank", None)
    if rerank is None or not callable(rerank):
        raise ConfigurationError("reranker has no 'rerank' method (the Reranker protocol)")
    if not _is_async_callable(rerank):
        raise ConfigurationError(
            "reranker.rerank must be a coroutine function ('async def rerank(self, query, texts)')"
        )
    model = getattr(reranker, "model", None)
    if (
        not isinstance(model, str)
        or not model.strip()
        or len(model) > _MAX_MODEL
        or not model.isprintable()
    ):
        raise ConfigurationError(
            f"reranker.model must be a non-empty printable string of at most {_MAX_MODEL} characters"
        )
    _depth(reranker)
    return reranker  # type: ignore[return-value]  # checked above: it has the protocol's surface


def _depth(reranker: object) -> int | None:
    depth = getattr(reranker, "depth", None)
    if depth is None:
        return None
    if isinstance(depth, bool) or not isinstance(depth, int) or not 1 <= depth <= MAX_RERANK_DEPTH:
        raise ConfigurationError(
            f"reranker.depth must be None or an integer in [1, {MAX_RERANK_DEPTH}]"
        )
    return depth


def rerank_count(reranker: Reranker, top_k: int, fetched: int) -> int:
    """How many of the fused best of ``fetched`` candidates ``reranker`` is shown for ``top_k``
    hits: its ``depth`` (all ``fetched`` without one), never fewer than ``top_k``."""
    depth = _depth(reranker)
    return max(top_k, fetched if depth is None else min(depth, fetched))


@dataclass(frozen=True, slots=True)
class Reranked:
    """A reranker's order of recall hits: the hits cut to ``top_k``, and what it saw."""

    hits: list[RecallHit]
    """The best ``top_k`` by the reranker's score, each with ``rerank_score`` set."""
    fused_ranks: list[int]
    """Each hit's 1-based rank in the fused order the reranker was shown."""
    shown: int
    """How many candidates the reranker scored."""
    model: str
    """The reranker's ``model``."""


def _scores(raw: object, count: int) -> list[float]:
    """``raw`` as ``count`` finite floats, or :class:`RerankerError` (never quoting a value)."""
    if isinstance(raw, list | tuple) and any(isinstance(value, bool) for value in raw):
        raise RerankerError("the reranker must return numbers, not booleans")
    if isinstance(raw, str | bytes):
        raise RerankerError("the reranker must return a sequence of numbers")
    try:
        values = np.asarray(raw)
    except (TypeError, ValueError) as exc:
        raise RerankerError("the reranker must return a sequence of numbers") from exc
    if values.ndim != 1 or values.dtype.kind not in "fiu":
        raise RerankerError("the reranker must return a flat sequence of numbers")
    if values.shape[0] != count:
        raise RerankerError(f"the reranker returned {values.shape[0]} scores for {count} texts")
    with np.errstate(over="ignore"):
        floats = values.astype(np.float64)
    if not bool(np.isfinite(floats).all()):
        raise RerankerError("the reranker returned a non-finite score")
    scores: list[float] = floats.tolist()
    return scores


async def rerank_hits(
    reranker: Reranker, query: str, hits: Sequence[RecallHit], top_k: int
) -> Reranked:
    """Order ``hits`` (the fused best, as recall hands them out) by ``reranker`` and cut to
    ``top_k``.

    Ties break on sequence ascending, then id ascending, then fused rank. The reranker is not
    called when there are no hits. Its exceptions become :class:`RerankerError` chained ``from``
    them (a :class:`~prism_memory.errors.PrismMemoryError` it raises passes through as it is).
    """
    model = reranker.model
    if not hits:
        return Reranked([], [], 0, model)
    texts = [hit.record.text for hit in hits]
    try:
        raw: Any = await reranker.rerank(query, texts)
    except PrismMemoryError:
        raise
    except Exception as exc:
        # the reranker's own message may quote the query or a text: name only the error's type
        raise RerankerError(
            f"the reranker failed ({type(exc).__name__}); its error is the cause", transient=True
        ) from exc
    scores = _scores(raw, len(hits))
    order = sorted(
        range(len(hits)),
        key=lambda i: (-scores[i], hits[i].record.sequence, hits[i].record.id, i),
    )[:top_k]
    return Reranked(
        hits=[replace(hits[i], rerank_score=scores[i]) for i in order],
        fused_ranks=[i + 1 for i in order],
        shown=len(hits),
        model=model,
    )


def explain_reranked(
    explanations: Sequence[RecallExplanation], reranked: Reranked
) -> tuple[RecallExplanation, ...]:
    """``explanations`` of ``reranked.hits`` (in that order) with the reranker's name, its score
    and a ``how["rerank"]`` line saying what it reordered."""
    out = []
    for explanation, hit, fused_rank in zip(
        explanations, reranked.hits, reranked.fused_ranks, strict=True
    ):
        how = dict(explanation.how)
        how["rerank"] = (
            f"ordered by reranker {reranked.model!r}: score {hit.rerank_score:.6g}, "
            f"fused rank {fused_rank} of the {reranked.shown} best fused candidates it scored "
            "(ties: sequence, then id)"
        )
        out.append(
            replace(explanation, reranker=reranked.model, rerank_score=hit.rerank_score, how=how)
        )
    return tuple(out)
