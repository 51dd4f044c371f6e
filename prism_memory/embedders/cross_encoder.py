"""A local sentence-transformers ``CrossEncoder`` as recall's reranker, run off the event loop
(needs ``pip install 'prism-memory[sentence-transformers]'``; install ``torch`` first to pick its
build).

A cross-encoder reads the query and a candidate together and scores how well the candidate
answers it: slower than comparing two vectors, but sharper, which is why it runs only over the
best fused candidates of one recall (:mod:`prism_memory.reranking`). The model is loaded lazily,
once, in a worker thread; every ``predict`` runs in a worker thread too, in batches of at most
``batch_size`` pairs, so the event loop keeps serving while the model works.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Sequence
from typing import Any

import anyio
import numpy as np

from ..errors import ConfigurationError, EmbedderError, RerankerError
from ..reranking import check_reranker
from ._retry import RetryPolicy, Transient, check_batch_size, retrying

__all__ = ["SentenceTransformerReranker"]


def _load(source: str, device: str, max_length: int | None) -> Any:
    try:
        from sentence_transformers import CrossEncoder
    except ImportError as exc:
        raise ConfigurationError(
            "SentenceTransformerReranker needs sentence-transformers: "
            "pip install 'prism-memory[sentence-transformers]'"
        ) from exc
    try:
        return CrossEncoder(source, device=device, max_length=max_length)
    except (OSError, ValueError) as exc:
        raise ConfigurationError("cannot load the cross-encoder model (see the cause)") from exc


class SentenceTransformerReranker:
    """Reranks recall's best candidates with a local sentence-transformers ``CrossEncoder``.

    ``model`` is a model directory or a name sentence-transformers resolves (from its cache when
    ``HF_HUB_OFFLINE=1``); a model with one output label (the usual relevance cross-encoders such
    as ``cross-encoder/ms-marco-MiniLM-L6-v2``). ``model_id`` is the name ``explain`` shows:
    required for a local directory, else the hub name. ``depth`` (``[1, 128]``) bounds how many
    fused candidates one recall scores (default: all ``4 × top_k``). ``max_length`` is the
    model's token window for a (query, text) pair: a cross-encoder reads at most that much of a
    long entry (its own default when ``None``).

    Each ``predict`` of at most ``batch_size`` (≤ 128) pairs runs in a worker thread, bounded by
    the retry policy's timeout; ``RuntimeError`` from the model (for example out of memory) is
    retried with backoff. Failures raise :class:`~prism_memory.errors.RerankerError`; a model
    that cannot be loaded raises :class:`~prism_memory.errors.ConfigurationError`.
    """

    def __init__(
        self,
        model: str | os.PathLike[str],
        *,
        model_id: str | None = None,
        device: str = "cpu",
        batch_size: int = 32,
        depth: int | None = None,
        max_length: int | None = None,
        retry: RetryPolicy | None = None,
    ) -> None:
        source = os.fspath(model)
        if not isinstance(source, str) or not source.strip():
            raise ConfigurationError("model must be a non-empty path or name")
        if model_id is None and os.path.isdir(source):
            raise ConfigurationError(
                "a local model folder needs model_id= (the model's name and version, for "
                "example 'ms-marco-MiniLM-L6-v2'): a folder's name is no model identity"
            )
        if max_length is not None and (
            isinstance(max_length, bool) or not isinstance(max_length, int) or max_length < 1
        ):
            raise ConfigurationError("max_length must be None or a positive integer")
        self._source = source
        self._device = device
        self._max_length = max_length
        self._batch_size = check_batch_size(batch_size)
        self._retry = retry or RetryPolicy(timeout_seconds=120.0)
        self._model: Any = None
        self._lock = threading.Lock()  # one predict (or load) at a time, across threads
        self.model = model_id if model_id is not None else source
        """The name ``recall(explain=True)`` shows: ``model_id``, or the hub name."""
        self.depth = depth
        """How many of the best fused candidates one recall scores (``None``: all fetched)."""
        check_reranker(self)

    def __repr__(self) -> str:
        return f"SentenceTransformerReranker(model={self.model!r}, depth={self.depth})"

    def _loaded(self) -> Any:
        with self._lock:
            if self._model is None:
                self._model = _load(self._source, self._device, self._max_length)
            return self._model

    def _predict(self, pairs: list[tuple[str, str]]) -> Any:
        model = self._loaded()
        with self._lock:
            return model.predict(
                pairs, batch_size=len(pairs), convert_to_numpy=True, show_progress_bar=False
            )

    async def rerank(self, query: str, texts: Sequence[str]) -> list[float]:
        """One relevance score per text (higher is better), in order."""
        pairs = [(query, text) for text in texts]
        step = self._batch_size
        scores: list[float] = []
        for start in range(0, len(pairs), step):
            scores.extend(await self._batch(pairs[start : start + step]))
        return scores

    async def _batch(self, pairs: list[tuple[str, str]]) -> list[float]:
        async def attempt() -> list[float]:
            try:
                raw = await anyio.to_thread.run_sync(self._predict, pairs, abandon_on_cancel=True)
            except RuntimeError as exc:
                raise Transient(f"model error ({type(exc).__name__})") from exc
            values = np.asarray(raw, dtype=np.float64)
            if values.ndim == 2 and values.shape[1] == 1:
                values = values[:, 0]
            if values.ndim != 1:
                raise RerankerError("the cross-encoder gives more than one score per pair")
            if values.shape[0] != len(pairs):
                raise RerankerError(
                    f"the cross-encoder returned {values.shape[0]} scores for {len(pairs)} pairs"
                )
            scores: list[float] = values.tolist()
            return scores

        try:
            return await retrying(attempt, self._retry, "cross-encoder predict")
        except RerankerError:
            raise
        except EmbedderError as exc:  # the retries ran out
            raise RerankerError(str(exc), transient=exc.transient) from exc
        except (TypeError, ValueError) as exc:  # the model rejected its input
            raise RerankerError(
                f"cross-encoder predict failed ({type(exc).__name__}); its error is the cause"
            ) from exc
