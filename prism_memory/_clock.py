"""The wall clock every part of the package reads by default (a leaf: the facade, the worker and
the integrations all call down to it; a test passes its own ``clock=`` instead)."""

from __future__ import annotations

from datetime import UTC, datetime


def utcnow() -> datetime:
    """Now, timezone-aware, in UTC."""
    return datetime.now(UTC)
