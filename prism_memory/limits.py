"""Caps: defaults and hard ceilings, in one place.

A :class:`Limits` holds the values a memory enforces. Each field has a default and a hard ceiling;
a host may lower a cap freely and raise it up to the ceiling, never past it. Over a cap, calls raise
:class:`~prism_memory.errors.CapExceededError`; nothing is ever truncated silently.
"""

from __future__ import annotations

from typing import Any, Final

from pydantic import BaseModel, ConfigDict, model_validator

from .errors import CapExceededError, ValidationError

__all__ = ["CEILINGS", "Limits"]

#: Hard ceilings. A :class:`Limits` value above one of these is refused.
CEILINGS: Final[dict[str, int]] = {
    "top_k": 32,
    "message_range": 4,
    "embed_batch": 128,
    "remember_batch": 1024,
    "injected_tokens": 8000,
    "payload_bytes": 1024 * 1024,
    "working_memory_bytes": 1024 * 1024,
    "export_entries": 200,
    "export_bytes": 32 * 1024 * 1024,
    "export_seconds": 60,
    "rebuild_batch": 128,
    "rebuild_seconds": 60,
    "retention_batch": 1024,
    "lineage_depth": 8,
    "lineage_edges": 256,
    "lineage_source_ids": 32,
    "delete_batch": 64,
    "share_ids": 256,
}


class Limits(BaseModel):
    """Caps a :class:`~prism_memory.Memory` enforces (defaults shown; ceilings in :data:`CEILINGS`)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    top_k: int = 8
    """Default number of recall hits (ceiling 32)."""
    message_range: int = 4
    """Largest adjacent-entry window ``recall(message_range=…)`` accepts (ceiling 4)."""
    embed_batch: int = 32
    """Texts per embedder call (ceiling 128)."""
    remember_batch: int = 256
    """Entries per ``remember()`` call (ceiling 1024)."""
    injected_tokens: int = 2000
    """Default token budget of the context provider (ceiling 8000)."""
    payload_bytes: int = 64 * 1024
    """UTF-8 bytes of one entry's text plus JSON metadata (ceiling 1 MiB)."""
    working_memory_bytes: int = 64 * 1024
    """UTF-8 bytes of the working-memory JSON document (ceiling 1 MiB)."""
    export_entries: int = 100
    """Default export page size (ceiling 200)."""
    export_bytes: int = 4 * 1024 * 1024
    """Default export page byte budget (ceiling 32 MiB)."""
    export_seconds: int = 10
    """Default export time budget (ceiling 60 s)."""
    rebuild_batch: int = 32
    """Default re-index page size (ceiling 128)."""
    rebuild_seconds: int = 10
    """Default re-index time budget (ceiling 60 s)."""
    retention_batch: int = 256
    """Default number of rows one retention sweep scans (ceiling 1024)."""
    lineage_depth: int = 8
    """How deep lineage invalidation walks (ceiling 8)."""
    lineage_edges: int = 256
    """How many dependents one invalidation may touch (ceiling 256)."""
    lineage_source_ids: int = 32
    """Source ids one entry's lineage may name (ceiling 32)."""
    delete_batch: int = 64
    """Rows per delete statement (ceiling 64)."""
    share_ids: int = 256
    """Entry ids one share grant may name (ceiling 256)."""

    @model_validator(mode="before")
    @classmethod
    def _within_ceilings(cls, data: Any) -> Any:
        if isinstance(data, dict):
            for name, value in data.items():
                ceiling = CEILINGS.get(name)
                if ceiling is None or not isinstance(value, int) or isinstance(value, bool):
                    continue
                if value < 1:
                    raise ValidationError(f"limit {name} must be at least 1, got {value}")
                if value > ceiling:
                    raise CapExceededError(f"limit {name}={value} is over its ceiling {ceiling}")
        return data

    def check(self, name: str, value: int | None, *, default: int | None = None) -> int:
        """Return ``value`` (or ``default``/this limit when ``None``) after checking it against cap ``name``.

        Raises :class:`CapExceededError` above the configured cap and :class:`ValidationError` below 1.
        """
        cap: int = getattr(self, name)
        return _within(name, value, cap, default if default is not None else cap)


def _within(name: str, value: int | None, cap: int, default: int) -> int:
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValidationError(f"{name} must be an integer, got {type(value).__name__}")
    if value < 1:
        raise ValidationError(f"{name} must be at least 1, got {value}")
    if value > cap:
        raise CapExceededError(f"{name}={value} is over its cap {cap}")
    return value
