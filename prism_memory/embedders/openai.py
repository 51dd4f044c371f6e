"""An embedder for any OpenAI-compatible ``POST {base_url}/embeddings`` endpoint (needs ``httpx``:
``pip install 'prism-memory[openai]'``).

The API key is read from an environment variable (``OPENAI_API_KEY`` by default) when the embedder
is created; it is sent as a bearer token and never appears in an error message or ``repr``.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from ..embedding import embedder_model
from ..errors import ConfigurationError, EmbedderError, InvalidVectorError
from ..models import Vector
from ._retry import RetryPolicy, Transient, check_batch_size, check_vectors, retrying

try:
    import httpx
except ImportError as exc:  # pragma: no cover - exercised only without the extra
    raise ConfigurationError(
        "OpenAIEmbedder needs httpx: pip install 'prism-memory[openai]'"
    ) from exc

__all__ = ["OpenAIEmbedder"]

_TRANSIENT_STATUS = frozenset({408, 409, 425, 429})


def _retry_after(response: httpx.Response) -> float | None:
    value = response.headers.get("retry-after")
    try:
        seconds = float(value) if value is not None else None
    except ValueError:
        return None
    return seconds if seconds is not None and math.isfinite(seconds) else None


class OpenAIEmbedder:
    """Embeds through an OpenAI-compatible HTTP API.

    ``base_url`` (default: the ``OPENAI_BASE_URL`` environment variable) is the API root, such as
    ``http://127.0.0.1:8000/v1`` for a local server; ``model`` is sent with every request and is
    also this embedder's ``model`` identifier (override with ``model_id``, for example to add a
    version). ``dimensions`` is the width every vector must have; with ``send_dimensions`` it is
    also sent (models such as ``text-embedding-3-*`` shorten their vectors to it).

    ``max_tokens`` is the model's window in its tokens (8191 for OpenAI's ``text-embedding-3-*``
    and ``text-embedding-ada-002``; your server's for others): a longer text is embedded as
    windows of about ``max_tokens * 3`` characters. Without it the embedder declares no window and
    texts over 1,000 characters are split (``prism_memory.embedding.DEFAULT_WINDOW_CHARS``).

    Texts are sent ``batch_size`` (≤ 128) at a time. Each request is bounded by the retry policy's
    timeout; HTTP 408/409/425/429 and 5xx answers, timeouts and network errors are retried with
    exponential backoff (honouring ``Retry-After``), then raise
    :class:`~prism_memory.errors.EmbedderError` with ``transient=True``. Other 4xx answers raise it
    at once (``transient=False``). A malformed body, a wrong vector count, NaN/inf or a wrong width
    raise :class:`~prism_memory.errors.InvalidVectorError` (or its child
    :class:`~prism_memory.errors.DimensionMismatchError`): no vector of that call is returned.
    """

    provider = "openai"
    """``gen_ai.provider.name`` of its calls in telemetry."""

    def __init__(
        self,
        *,
        model: str,
        dimensions: int,
        base_url: str | None = None,
        api_key_env: str | None = "OPENAI_API_KEY",
        send_dimensions: bool = True,
        batch_size: int = 128,
        retry: RetryPolicy | None = None,
        model_id: str | None = None,
        headers: Mapping[str, str] | None = None,
        client: httpx.AsyncClient | None = None,
        max_tokens: int | None = None,
    ) -> None:
        if not isinstance(model, str) or not model.strip():
            raise ConfigurationError("model must be a non-empty string")
        if isinstance(dimensions, bool) or not isinstance(dimensions, int) or dimensions < 1:
            raise ConfigurationError("dimensions must be a positive integer")
        root = base_url if base_url is not None else os.environ.get("OPENAI_BASE_URL")
        if not root:
            raise ConfigurationError("base_url is required (or set OPENAI_BASE_URL)")
        try:
            parsed = httpx.URL(root)
        except (httpx.InvalidURL, TypeError) as exc:
            raise ConfigurationError(f"base_url is not a URL: {root!r}") from exc
        if parsed.scheme not in ("http", "https") or not parsed.host:
            raise ConfigurationError(f"base_url must be an http(s) URL; got {root!r}")
        self._url = root.rstrip("/") + "/embeddings"
        key = os.environ.get(api_key_env) if api_key_env else None
        self._headers = {"Content-Type": "application/json", **dict(headers or {})}
        if key:
            self._headers["Authorization"] = f"Bearer {key}"
        self._secret = key
        self._model_name = model
        self._dimensions = dimensions
        self._send_dimensions = send_dimensions
        self._batch_size = check_batch_size(batch_size)
        self._retry = retry or RetryPolicy()
        self.model = model_id if model_id is not None else f"{model}@{dimensions}"
        """The identifier recorded with each vector (``model@dimensions`` unless ``model_id``)."""
        embedder_model(self)  # validate it now
        self._client = client
        if max_tokens is not None and (
            isinstance(max_tokens, bool) or not isinstance(max_tokens, int) or max_tokens < 1
        ):
            raise ConfigurationError("max_tokens must be a positive integer")
        self.max_tokens = max_tokens
        """The model's window in its tokens, or ``None`` (not declared: the default window)."""

    @property
    def dimensions(self) -> int:
        """Width of every vector."""
        return self._dimensions

    def __repr__(self) -> str:
        return f"OpenAIEmbedder(model={self._model_name!r}, dimensions={self._dimensions}, url={self._url!r})"

    async def embed(self, texts: Sequence[str]) -> Vector:
        """Embed ``texts`` into a ``(len(texts), dimensions)`` float32 matrix."""
        texts = list(texts)
        if not texts:
            return np.zeros((0, self._dimensions), dtype=np.float32)
        if self._client is not None:
            return await self._all(self._client, texts)
        async with httpx.AsyncClient(timeout=self._retry.timeout_seconds) as client:
            return await self._all(client, texts)

    async def _all(self, client: httpx.AsyncClient, texts: list[str]) -> Vector:
        step = self._batch_size
        parts = [await self._batch(client, texts[i : i + step]) for i in range(0, len(texts), step)]
        return np.concatenate(parts)

    async def _batch(self, client: httpx.AsyncClient, texts: list[str]) -> Vector:
        body: dict[str, Any] = {
            "model": self._model_name,
            "input": texts,
            "encoding_format": "float",
        }
        if self._send_dimensions:
            body["dimensions"] = self._dimensions

        async def attempt() -> Vector:
            try:
                response = await client.post(
                    self._url, json=body, headers=self._headers, timeout=self._retry.timeout_seconds
                )
            except httpx.TimeoutException as exc:
                raise Transient(f"request timed out ({type(exc).__name__})") from exc
            except httpx.TransportError as exc:
                raise Transient(f"network error ({type(exc).__name__})") from exc
            status = response.status_code
            if status in _TRANSIENT_STATUS or status >= 500:
                raise Transient(f"HTTP {status}", _retry_after(response))
            if status >= 400:
                raise EmbedderError(
                    f"embedding request refused: HTTP {status}{self._detail(response)}"
                )
            return self._parse(response, len(texts))

        return await retrying(attempt, self._retry, "embedding request")

    def _detail(self, response: httpx.Response) -> str:
        text = response.text[:200]
        if self._secret:
            text = text.replace(self._secret, "[redacted]")
        return f": {text}" if text else ""

    def _parse(self, response: httpx.Response, count: int) -> Vector:
        try:
            payload = response.json()
        except (json.JSONDecodeError, UnicodeDecodeError) as exc:
            raise InvalidVectorError("embedding response is not JSON") from exc
        data = payload.get("data") if isinstance(payload, dict) else None
        if not isinstance(data, list):
            raise InvalidVectorError("embedding response has no 'data' list")
        rows: list[object] = [None] * len(data)
        for position, item in enumerate(data):
            if not isinstance(item, dict) or "embedding" not in item:
                raise InvalidVectorError(f"embedding response item {position} has no 'embedding'")
            index = item.get("index", position)
            if (
                isinstance(index, bool)
                or not isinstance(index, int)
                or not 0 <= index < len(data)
                or rows[index] is not None
            ):
                raise InvalidVectorError(f"embedding response item {position} has a bad index")
            rows[index] = item["embedding"]
        return check_vectors(rows, count, self._dimensions, "embedding response")
