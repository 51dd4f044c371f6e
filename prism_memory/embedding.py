"""Embedders and the vector checks every trust boundary runs.

:class:`Embedder` is the small async protocol a host implements around its model. :class:`HashEmbedder`
is deterministic feature hashing for tests and demos: it captures shared words, not meaning.
"""

from __future__ import annotations

import asyncio
import functools
import inspect
import sys
import time
from collections.abc import Sequence
from contextlib import nullcontext
from dataclasses import dataclass
from typing import Any, Final, Protocol, runtime_checkable

import numpy as np

from . import _telemetry as otel
from ._hashing import hash_vector
from ._offload import off_loop
from .errors import (
    CapExceededError,
    ConfigurationError,
    DimensionMismatchError,
    InvalidVectorError,
    ValidationError,
)
from .limits import CEILINGS
from .models import Vector

__all__ = [
    "CHARS_PER_TOKEN",
    "DEFAULT_WINDOW_CHARS",
    "HASH_EMBEDDER_VERSION",
    "MIN_WINDOW_CHARS",
    "Embedder",
    "EmbedderWindow",
    "HashEmbedder",
    "assert_finite_vector",
    "check_embedder",
    "embed_batched",
    "embedder_model",
    "embedder_provider",
    "embedder_window",
]

_MAX_MODEL = 256


@runtime_checkable
class Embedder(Protocol):
    """Turns texts into vectors of a fixed width.

    ``embed`` must be a coroutine function (``async def``). It receives at most the configured batch
    size of texts (never more than 128) and returns one vector per text, in order, as a 2-D array or
    a sequence of sequences of floats. :func:`check_embedder` (run by ``create_memory``) rejects a
    sync ``embed`` and a missing or invalid ``dimensions`` up front.

    An embedder should also expose ``model``: a short string naming the model (and its version)
    that made the vectors. It is stored with every vector; recall refuses to compare a query
    against vectors another model made, and a write refuses to add vectors of another model to a
    thread whose rows hold one (see docs/embedders.md). Every embedder prism_memory ships has one,
    and the operator commands (``worker``, ``rebuild``) require it; an embedder without it is
    trusted blindly, and so it is not part of this protocol's required surface.

    An embedder should also say how much text it reads whole -- its *window* -- with ``max_chars``
    (characters) and/or ``max_tokens`` (the model's tokens), and may offer ``async def
    count_tokens(texts) -> Sequence[int]`` to count exactly. A longer text is embedded as several
    windows that fit (see :func:`embedder_window` and ``prism_memory.windows``); an embedder that
    says nothing is given :data:`DEFAULT_WINDOW_CHARS`. These are optional, so not part of the
    required surface either.
    """

    @property
    def dimensions(self) -> int:
        """Width of every vector this embedder returns."""
        ...

    async def embed(self, texts: Sequence[str]) -> Any:
        """Embed ``texts``; the result is checked by :func:`assert_finite_vector`."""
        ...


def _is_async_callable(func: object) -> bool:
    while isinstance(func, functools.partial):
        func = func.func
    if inspect.iscoroutinefunction(func):
        return True
    if inspect.isroutine(func):
        return False
    # an object with ``async def __call__``
    return inspect.iscoroutinefunction(type(func).__call__)


def embedder_model(embedder: object) -> str | None:
    """The embedder's optional ``model`` identifier, validated; ``None`` when it has none.

    Raises :class:`ConfigurationError` if ``model`` is set but is not a non-empty string of at most
    256 printable characters.
    """
    model = getattr(embedder, "model", None)
    if model is None:
        return None
    if (
        not isinstance(model, str)
        or not model.strip()
        or len(model) > _MAX_MODEL
        or not model.isprintable()
    ):
        raise ConfigurationError(
            "embedder.model must be None or a non-empty printable string of at most "
            f"{_MAX_MODEL} characters"  # never the value: a model name may be a secret
        )
    return model


def embedder_provider(embedder: object) -> str:
    """``gen_ai.provider.name`` of an embedder's calls: its ``provider`` string attribute
    (``openai``, ``sentence_transformers``, ``prism_memory``…), else the top-level package of its
    class (a host's own embedder: its package's name)."""
    provider = getattr(embedder, "provider", None)
    if isinstance(provider, str) and 0 < len(provider) <= 64 and provider.isprintable():
        return provider
    return type(embedder).__module__.split(".", 1)[0]


