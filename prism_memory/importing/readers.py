"""Readers that turn files and other systems' stores into the entries
:func:`~prism_memory.importing.import_entries` takes, streamed: files are read in chunks, each
entry carries its physical line (which names it when it is refused), and no line over the
reader's ``max_line_bytes`` is held whole.

Each maps the source onto tenant / resource / thread as docs/importing.md states:

* :func:`read_jsonl` -- prism_memory's JSONL import format: one :class:`ImportEntry` object per
  line (the scope keys, the :class:`~prism_memory.MemoryEntry` fields, optionally ``vector`` and
  ``embedding_model``);
* :func:`read_export` -- what ``prism-memory export`` writes, or pages of
  ``Memory.export_memory()`` saved as JSON;
* :func:`read_mem0` -- mem0's exported memories (``get_all()`` results: ``id``, ``memory``,
  ``hash``, ``metadata``, ``created_at``, ``user_id`` / ``agent_id`` / ``run_id``);
* :func:`read_langgraph_store` -- the tables of a LangGraph ``AsyncPostgresStore`` database
  (``store`` and, when it has an index, ``store_vectors``).
"""

from __future__ import annotations

import json
import os
from collections.abc import AsyncIterator, Iterator, Mapping, Sequence
from datetime import UTC, datetime
from typing import IO, Any

from ..models import MemoryConsent
from ..working import canonical_json
from ._entry import Located
from ._lines import (
    MAX_DOCUMENT_BYTES,
    MAX_LINE_BYTES,
    FileEntries,
    ReadMeter,
    check_limit,
    file_identity,
    json_lines,
    loads_entry,
    located,
)
from ._service import ImportLineError

__all__ = [
    "LANGGRAPH_TEXT_FIELDS",
    "MAX_DOCUMENT_BYTES",
    "MAX_LINE_BYTES",
    "MEM0_THREAD",
    "FileEntries",
    "read_export",
    "read_jsonl",
    "read_langgraph_store",
    "read_mem0",
]

MEM0_THREAD = "mem0"
"""The thread of a mem0 memory that names no ``run_id``: its user's long-term memories."""

LANGGRAPH_TEXT_FIELDS = ("text", "content", "memory", "data")
"""The value keys whose string becomes an item's text (the first present), else the whole value
as canonical JSON."""

_EXPORT_ONLY = ("created_at",)


def read_jsonl(
    source: str | os.PathLike[str] | IO[str], *, max_line_bytes: int = MAX_LINE_BYTES
) -> FileEntries:
    """The entries of a JSONL file in prism_memory's import format, one object per line.

    Each carries its physical line (blank lines counted), which names it when it is refused; a
    line over ``max_line_bytes`` (default :data:`MAX_LINE_BYTES`, 8 MiB) is refused with
    :class:`ImportLineError` once that many bytes of it are read, never read whole. The iterator's
    ``source_id`` names the file in an import's checkpoint."""
    limit = check_limit(max_line_bytes)
    meter = ReadMeter(source)

    def entries() -> Iterator[dict[str, Any]]:
        for number, item, whole in json_lines(source, limit, loads_entry, meter):
            if not isinstance(item, dict):
                raise ImportLineError(f"line {number}: not a JSON object", line=number)
            yield located(item, number, 1 if whole else None)

    return FileEntries(entries(), lambda: file_identity(source, "jsonl"), meter)


def read_export(
    source: str | os.PathLike[str] | IO[str], *, max_line_bytes: int = MAX_DOCUMENT_BYTES
) -> FileEntries:
    """The entries of saved exports: what ``prism-memory export`` writes (one exported entry per
    line), or ``export_memory()`` pages saved as JSON (``{"entries": [...], ...}``: one page per
    line, a file holding one page, or a JSON array of pages). Each exported entry keeps its tenant,
    resource, thread, id, sequence, consent and lineage; ``created_at`` becomes the import's.
    A line (or a file holding one JSON document) over ``max_line_bytes`` (default
    :data:`MAX_DOCUMENT_BYTES`, 64 MiB) is refused with :class:`ImportLineError`."""
    limit = check_limit(max_line_bytes)
    meter = ReadMeter(source)

    def entries() -> Iterator[dict[str, Any]]:
        for number, item, whole in json_lines(source, limit, meter=meter):
            single = isinstance(item, dict) and "entries" not in item and not whole
            if isinstance(item, dict) and "entries" not in item:  # one exported entry
                item = {"entries": [item]}
            pages = item if isinstance(item, list) else [item]
            position = 0
            for page in pages:
                if not isinstance(page, dict) or not isinstance(page.get("entries"), list):
                    raise ImportLineError(f"line {number}: not an export page", line=number)
                for entry in page["entries"]:
                    position += 1
                    at = located({}, number, None if single else position)
                    if not isinstance(entry, dict):
                        raise ImportLineError(
                            f"{at.where}: an exported entry is not an object", line=number
                        )
                    fields = {key: value for key, value in entry.items() if key not in _EXPORT_ONLY}
                    yield Located(fields, number, at.where)

    return FileEntries(entries(), lambda: file_identity(source, "export"), meter)


