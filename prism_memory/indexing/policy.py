"""How an indexing queue leases, retries and waits: :class:`IndexingPolicy` and the claim sizes."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta

from ..errors import PrismMemoryError

__all__ = ["CLAIM_BATCHES", "SHARED_LANES", "IndexingPolicy"]

CLAIM_BATCHES = 4
"""A worker leases this many embedder batches at a time, so claims and stores are amortised."""

SHARED_LANES = 4
"""A shared queue embeds and stores up to this many claims at once (the next one is taken while
the others wait on the embedder or the database); claims themselves are taken one at a time."""


@dataclass(frozen=True, slots=True)
class IndexingPolicy:
    """How the queue leases, retries and waits."""

    lease_seconds: float = 60.0
    """How long a claimed row stays leased to this worker."""
    max_attempts: int = 5
    """Attempts before a row is marked ``failed`` (a bad vector fails at once)."""
    retry_base_seconds: float = 0.5
    """First retry delay; doubles per attempt."""
    retry_max_seconds: float = 60.0
    """Longest retry delay."""
    busy_poll_seconds: float = 0.05
    """How often to claim and look for results while callers wait on ``done`` for rows the queue
    does not hold (a retry not yet due, another writer's lease)."""
    idle_poll_seconds: float = 5.0
    """How often to look for due retries and other writers' rows when idle: one claim statement
    for all the threads of the memories sharing the queue."""
    drain_seconds: float = 30.0
    """How long ``aclose()`` waits for the memory's own writes to be embedded before it leaves the
    rest pending (for the next start, or ``prism-memory worker``) and says how many."""
    in_process: bool = True
    """Whether a memory embeds its remembered rows itself. ``False`` is **worker-only mode**: rows
    are stored pending and only ``prism-memory worker`` (an
    :class:`~prism_memory.postgres.worker.IndexingWorker`) embeds them; ``done`` and
    ``remember(wait=True)`` wait for the worker, and ``aclose()`` returns at once. Queries
    (``recall``), ``correct`` and ``rebuild_index`` still embed in-process: they need the vector
    to answer."""

    def __post_init__(self) -> None:
        numbers = (
            self.lease_seconds,
            self.retry_base_seconds,
            self.retry_max_seconds,
            self.busy_poll_seconds,
            self.idle_poll_seconds,
            self.drain_seconds,
        )
        if any(not (value > 0) for value in numbers) or self.max_attempts < 1:
            raise PrismMemoryError("IndexingPolicy values must be positive")
        if not isinstance(self.in_process, bool):
            raise PrismMemoryError("IndexingPolicy.in_process must be True or False")

    def retry_delay(self, attempts: int) -> timedelta:
        """Backoff before attempt ``attempts + 1``."""
        seconds = min(self.retry_max_seconds, self.retry_base_seconds * (2 ** max(0, attempts - 1)))
        return timedelta(seconds=seconds)
