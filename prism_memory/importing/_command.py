"""``prism-memory import``: a reader, the bulk import and a checkpoint, against PostgreSQL."""

from __future__ import annotations

import hashlib
import json
from collections.abc import AsyncIterable, Callable, Iterable, Mapping
from pathlib import Path
from typing import Any, Literal

from ..embedding import Embedder
from ..errors import ConfigurationError
from ..models import MemoryConsent, parse
from ._service import ImportReport, import_entries
from .readers import FileEntries, read_export, read_jsonl, read_langgraph_store, read_mem0

__all__ = ["FORMATS", "ImportFormat", "default_state_path", "run_import"]

ImportFormat = Literal["jsonl", "export", "mem0", "langgraph"]
FORMATS: tuple[str, ...] = ("jsonl", "export", "mem0", "langgraph")


def default_state_path(source: str, fmt: str) -> Path:
    """Where an import's checkpoint lives unless ``--state`` says: next to a file source
    (``<file>.import-state.json``), in the working directory for a LangGraph database."""
    if fmt == "langgraph":
        return Path("prism-memory-import.json")
    return Path(source + ".import-state.json")


def _langgraph_source(url: str, tenant: str, resource_index: int) -> str:
    """What names a LangGraph database in a checkpoint: its server and database (no user name,
    no password) and a digest of the mapping's options."""
    from sqlalchemy.engine import make_url

    where = make_url(url)
    options = json.dumps([tenant, resource_index]).encode()
    return json.dumps(
        {
            "reader": "langgraph",
            "server": f"{where.host or where.query.get('host') or ''}:{where.port or ''}",
            "database": where.database,
            "options": hashlib.sha256(options).hexdigest()[:32],
        },
        sort_keys=True,
        default=str,
    )


def _reader(
    fmt: str,
    source: str,
    *,
    tenant: str | None,
    consent: MemoryConsent | None,
    resource_index: int,
    model: str | None,
    max_line_bytes: int | None,
) -> Iterable[Mapping[str, Any]] | AsyncIterable[Mapping[str, Any]]:
    if fmt in ("mem0", "langgraph") and not tenant:
        raise ConfigurationError(f"--tenant is required for --format {fmt} (it has no tenants)")
    limit: dict[str, int] = {} if max_line_bytes is None else {"max_line_bytes": max_line_bytes}
    if fmt == "jsonl":
        return read_jsonl(source, **limit)
    if fmt == "export":
        return read_export(source, **limit)
    if fmt == "mem0":
        return read_mem0(source, tenant_id=str(tenant), consent=consent, **limit)
    if fmt == "langgraph":
        return read_langgraph_store(
            source,
            tenant_id=str(tenant),
            resource_index=resource_index,
            embedding_model=model,
            consent=consent,
        )
    raise ConfigurationError(f"--format must be one of {', '.join(FORMATS)}")


async def run_import(
    *,
    source: str,
    fmt: str,
    url: str,
    schema: str,
    table: str,
    dimension: int | None,
    embedder: Callable[[int | None], Embedder] | None,
    model: str | None,
    tenant: str | None,
    consent_scope: str | None,
    resource_index: int,
    batch_size: int,
    state: Path,
    max_line_bytes: int | None = None,
    secrets: Iterable[str],
    on_progress: Callable[[ImportReport, int | None], None],
) -> ImportReport:
    """Open the stores (running the revisions), import ``source`` in batches with a checkpoint at
    ``state`` (naming the source and the target; one left by another import is set aside) and
    analyse the table at the end (unless the import wrote nothing). ``max_line_bytes`` (default: the reader's) refuses longer
    lines. ``on_progress`` gets the report after every batch, and the number of entries the
    file is estimated to hold (:meth:`FileEntries.estimated_total`; ``None`` when unknown)."""
    from ..postgres import create_postgres_memory_stores

    if fmt != "langgraph" and not Path(source).is_file():  # noqa: ASYNC240 - one stat, at start
        raise ConfigurationError("the import source file does not exist")
    consent = (
        None
        if consent_scope is None
        else parse(MemoryConsent, {"scope": consent_scope}, "--consent-scope")
    )
    stream = _reader(
        fmt,
        source,
        tenant=tenant,
        consent=consent,
        resource_index=resource_index,
        model=model,
        max_line_bytes=max_line_bytes,
    )

    def total() -> int | None:
        return stream.estimated_total() if isinstance(stream, FileEntries) else None

    source_id = (
        _langgraph_source(source, str(tenant), resource_index) if fmt == "langgraph" else None
    )
    stores = await create_postgres_memory_stores(
        url, schema=schema, table=table, dimension=dimension
    )
    try:
        store = stores.vector_store
        chosen = None if embedder is None else embedder(store.dimension)
        try:
            report = await import_entries(
                store,
                stream,
                embedder=chosen,
                model=model,
                secrets=secrets,
                batch_size=batch_size,
                checkpoint=state,
                source_id=source_id,
                on_progress=lambda report: on_progress(report, total()),
            )
        except BaseException:
            async with store.deferred_vector_index():  # ANALYZE what earlier batches wrote
                pass
            raise
        if report.inserted:  # a re-import that wrote nothing changes no statistics
            async with store.deferred_vector_index():  # ANALYZE once the rows are in
                pass
        return report
    finally:
        await stores.close()
