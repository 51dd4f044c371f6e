"""The one error tree of prism_memory.

Every error the library raises is a :class:`PrismMemoryError`. The children name what went wrong in
terms a caller can act on; driver errors are translated once, at the storage boundary, and chained
with ``from exc`` so the original cause is never lost.
"""

from __future__ import annotations

__all__ = [
    "AccessDeniedError",
    "CapExceededError",
    "ConfigurationError",
    "ConflictError",
    "DimensionMismatchError",
    "EmbedderError",
    "EmbeddingModelMismatchError",
    "GenerationNotReadyError",
    "IndexingError",
    "InvalidVectorError",
    "LineageCapError",
    "NotFoundError",
    "PrismMemoryError",
    "QualityGateError",
    "RerankerError",
    "StorageError",
    "StoreClosedError",
    "ValidationError",
]


class PrismMemoryError(Exception):
    """Root of every error prism_memory raises."""


class ValidationError(PrismMemoryError):
    """Input was rejected before anything was written.

    Not a ``ValueError`` on purpose: pydantic would swallow it into its own error type, and callers
    should see this one.
    """


class CapExceededError(ValidationError):
    """A request asked for more than a configured or hard cap allows. Nothing was truncated."""


class LineageCapError(CapExceededError):
    """A deletion sweep left entries whose lineage is over the caps; everything else went.

    ``deleted`` counts what the sweep removed; ``blocked`` names the entries it left in place.
    """

    def __init__(self, message: str, *, deleted: int, blocked: tuple[str, ...]) -> None:
        super().__init__(message)
        self.deleted = deleted
        self.blocked = blocked


class InvalidVectorError(ValidationError):
    """An embedding was empty, non-finite, not numeric, or of the wrong width."""


class DimensionMismatchError(InvalidVectorError):
    """An embedder's width disagrees with the width the store is pinned to."""


class NotFoundError(PrismMemoryError, LookupError):
    """The addressed entry does not exist in this memory's scope."""


class ConflictError(PrismMemoryError):
    """An optimistic-concurrency check failed (for example a stale ``expected_version``)."""


class AccessDeniedError(PrismMemoryError, PermissionError):
    """The caller's identity does not own what it asked for."""


class ConfigurationError(PrismMemoryError):
    """The library was wired up inconsistently (bad option, bad identifier, missing extension)."""


class EmbeddingModelMismatchError(ConfigurationError):
    """Stored vectors were made by another embedding model than the one this memory uses.

    Comparing vectors of two models is meaningless, so recall refuses instead of silently mixing
    vector spaces; ``rebuild_index`` re-embeds the thread with the current model.
    """


class GenerationNotReadyError(ConflictError):
    """A switch to another embedding model's vectors was refused: ``missing`` indexed entries
    still have none of that model (run the backfill to the end, or force the switch);
    ``recent``: how many more have none but were written within the lag the switch allowed
    (``max_lag_seconds``), which did not count."""

    def __init__(self, message: str, *, missing: int, recent: int = 0) -> None:
        super().__init__(message)
        self.missing = missing
        self.recent = recent


class QualityGateError(ConflictError):
    """The quality gate refused a model switch: on the operator's own data the new model
    retrieves worse than the old one by more than the threshold set (force to switch anyway)."""


class EmbedderError(PrismMemoryError):
    """An embedder could not produce vectors: the model service failed, timed out or refused.

    ``transient`` tells whether retrying later may help (rate limits, 5xx, timeouts, network).
    """

    def __init__(self, message: str, *, transient: bool = False) -> None:
        super().__init__(message)
        self.transient = transient


class RerankerError(EmbedderError):
    """A recall's reranker failed (its exception is the cause) or did not return one finite
    score per text. An :class:`EmbedderError`, so one ``except`` covers every model a host
    supplies; ``transient`` is true for the reranker's own exceptions."""


class StorageError(PrismMemoryError):
    """The storage backend failed; ``__cause__`` holds the driver's error."""


class StoreClosedError(PrismMemoryError):
    """The store was closed (``close()``, or its factory's): it runs no statement any more, and
    never opens a connection again. Not a :class:`StorageError`: retrying cannot help; open the
    stores anew."""

    def __init__(self, message: str = "the store is closed: open the stores again") -> None:
        super().__init__(message)


class IndexingError(PrismMemoryError):
    """Entries could not be embedded; they stay stored and are reported, never dropped."""

    def __init__(self, message: str, failures: dict[str, str] | None = None) -> None:
        super().__init__(message)
        self.failures: dict[str, str] = dict(failures or {})