DEFAULT_WINDOW_CHARS: Final = 1000
"""The window, in characters, of an embedder that declares neither ``max_chars`` nor
``max_tokens``: about 180 English words, within the 256 word pieces of the smallest common
sentence-transformers models (all-MiniLM-L6-v2), so such a model sees every window whole."""
CHARS_PER_TOKEN: Final = 3
"""Characters per token assumed when an embedder declares ``max_tokens`` only: fewer than English
prose averages (about 4), so a window of ``max_tokens * 3`` characters fits the model for most
text; an embedder with ``count_tokens`` has every window counted instead."""
MIN_WINDOW_CHARS: Final = 16
"""Smallest window (characters) an embedder may declare."""
_UNLIMITED: Final = sys.maxsize
_WINDOW: Final = ("max_chars", "max_tokens")


@dataclass(frozen=True, slots=True)
class EmbedderWindow:
    """How much text an embedder reads whole (see :func:`embedder_window`)."""

    chars: int
    """Longest text, in characters, split into windows of no more (the char budget)."""
    tokens: int | None
    """The model's window in its own tokens, when the embedder declares ``max_tokens``."""
    declared: bool
    """Whether the embedder declared its window (else :data:`DEFAULT_WINDOW_CHARS` applies)."""
    max_chars: int | None = None
    """The embedder's own ``max_chars``, when it declares one: no window is ever longer."""


def _declared(embedder: object, name: str, least: int) -> int | None:
    value = getattr(embedder, name, None)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < least:
        raise ConfigurationError(
            f"embedder.{name} must be None or an integer of at least {least}"
        )  # never the value: it is the host's configuration
    return value


def embedder_window(embedder: object) -> EmbedderWindow:
    """The window of ``embedder``: how many characters of a text it reads whole.

    ``max_chars`` is taken as it is; ``max_tokens`` counts :data:`CHARS_PER_TOKEN` characters per
    token (the smaller of the two when both are declared); an embedder that declares neither gets
    :data:`DEFAULT_WINDOW_CHARS`. Raises :class:`ConfigurationError` for a declared value that is
    not an integer (``max_chars`` at least :data:`MIN_WINDOW_CHARS`, ``max_tokens`` at least 1).
    """
    chars = _declared(embedder, "max_chars", MIN_WINDOW_CHARS)
    tokens = _declared(embedder, "max_tokens", 1)
    if chars is None and tokens is None:
        return EmbedderWindow(chars=DEFAULT_WINDOW_CHARS, tokens=None, declared=False)
    by_tokens = _UNLIMITED if tokens is None else max(MIN_WINDOW_CHARS, tokens * CHARS_PER_TOKEN)
    return EmbedderWindow(
        chars=min(_UNLIMITED if chars is None else chars, by_tokens),
        tokens=tokens,
        declared=True,
        max_chars=chars,
    )


def check_embedder(embedder: object) -> tuple[int, str | None]:
    """Check that ``embedder`` implements :class:`Embedder`; return ``(dimensions, model)``.

    A missing or non-positive ``dimensions``, a missing or non-callable ``embed``, an ``embed``
    that is not a coroutine function, or an invalid declared window (``max_chars`` or
    ``max_tokens`` given as plain attributes -- a property is read on first use, as it may load a
    model -- or a ``count_tokens`` that is not a coroutine function) raise
    :class:`ConfigurationError` -- at set-up, rather than as a retry loop in the background
    indexing queue.
    """
    try:
        width = embedder.dimensions  # type: ignore[attr-defined]
    except AttributeError as exc:
        raise ConfigurationError("embedder has no 'dimensions' (the Embedder protocol)") from exc
    if isinstance(width, bool) or not isinstance(width, int) or width < 1:
        raise ConfigurationError(f"embedder.dimensions must be a positive integer; got {width!r}")
    embed = getattr(embedder, "embed", None)
    if embed is None:
        raise ConfigurationError("embedder has no 'embed' method (the Embedder protocol)")
    if not callable(embed):
        raise ConfigurationError("embedder.embed must be callable")
    if not _is_async_callable(embed):
        raise ConfigurationError(
            "embedder.embed must be a coroutine function ('async def embed(self, texts)'); "
            "wrap a synchronous model with asyncio.to_thread inside an async method"
        )
    if not any(
        isinstance(inspect.getattr_static(embedder, name, None), property) for name in _WINDOW
    ):
        embedder_window(embedder)  # a property (that may load a model) is read on first use
    count = getattr(embedder, "count_tokens", None)
    if count is not None and not _is_async_callable(count):
        raise ConfigurationError(
            "embedder.count_tokens must be a coroutine function ('async def count_tokens(self, "
            "texts)')"
        )
    return width, embedder_model(embedder)


