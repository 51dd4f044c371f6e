"""Scrubbing text and metadata before anything persists or is injected.

A host passes a ``redactor`` (any ``str -> str`` function) and/or ``secrets`` (literal strings that
must never be stored or shown). Both run over entry text, every string inside metadata (keys
included) and reflections; secrets are replaced longest first so one never leaves a fragment of a
longer one behind.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any

from .errors import ConfigurationError, ValidationError

__all__ = ["REDACTED", "Redactor", "Scrubber"]

REDACTED = "[REDACTED]"
"""What a secret is replaced with."""

Redactor = Callable[[str], str]
"""A host's redaction function: returns the text with whatever it must hide removed."""


class Scrubber:
    """Applies a redactor and a list of secrets to text and JSON-like values."""

    __slots__ = ("_redactor", "_secrets", "active")

    def __init__(
        self, redactor: Redactor | None = None, secrets: Iterable[str] | None = None
    ) -> None:
        if redactor is not None and not callable(redactor):
            raise ConfigurationError("redactor must be callable")
        given = list(secrets or ())
        if any(not isinstance(s, str) for s in given):
            raise ConfigurationError("secrets must be strings")
        # longest first, then alphabetically: the same result in every process
        literal = sorted({s for s in given if s}, key=lambda s: (-len(s), s))
        self._redactor = redactor
        self._secrets = tuple(literal)
        self.active = redactor is not None or bool(literal)
        """Whether there is anything to scrub (a scrubber never changes: known once)."""

    def text(self, value: str) -> str:
        """Scrub one string."""
        for secret in self._secrets:
            value = value.replace(secret, REDACTED)
        if self._redactor is not None:
            result = self._redactor(value)
            if not isinstance(result, str):
                raise ValidationError("redactor must return a string")
            value = result
            for secret in self._secrets:  # a redactor must not reintroduce a secret
                value = value.replace(secret, REDACTED)
        return value

    def value(self, value: Any) -> Any:
        """Scrub every string inside a JSON-like value (dict keys too); other values pass through."""
        if isinstance(value, str):
            return self.text(value)
        if isinstance(value, Mapping):
            return {self.text(str(k)): self.value(v) for k, v in value.items()}
        if isinstance(value, list | tuple):
            return [self.value(item) for item in value]
        return value