def _aware(raw: object, at: Located) -> datetime | None:
    """An ISO timestamp as an aware datetime (a naive one is taken as UTC)."""
    if raw is None or raw == "":
        return None
    if isinstance(raw, datetime):
        moment = raw
    else:
        try:
            moment = datetime.fromisoformat(str(raw).replace("Z", "+00:00"))
            if not isinstance(raw, str):
                raise TypeError
        except (TypeError, ValueError):
            raise ImportLineError(
                f"{at.where}: created_at is not an ISO timestamp", line=at.line
            ) from None  # the parser's message repeats the value
    return moment if moment.tzinfo is not None else moment.replace(tzinfo=UTC)


def _mem0_items(
    source: str | os.PathLike[str] | IO[str], limit: int, meter: ReadMeter
) -> Iterator[tuple[Located, Any]]:
    """A mem0 export is a JSON array, a ``{"results": [...]}`` document or JSONL; each memory
    comes with where it stands (its line, and its position in an array or document)."""
    for number, item, whole in json_lines(source, limit, meter=meter):
        if isinstance(item, dict) and isinstance(item.get("results"), list):
            items: Sequence[Any] = item["results"]
        elif isinstance(item, list):
            items = item
        else:
            yield located({}, number, 1 if whole else None), item
            continue
        for position, memory in enumerate(items, start=1):
            yield located({}, number, position), memory


def read_mem0(
    source: str | os.PathLike[str] | IO[str],
    *,
    tenant_id: str,
    consent: MemoryConsent | None = None,
    max_line_bytes: int = MAX_DOCUMENT_BYTES,
) -> FileEntries:
    """mem0's exported memories as import entries.

    Mapping: ``tenant_id`` is given (mem0 has none); the resource is the memory's ``user_id``, else
    its ``agent_id``; the thread is its ``run_id``, else :data:`MEM0_THREAD`; the id is mem0's
    ``id`` (so re-importing changes nothing), the text its ``memory``, ``occurred_at`` its
    ``created_at`` (naive times are UTC); the metadata is mem0's (a JSON object, or absent) plus
    ``mem0_hash``, ``mem0_agent_id`` and ``mem0_updated_at`` when present. ``consent`` applies to
    every memory (unset: the default consent, thread-scoped -- pass
    ``MemoryConsent(scope="user")`` for memories recalled resource-wide). A memory that is not
    such an object is refused with :class:`ImportLineError` naming its line; so is a line (or a
    file holding one JSON document) over ``max_line_bytes`` (default :data:`MAX_DOCUMENT_BYTES`,
    64 MiB).
    """
    limit = check_limit(max_line_bytes)
    meter = ReadMeter(source)

    def entries() -> Iterator[dict[str, Any]]:
        for at, memory in _mem0_items(source, limit, meter):
            yield Located(_mem0_entry(memory, at, tenant_id, consent), at.line, at.where)

    return FileEntries(
        entries(),
        lambda: file_identity(source, "mem0", tenant_id=tenant_id, consent=consent),
        meter,
    )