HASH_EMBEDDER_VERSION = 1
"""Bumped whenever :class:`HashEmbedder`'s features or hashing change (its vectors then differ)."""


class HashEmbedder:
    """Deterministic, dependency-free embedder for tests and demos — **not semantic**.

    Word unigrams and character trigrams are hashed (BLAKE2b) into signed buckets and the result is
    L2-normalised, so texts that share words are close. Use a real model in production. Its
    ``model`` is ``hash-v<version>-<width>`` (``hash-v1-64``): vectors of another width or version
    are another model's, and recall and writes refuse to mix them with these. It reads every text
    whole, however long (``max_chars`` is unlimited).
    """

    max_chars: Final = _UNLIMITED
    """Hashing has no window: every text is embedded whole."""

    def __init__(self, dimensions: int = 64) -> None:
        if isinstance(dimensions, bool) or not isinstance(dimensions, int) or dimensions < 1:
            raise ValidationError("HashEmbedder dimensions must be a positive integer")
        self._dimensions = dimensions
        self.model = f"hash-v{HASH_EMBEDDER_VERSION}-{dimensions}"
        """The model identity recorded with every vector (``hash-v1-64``)."""

    @property
    def dimensions(self) -> int:
        """Width of the vectors."""
        return self._dimensions

    def embed_one(self, text: str) -> Vector:
        """Embed one text synchronously."""
        return hash_vector(text, self._dimensions)

    async def embed(self, texts: Sequence[str]) -> Vector:
        """Embed ``texts`` into a ``(len(texts), dimensions)`` float32 array."""
        if not texts:
            return np.zeros((0, self._dimensions), dtype=np.float32)
        # pure Python (~25 ms per 16,000 characters): a large batch runs on worker threads, so
        # the event loop keeps serving (prism_memory._offload); a small one in place
        return np.stack(
            await off_loop(functools.partial(hash_vector, dimensions=self._dimensions), texts)
        )

    def __repr__(self) -> str:
        return f"HashEmbedder(dimensions={self._dimensions})"


_PLAIN_NUMBERS = frozenset({float, int})
"""Item types a vector given as a list may hold without an item-by-item check."""


def assert_finite_vector(
    vector: object, label: str = "embedding", expected_length: int | None = None
) -> Vector:
    """Return ``vector`` as a 1-D float32 array, or raise if it is not a usable embedding.

    Rejects non-numbers, booleans, empty vectors, NaN and ±inf (also values that overflow float32),
    and — when ``expected_length`` is given — the wrong width (:class:`DimensionMismatchError`).
    """
    if isinstance(vector, np.ndarray):
        if vector.dtype.kind not in "fiu":
            raise InvalidVectorError(f"{label} is not numeric (dtype {vector.dtype})")
        raw = vector
    else:
        if isinstance(vector, str | bytes) or not isinstance(vector, Sequence):
            raise InvalidVectorError(f"{label} must be a sequence of numbers")
        # the common case -- a JSON list of plain floats and ints -- is told apart by the set of
        # its item types (C speed; a bool's type is bool); anything else is checked item by item
        if not set(map(type, vector)) <= _PLAIN_NUMBERS:
            for item in vector:
                if isinstance(item, bool | np.bool_ | np.complexfloating) or not isinstance(
                    item, int | float | np.integer | np.floating
                ):
                    raise InvalidVectorError(
                        f"{label} holds a non-number (a {type(item).__name__})"
                    )
        try:
            raw = np.asarray(vector, dtype=np.float64)
        except (OverflowError, TypeError, ValueError) as exc:
            raise InvalidVectorError(f"{label} holds a value that is not a float") from exc
    if raw.ndim != 1:
        raise InvalidVectorError(f"{label} must be one-dimensional, got shape {raw.shape}")
    if raw.size == 0:
        raise InvalidVectorError(f"{label} is empty")
    if not np.isfinite(raw).all():
        raise InvalidVectorError(f"{label} holds NaN or infinite values")
    if raw.dtype == np.float32:
        result = raw  # finite float32 already: nothing to convert or to overflow
    else:
        with np.errstate(over="ignore"):
            result = raw.astype(np.float32, copy=False)
        if not np.isfinite(result).all():
            raise InvalidVectorError(f"{label} holds values too large for float32")
    if expected_length is not None and result.shape[0] != expected_length:
        raise DimensionMismatchError(
            f"{label} has width {result.shape[0]}, expected {expected_length}"
        )
    return np.ascontiguousarray(result)


