"""Caps: hard ceilings, configurable caps and per-call defaults, in one place.

:class:`Limits` holds the caps a memory enforces. Each field may be lowered freely and raised up to
its hard ceiling in :data:`CEILINGS`, never past it. A call that names no value uses the default in
:data:`CALL_DEFAULTS` (never above the cap). Over a cap, calls raise
:class:`~prism_memory.errors.CapExceededError`; nothing is ever truncated silently.
"""

from __future__ import annotations

from typing import Any, Final

from pydantic import BaseModel, ConfigDict, model_validator

from .errors import CapExceededError, ValidationError
from .models import typed_errors

__all__ = ["CALL_DEFAULTS", "CEILINGS", "Limits"]

_MIB = 1024 * 1024

#: Hard ceilings. A :class:`Limits` value above one of these is refused.
CEILINGS: Final[dict[str, int]] = {
    "top_k": 32,
    "message_range": 4,
    "embed_batch": 128,
    "remember_batch": 1024,
    "injected_tokens": 8000,
    "payload_bytes": _MIB,
    "working_memory_bytes": _MIB,
    "export_entries": 200,
    "export_bytes": 32 * _MIB,
    "export_seconds": 60,
    "rebuild_batch": 128,
    "rebuild_seconds": 60,
    "retention_batch": 1024,
    "lineage_depth": 8,
    "lineage_edges": 256,
    "lineage_source_ids": 32,
    "delete_batch": 64,
    "share_ids": 256,
    "ids_per_call": 65_536,
    "query_terms": 256,
}

#: What a call uses when it names no value (capped by the configured :class:`Limits`).
CALL_DEFAULTS: Final[dict[str, int]] = {
    "top_k": 8,
    "injected_tokens": 2000,
    "export_entries": 100,
    "export_bytes": 4 * _MIB,
    "export_seconds": 10,
    "rebuild_batch": 32,
    "rebuild_seconds": 10,
    "retention_batch": 256,
}


class Limits(BaseModel):
    """Caps a :class:`~prism_memory.Memory` enforces. Defaults shown; ceilings in :data:`CEILINGS`."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    top_k: int = 32
    """Most recall hits one call may ask for (calls default to 8)."""
    message_range: int = 4
    """Widest adjacent-entry window ``recall(message_range=…)`` accepts."""
    embed_batch: int = 32
    """Texts per embedder call (ceiling 128)."""
    remember_batch: int = 256
    """Entries per ``remember()`` call (ceiling 1024)."""
    injected_tokens: int = 8000
    """Largest token budget of the context provider (calls default to 2000)."""
    payload_bytes: int = 64 * 1024
    """UTF-8 bytes of one entry's text plus its JSON metadata (ceiling 1 MiB)."""
    working_memory_bytes: int = 64 * 1024
    """UTF-8 bytes of the working-memory JSON document (ceiling 1 MiB)."""
    export_entries: int = 200
    """Largest export page (calls default to 100)."""
    export_bytes: int = 32 * _MIB
    """Largest export page in bytes (calls default to 4 MiB)."""
    export_seconds: int = 60
    """Longest export time budget (calls default to 10 s)."""
    rebuild_batch: int = 128
    """Largest re-index page (calls default to 32)."""
    rebuild_seconds: int = 60
    """Longest re-index time budget (calls default to 10 s)."""
    retention_batch: int = 1024
    """Most rows one retention sweep scans (calls default to 256)."""
    lineage_depth: int = 8
    """How deep lineage invalidation walks."""
    lineage_edges: int = 256
    """How many dependents one invalidation may touch."""
    lineage_source_ids: int = 32
    """Source ids one entry's lineage may name."""
    delete_batch: int = 64
    """Rows per delete statement."""
    share_ids: int = 256
    """Entry ids one share grant may name."""
    ids_per_call: int = 65_536
    """Entry ids one ``forget(ids=…)`` or ``index_status(…)`` call may name (ceiling 65,536)."""
    query_terms: int = 128
    """Distinct words one recall query may hold (ceiling 256); the lexical leg's work grows with
    rows × terms, so a longer query raises :class:`~prism_memory.errors.CapExceededError`."""

    @model_validator(mode="wrap")
    @classmethod
    def _typed_errors(cls, data: Any, handler: Any) -> Any:
        return typed_errors(cls, data, handler)

    @model_validator(mode="before")
    @classmethod
    def _within_ceilings(cls, data: Any) -> Any:
        if isinstance(data, dict):
            for name, value in data.items():
                ceiling = CEILINGS.get(name)
                if ceiling is None:
                    continue
                if isinstance(value, bool) or not isinstance(value, int):
                    raise ValidationError(f"limit {name} must be an integer")
                if value < 1:
                    raise ValidationError(f"limit {name} must be at least 1")
                if value > ceiling:
                    raise CapExceededError(f"limit {name} is over its ceiling {ceiling}")
        return data

    def resolve(self, name: str, value: int | None, *, minimum: int = 1) -> int:
        """The value a call uses for cap ``name``: ``value`` checked against the cap, or the default.

        Raises :class:`CapExceededError` above the cap and :class:`ValidationError` below ``minimum``
        or for a non-integer.
        """
        cap: int = getattr(self, name)
        if value is None:
            return min(CALL_DEFAULTS.get(name, cap), cap)
        if isinstance(value, bool) or not isinstance(value, int):
            raise ValidationError(f"{name} must be an integer, got {type(value).__name__}")
        if value < minimum:
            raise ValidationError(f"{name} must be at least {minimum}")
        if value > cap:
            raise CapExceededError(f"{name} is over its cap {cap}")
        return value
