"""The wall clock every part of the package reads by default (a leaf: the facade, the worker and
the integrations all call down to it; a test passes its own ``clock=`` instead)."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime
from functools import partial
from typing import Final

utcnow: Final[Callable[[], datetime]] = partial(datetime.now, UTC)
"""Now, timezone-aware, in UTC: ``datetime.now(UTC)`` itself (no Python frame of ours between the
caller and the C clock)."""
