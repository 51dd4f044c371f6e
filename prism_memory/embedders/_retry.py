"""Timeouts, retries with exponential backoff, and batching shared by the shipped embedders."""

from __future__ import annotations

import asyncio
import random
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import TypeVar

import numpy as np

from ..embedding import assert_finite_vector
from ..errors import ConfigurationError, EmbedderError, InvalidVectorError
from ..limits import CEILINGS
from ..models import Vector

__all__ = ["RetryPolicy", "check_batch_size", "check_vectors", "retrying"]

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    """How an embedder bounds and retries one call to its model."""

    timeout_seconds: float = 30.0
    """Longest one attempt may take; a slower attempt counts as a transient failure."""
    max_attempts: int = 4
    """Attempts per batch, the first included."""
    backoff_seconds: float = 0.5
    """Delay before the second attempt; doubles per attempt, with up to 25 % random jitter."""
    max_backoff_seconds: float = 8.0
    """Longest delay between attempts (also caps a server's ``Retry-After``)."""

    def __post_init__(self) -> None:
        numbers = (self.timeout_seconds, self.backoff_seconds, self.max_backoff_seconds)
        if any(
            isinstance(value, bool) or not isinstance(value, int | float) or not value > 0
            for value in numbers
        ):
            raise ConfigurationError("RetryPolicy times must be positive numbers")
        if (
            isinstance(self.max_attempts, bool)
            or not isinstance(self.max_attempts, int)
            or self.max_attempts < 1
        ):
            raise ConfigurationError("RetryPolicy.max_attempts must be a positive integer")

    def delay(self, attempt: int, hint: float | None = None) -> float:
        """Seconds to wait after failed attempt number ``attempt`` (1-based)."""
        base = float(self.backoff_seconds * 2.0 ** (attempt - 1))
        if hint is not None and hint >= 0:
            base = max(base, hint)
        return min(self.max_backoff_seconds, base * (1 + random.random() / 4))


def check_batch_size(batch_size: object) -> int:
    """A batch size must be an integer in ``[1, 128]``."""
    cap = CEILINGS["embed_batch"]
    if (
        isinstance(batch_size, bool)
        or not isinstance(batch_size, int)
        or not 1 <= batch_size <= cap
    ):
        raise ConfigurationError(f"batch_size must be an integer in [1, {cap}]; got {batch_size!r}")
    return batch_size


def check_vectors(rows: Sequence[object], count: int, width: int, what: str) -> Vector:
    """``count`` finite vectors of ``width`` as a float32 matrix, or a typed error."""
    if len(rows) != count:
        raise InvalidVectorError(f"{what} returned {len(rows)} vectors for {count} texts")
    checked = [assert_finite_vector(row, f"{what} vector {i}", width) for i, row in enumerate(rows)]
    if not checked:
        return np.zeros((0, width), dtype=np.float32)
    return np.stack(checked)


class Transient(Exception):  # noqa: N818 - an internal signal, never raised to callers
    """Raised inside an attempt to ask for a retry; ``retry_after`` is the server's hint."""

    def __init__(self, message: str, retry_after: float | None = None) -> None:
        super().__init__(message)
        self.retry_after = retry_after


async def retrying(attempt: Callable[[], Awaitable[T]], policy: RetryPolicy, what: str) -> T:
    """Run ``attempt`` under the policy's timeout, retrying :class:`Transient` failures and
    timeouts with backoff. Exhausted retries raise :class:`EmbedderError` (``transient=True``);
    every other error passes through; cancellation is never swallowed."""
    last = "no attempt"
    for number in range(1, policy.max_attempts + 1):
        hint: float | None = None
        try:
            async with asyncio.timeout(policy.timeout_seconds):
                return await attempt()
        except TimeoutError:
            last = f"timed out after {policy.timeout_seconds} s"
        except Transient as exc:
            last, hint = str(exc), exc.retry_after
        if number < policy.max_attempts:
            await asyncio.sleep(policy.delay(number, hint))
    raise EmbedderError(
        f"{what} failed after {policy.max_attempts} attempts: {last}", transient=True
    )