def _mem0_entry(
    memory: object, at: Located, tenant_id: str, consent: MemoryConsent | None
) -> dict[str, Any]:
    if not isinstance(memory, dict):
        raise ImportLineError(f"{at.where}: a mem0 memory is not an object", line=at.line)
    resource = memory.get("user_id") or memory.get("agent_id")
    if not resource:
        raise ImportLineError(f"{at.where}: the memory names no user_id nor agent_id", line=at.line)
    given = memory.get("metadata")
    if given is not None and not isinstance(given, dict):
        raise ImportLineError(f"{at.where}: metadata is not a JSON object", line=at.line)
    metadata = dict(given or {})
    for key in ("hash", "agent_id", "updated_at"):
        if memory.get(key) and not (key == "agent_id" and resource == memory.get(key)):
            metadata[f"mem0_{key}"] = memory[key]
    entry: dict[str, Any] = {
        "tenant_id": tenant_id,
        "resource_id": str(resource),
        "thread_id": str(memory.get("run_id") or MEM0_THREAD),
        "text": memory.get("memory"),
        "metadata": metadata,
        "occurred_at": _aware(memory.get("created_at"), at),
    }
    if memory.get("id") is not None:
        entry["id"] = str(memory["id"])
    if consent is not None:
        entry["consent"] = consent
    return entry


async def read_langgraph_store(
    url: str,
    *,
    tenant_id: str,
    resource_index: int = 0,
    embedding_model: str | None = None,
    consent: MemoryConsent | None = None,
    fetch: int = 1000,
) -> AsyncIterator[dict[str, Any]]:
    """The items of a LangGraph ``AsyncPostgresStore`` database, with their vectors when it has an
    index (``store_vectors``), in ``(namespace, key)`` order.

    Mapping: ``tenant_id`` is given; the resource is the namespace's element at
    ``resource_index`` (default 0: LangGraph's ``(user_id, "memories")``); the thread is the other
    elements joined with ``/`` (``"store"`` when there are none); the id is the item's key; the
    text is the value's first string field of :data:`LANGGRAPH_TEXT_FIELDS`, else the value as
    canonical JSON; the metadata holds the value (``langgraph_value``) and the namespace
    (``langgraph_namespace``); ``occurred_at`` is the item's ``created_at``. A vector comes with
    ``embedding_model`` (LangGraph does not record which model made it): the vector of the text's
    field when the index embedded several, else of the whole document (``$``), else the first.
    ``url`` is a ``postgresql://`` URL of the LangGraph database (read only).
    """
    import asyncpg
    from sqlalchemy.engine import make_url

    from ..postgres._engine import register_vector_codec
    from ..postgres.statements.session import LANGGRAPH_HAS_VECTORS, langgraph_items

    dsn = make_url(url).set(drivername="postgresql").render_as_string(hide_password=False)
    connection = await asyncpg.connect(dsn)
    try:
        has_vectors = await connection.fetchval(LANGGRAPH_HAS_VECTORS)
        if has_vectors:  # decoded from pgvector's binary format into numpy float32 arrays
            await register_vector_codec(connection)
        statement = langgraph_items(vectors=bool(has_vectors))
        args: list[Any] = [list(LANGGRAPH_TEXT_FIELDS)] if has_vectors else []
        number = 0
        async with connection.transaction(readonly=True):
            async for row in connection.cursor(statement, *args, prefetch=fetch):
                number += 1
                yield _langgraph_entry(
                    row, number, tenant_id, resource_index, embedding_model, consent
                )
    finally:
        await connection.close()


def _langgraph_entry(
    row: Mapping[str, Any],
    number: int,
    tenant_id: str,
    resource_index: int,
    embedding_model: str | None,
    consent: MemoryConsent | None,
) -> Located:
    namespace = str(row["prefix"]).split(".")
    try:
        resource = namespace[resource_index]
    except IndexError as exc:
        raise ImportLineError(
            f"item {number}: its namespace has no element {resource_index}", line=number
        ) from exc
    rest = [part for at, part in enumerate(namespace) if at != resource_index % len(namespace)]
    value = row["value"]
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except ValueError:
            raise ImportLineError(f"item {number}: its value is not JSON", line=number) from None
    if not isinstance(value, dict):
        raise ImportLineError(f"item {number}: its value is not a JSON object", line=number)
    text = next(
        (value[name] for name in LANGGRAPH_TEXT_FIELDS if isinstance(value.get(name), str)),
        None,
    )
    entry: dict[str, Any] = {
        "tenant_id": tenant_id,
        "resource_id": resource,
        "thread_id": "/".join(rest) or "store",
        "id": row["key"],
        "text": text if text is not None else canonical_json(value),
        "metadata": {"langgraph_namespace": namespace, "langgraph_value": value},
        "occurred_at": row["created_at"],
    }
    if row["embedding"] is not None:
        entry["vector"] = row["embedding"]
        entry["embedding_model"] = embedding_model
    if consent is not None:
        entry["consent"] = consent
    return Located(entry, number, f"item {number}")