async def embed_batched(
    embedder: Embedder,
    texts: Sequence[str],
    *,
    batch_size: int = 32,
    dimensions: int | None = None,
) -> Vector:
    """Embed ``texts`` in batches of at most ``batch_size`` (≤ 128) and check every vector.

    Returns a ``(len(texts), width)`` float32 matrix. ``dimensions`` defaults to the embedder's.
    """
    if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
        raise ValidationError("batch_size must be a positive integer")
    if batch_size > CEILINGS["embed_batch"]:
        raise CapExceededError(f"batch_size is over the cap {CEILINGS['embed_batch']}")
    width = dimensions if dimensions is not None else embedder.dimensions
    if not otel.observing():
        return await _embed_all(embedder, texts, batch_size, width)
    started = time.perf_counter()
    model = getattr(embedder, "model", None)
    attributes: dict[str, Any] = {
        "gen_ai.operation.name": "embeddings",
        "gen_ai.provider.name": embedder_provider(embedder),
        "gen_ai.embeddings.dimension.count": width,
    }
    name = "embeddings"
    if isinstance(model, str) and model:
        attributes["gen_ai.request.model"] = model
        name = f"embeddings {model}"
    error: str | None = None
    manager: Any = otel.start(name, attributes) if otel.tracer() else nullcontext()
    try:
        with manager as span:
            if span is not None:
                span.set_attribute("prism_memory.embed.inputs", len(texts))
            try:
                return await _embed_all(embedder, texts, batch_size, width)
            except BaseException as exc:
                error = type(exc).__name__
                if span is not None:
                    otel.set_error(span, exc)
                raise
    finally:
        meters = otel.instruments()
        if meters is not None:
            measured = {"gen_ai.operation.name": "embeddings"}
            if error is not None:
                measured["error.type"] = error
            meters.embed_duration.record(time.perf_counter() - started, measured)


async def _embed_all(
    embedder: Embedder, texts: Sequence[str], batch_size: int, width: int
) -> Vector:
    batches: list[Vector] = []
    for start in range(0, len(texts), batch_size):
        if start:  # an embedder that computes in place (no await) would hold the event loop
            await asyncio.sleep(0)  # for the whole input: it runs between batches
        chunk = list(texts[start : start + batch_size])
        result = await embedder.embed(chunk)
        try:
            count = len(result)
        except TypeError as exc:
            raise InvalidVectorError("embedder returned something without a length") from exc
        if count != len(chunk):
            raise InvalidVectorError(f"embedder returned {count} vectors for {len(chunk)} texts")
        matrix = _finite_matrix(result, width)
        if matrix is None:  # checked row by row, so that a bad one is named
            matrix = np.stack(
                [
                    assert_finite_vector(item, f"embedding {start + offset}", width)
                    for offset, item in enumerate(result)
                ]
            )
        batches.append(matrix)
    if not batches:
        return np.zeros((0, width), dtype=np.float32)
    return batches[0] if len(batches) == 1 else np.concatenate(batches)


def _finite_matrix(result: object, width: int) -> Vector | None:
    """A float32 copy of ``result`` if it is a numeric ``(n, width)`` array whose values are all
    finite in float32 -- what :func:`assert_finite_vector` accepts row by row -- else ``None`` (the
    rows are then checked one by one, so a bad one is named in the error). A copy: an embedder may
    hand out a buffer it writes again on its next call."""
    if (
        not isinstance(result, np.ndarray)
        or result.dtype.kind not in "fiu"
        or result.ndim != 2
        or result.shape[1] != width
        or width == 0
    ):
        return None
    if result.dtype == np.float32:
        matrix = np.array(result, order="C")  # float32 already: no overflow to silence
    else:
        with np.errstate(over="ignore"):
            matrix = np.array(result, dtype=np.float32, order="C")
    if not np.isfinite(matrix).all():
        return None
    return matrix
