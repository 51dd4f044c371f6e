"""Opaque, stable page cursors over ``(sequence, id)`` (export and re-index share the shape)."""

from __future__ import annotations

import base64
import json

from .errors import ValidationError

__all__ = ["decode_cursor", "encode_cursor"]

_MAX_CURSOR = 1024


def encode_cursor(kind: str, position: tuple[int, str]) -> str:
    """Encode a position after which the next page starts."""
    raw = json.dumps({"v": 1, "k": kind, "s": position[0], "i": position[1]}, separators=(",", ":"))
    return base64.urlsafe_b64encode(raw.encode()).decode().rstrip("=")


def decode_cursor(kind: str, cursor: str | None) -> tuple[int, str] | None:
    """Decode a cursor from :func:`encode_cursor`; :class:`ValidationError` if it is not one of ours."""
    if cursor is None:
        return None
    if not isinstance(cursor, str) or len(cursor) > _MAX_CURSOR:
        raise ValidationError(f"invalid {kind} cursor")
    try:
        padded = cursor + "=" * (-len(cursor) % 4)
        data = json.loads(base64.urlsafe_b64decode(padded.encode()))
        if data.get("v") != 1 or data.get("k") != kind:
            raise ValueError("wrong cursor kind")
        sequence, entry_id = data["s"], data["i"]
        if not isinstance(sequence, int) or not isinstance(entry_id, str):
            raise ValueError("malformed position")
    except (ValueError, TypeError, KeyError, AttributeError, RecursionError) as exc:
        raise ValidationError(f"invalid {kind} cursor") from exc
    return sequence, entry_id
