"""One entry of an import: a :class:`~prism_memory.MemoryEntry` with its scope and, optionally, its
vector and the model that made it."""

from __future__ import annotations

from collections.abc import AsyncIterable, AsyncIterator, Iterable
from typing import Any

from pydantic import field_validator

from ..models import MemoryEntry, check_key

__all__ = ["ImportEntry", "Located", "RawVector", "askable", "source_items"]


class ImportEntry(MemoryEntry):
    """An entry of a bulk import: where it belongs (``tenant_id``, ``resource_id``,
    ``thread_id``), what :class:`~prism_memory.MemoryEntry` holds, and optionally ``vector`` (a
    list of numbers, checked finite and of the import's width) with ``embedding_model``, the
    model that made it. ``reflection`` is accepted and ignored (no ``importance_from`` hook runs)."""

    tenant_id: str
    resource_id: str
    thread_id: str
    vector: Any = None
    embedding_model: str | None = None

    @field_validator("tenant_id", "resource_id", "thread_id")
    @classmethod
    def _key(cls, value: str) -> str:
        return check_key(value, "scope key")

    @field_validator("embedding_model")
    @classmethod
    def _model(cls, value: str | None) -> str | None:
        if value is not None and (not value.strip() or len(value) > 256):
            raise ValueError("embedding_model must be a non-empty string of at most 256 characters")
        return value


class Located(dict[str, Any]):
    """An entry a reader took from a file, with where it stands there: ``line`` the physical line
    it starts on (blank lines counted) and ``where`` how messages name it (``"line 4"``, or
    ``"line 1, entry 3"`` inside a JSON document or array). :func:`import_entries` names a refused
    entry by them instead of its position in the stream. A plain ``dict`` otherwise."""

    __slots__ = ("line", "where")

    def __init__(self, fields: dict[str, Any], line: int, where: str) -> None:
        super().__init__(fields)
        self.line = line
        self.where = where


class RawVector:
    """A vector as a reader found it: the JSON text of an array of numbers, not parsed yet.

    :func:`~prism_memory.importing.read_jsonl` cuts a line's ``vector`` out before parsing the
    rest, so that :func:`import_entries` parses and checks only the vectors of entries whose id is
    new -- as one batch -- and an entry stored already (a re-import) costs none of it. The text
    holds no string, object or nested array between its brackets: anything else was parsed with
    the line, as before."""

    __slots__ = ("text",)

    def __init__(self, text: str) -> None:
        self.text = text

    def __repr__(self) -> str:
        return f"RawVector(<{len(self.text)} characters>)"


def askable(value: str) -> bool:
    """Whether a store can be asked about ``value`` as given: at most 256 characters, no NUL, no
    lone surrogate (PostgreSQL's text holds neither). A key that is askable but invalid is simply
    not found -- stored keys were checked -- and is refused when its entry is checked."""
    if not 0 < len(value) <= 256 or "\x00" in value:
        return False
    if value.isascii():
        return True
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


async def source_items(
    source: Iterable[Any] | AsyncIterable[Any],
) -> AsyncIterator[Any]:
    """The items of a sync or async iterable, as one async iterator."""
    if isinstance(source, AsyncIterable):
        async for item in source:
            yield item
    else:
        for item in source:
            yield item
