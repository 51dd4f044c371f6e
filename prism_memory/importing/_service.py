"""The bulk import: a stream of entries of many scopes, checked like ``remember()``, written in
batches through :meth:`~prism_memory.stores.base.EntryStore.import_rows` (the importer needs
nothing of a store but its :class:`~prism_memory.stores.base.EntryStore` role)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
from collections.abc import AsyncIterable, Awaitable, Callable, Container, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from .. import _telemetry as otel
from .._clock import utcnow
from .._offload import tokens_of_texts
from .._windowed import OwnVector
from ..embedding import Embedder, check_embedder
from ..entries import prepare_entry
from ..errors import (
    ConfigurationError,
    DimensionMismatchError,
    EmbeddingModelMismatchError,
    PrismMemoryError,
    ValidationError,
)
from ..limits import Limits
from ..models import MemoryIdentity, Vector, parse
from ..redaction import Redactor, Scrubber
from ..stores.base import EntryStore, ImportRow
from ..windows import embed_entries
from ._checkpoint import ImportCheckpoint, import_target
from ._entry import ImportEntry, Located, askable, source_items
from ._vectors import checked_vectors

__all__ = [
    "DEFAULT_IMPORT_BATCH",
    "MAX_IMPORT_BATCH",
    "MAX_SCOPES_PER_BATCH",
    "ImportCheckpoint",
    "ImportLineError",
    "ImportReport",
    "import_entries",
]

logger = logging.getLogger("prism_memory.importing")

DEFAULT_IMPORT_BATCH = 2000
"""Entries per batch (one transaction each) unless ``batch_size`` says otherwise."""
MAX_IMPORT_BATCH = 20_000
"""The largest ``batch_size``: a batch is held in memory and written in one transaction."""
MAX_SCOPES_PER_BATCH = 1000
"""A batch closes early once it holds this many threads: the PostgreSQL write takes one advisory
lock per thread (the lock ``remember()`` takes), and the server's lock table is finite."""

_YIELD_EVERY = 16
"""Entries read (or prepared) between two yields to the event loop, so the batch being written
gets each reply of the server soon: at 64 a reply waited ~2 ms for the reader, and 60k rows took
5.5-5.8 s instead of 4.6-4.8."""
_SCOPE_CACHE = 65_536
"""How many thread identities the import keeps made (then it starts over: memory stays bounded)."""

ImportSource = (
    Iterable[Mapping[str, Any] | ImportEntry] | AsyncIterable[Mapping[str, Any] | ImportEntry]
)
ProgressHook = Callable[["ImportReport"], Awaitable[None] | None]


class ImportLineError(ValidationError):
    """An entry of the stream is refused; ``line`` is the physical line of the file it was read
    from (blank lines counted; the line a JSON document or array holding it starts on), or, for a
    stream no reader of :mod:`prism_memory.importing` made, its 1-based position in the stream.
    The message names the line (or entry) and the rule, never a value. Nothing of its batch was
    written; earlier batches stay (and the checkpoint, if any, lets a rerun resume after them)."""

    def __init__(self, message: str, *, line: int) -> None:
        super().__init__(message)
        self.line = line


@dataclass(slots=True)
class ImportReport:
    """What an import did (so far, when handed to a progress hook)."""

    read: int = 0
    """Entries of the stream this run looked at, the ones a checkpoint skipped included."""
    skipped: int = 0
    """Entries a checkpoint said an earlier run had written already (not read again)."""
    inserted: int = 0
    """New rows written."""
    existing: int = 0
    """Entries whose id was stored already, or repeated in the stream: left as stored."""
    pending: int = 0
    """New rows stored without a vector, for the indexing worker."""
    embedded: int = 0
    """Vectors the import's embedder made."""
    batches: int = 0
    """Batches written (one transaction each)."""
    restarted: bool = False
    """The checkpoint file was left by an import of another source or into another target: it
    was set aside, and this import started from the first entry."""


_Key = tuple[MemoryIdentity, str]
"""An entry's thread and id."""
_Place = tuple[int, int, str]
"""Where an entry stands: its position in the stream, the number :attr:`ImportLineError.line`
gives, and how messages name it (``"line 4"``, ``"entry 4"``)."""


@dataclass(slots=True)
class _Batch:
    rows: dict[_Key, tuple[_Place, ImportRow]] = field(default_factory=dict)
    scopes: set[MemoryIdentity] = field(default_factory=set)
    last: int = 0
    repeated: int = 0
    vectors: dict[_Key, object] = field(default_factory=dict)
    """The vectors the batch's entries came with, as given (checked only for the new ones)."""
    screened: set[_Key] = field(default_factory=set)
    """Keys :meth:`_Importer.stored` found not stored when their entries were read."""
    known: int = 0
    """Entries left out when read: :meth:`_Importer.stored` found them stored."""
    now: datetime | None = None
    """The default ``occurred_at`` of the batch's entries (one clock reading, as one
    ``remember()`` call takes): a line repeated without one is the same content."""


@dataclass(slots=True)
class _Prepared:
    """A batch ready to store (:meth:`_Importer.prepare`): the rows not stored yet, embedded
    where the import could and tokenized, and how many vectors the import made for them."""

    batch: _Batch
    rows: list[ImportRow]
    embedded: int


class _Importer:
    def __init__(
        self,
        store: EntryStore,
        *,
        embedder: Embedder | None,
        model: str | None,
        scrubber: Scrubber,
        limits: Limits,
        clock: Callable[[], datetime],
    ) -> None:
        self.store = store
        self.embedder = embedder
        self.scrubber = scrubber
        self.limits = limits
        self.clock = clock
        self.width = store.dimension
        self.scopes: dict[tuple[str, str, str], MemoryIdentity] = {}
        self.model_checked: set[MemoryIdentity] = set()
        """Threads whose stored models this import has checked (once each, as a memory does)."""
        self.model = model
        self.model_fixed = model is not None
        if embedder is not None:
            width, made_by = check_embedder(embedder)
            if model is not None and made_by is not None and model != made_by:
                raise EmbeddingModelMismatchError(
                    "model is not the embedder's model: leave model unset, or pass the embedder's"
                )
            if self.width is not None and self.width != width:
                raise DimensionMismatchError(
                    f"the vector store is pinned to width {self.width}, the embedder makes {width}"
                )
            self.width = width
            self.model = made_by if model is None else model
            self.model_fixed = True

    def row(self, item: Mapping[str, Any] | ImportEntry, now: datetime) -> tuple[ImportRow, object]:
        """The entry as a row without its vector, and the vector as given (``None``: none). A
        vector is checked only if its id turns out new (:meth:`prepare`), as part of its batch."""
        given = parse(ImportEntry, item, "import entry")
        key = (given.tenant_id, given.resource_id, given.thread_id)
        scope = self.scopes.get(key)
        if scope is None:  # the keys are checked already: one identity per thread, made once
            if len(self.scopes) >= _SCOPE_CACHE:
                self.scopes.clear()
            scope = self.scopes[key] = MemoryIdentity.model_construct(
                tenant_id=key[0], resource_id=key[1], thread_id=key[2]
            )
        entry = prepare_entry(given, now, scrubber=self.scrubber, limits=self.limits)
        if given.vector is not None:
            if not self.model_fixed:  # the first vector's model is the import's
                self.model, self.model_fixed = given.embedding_model, True
            if given.embedding_model not in (None, self.model):
                raise EmbeddingModelMismatchError(
                    "embedding_model is not the model of this import's vectors (model=, the "
                    "embedder's model, or the first vector's embedding_model)"
                )
        return ImportRow(scope=scope, entry=entry, vector=None, model=None), given.vector

    def vectors(self, batch: _Batch, rows: list[ImportRow]) -> dict[int, Vector]:
        """The given vectors of ``rows`` (the batch's new rows) by position, checked
        (:func:`checked_vectors`); the first one sets the import's width."""
        given = [
            (at, batch.vectors[key], batch.rows[key][0][1:])
            for at, row in enumerate(rows)
            if (key := (row.scope, row.entry.id)) in batch.vectors
        ]
        checked, self.width = checked_vectors(
            given, self.width, lambda message, line: ImportLineError(message, line=line)
        )
        return checked

    async def stored(
        self, items: list[tuple[int, Mapping[str, Any] | ImportEntry]]
    ) -> tuple[set[int], set[int]]:
        """The positions of ``items`` asked about, and of those that name an entry stored already
        by their own scope keys and id, plain strings as given (one read): such an entry is left
        as stored, so its line is not checked further nor its vector read. Items without an
        ``id`` (their id is the digest of their redacted text) or with keys of any other type are
        not asked about."""
        asked: list[tuple[int, tuple[MemoryIdentity, str]]] = []
        for position, item in items:
            if isinstance(item, ImportEntry) or not isinstance(item, Mapping):
                continue
            tenant, resource, thread, entry_id = (
                item.get(name) for name in ("tenant_id", "resource_id", "thread_id", "id")
            )
            if not (
                isinstance(tenant, str)
                and isinstance(resource, str)
                and isinstance(thread, str)
                and isinstance(entry_id, str)
            ):
                continue
            if not all(map(askable, (tenant, resource, thread, entry_id))):
                continue  # refused when checked, naming its line
            scope = self.scopes.get((tenant, resource, thread))
            if scope is None:  # only asked about: cached as :meth:`row` caches checked keys
                if len(self.scopes) >= _SCOPE_CACHE:
                    self.scopes.clear()
                scope = self.scopes[(tenant, resource, thread)] = MemoryIdentity.model_construct(
                    tenant_id=tenant, resource_id=resource, thread_id=thread
                )
            asked.append((position, (scope, entry_id)))
        if not asked:
            return set(), set()
        known = await self.store.known_keys([key for _, key in asked])
        return {position for position, _ in asked}, {
            position for position, key in asked if key in known
        }

    async def _new_rows(self, batch: _Batch, in_flight: Container[_Key]) -> list[ImportRow]:
        """The rows of ``batch`` neither stored already nor in the batch being stored."""
        given = [row for _, row in batch.rows.values()]
        if not given:
            return []
        stored = await self.store.known_keys(
            [key for row in given if (key := (row.scope, row.entry.id)) not in batch.screened]
        )
        return [
            row
            for row in given
            if (row.scope, row.entry.id) not in stored
            and (row.scope, row.entry.id) not in in_flight
        ]

    async def check(self, batch: _Batch, in_flight: Container[_Key]) -> None:
        """The checks :meth:`prepare` makes of ``batch``'s new rows (vectors, the threads'
        models), without embedding or writing anything: run when the source refuses a later line,
        so the first bad line is the one named."""
        rows = await self._new_rows(batch, in_flight)
        self.vectors(batch, rows)
        await self._check_models(batch, rows)

    async def prepare(self, batch: _Batch, in_flight: Container[_Key]) -> _Prepared:
        """What writing ``batch`` needs that no earlier batch has to be committed for, done while
        the previous batch -- whose keys are ``in_flight`` -- is stored: which of its ids are
        stored already or about to be (what is stored is left as stored: not embedded, tokenized
        nor staged again -- a re-import reads and checks the stream, then writes nothing), its
        threads' models, the vectors of the rows that came without one, and every new row's
        terms."""
        rows = await self._new_rows(batch, in_flight)
        if not rows:
            return _Prepared(batch, [], 0)
        supplied = self.vectors(batch, rows)
        await self._check_models(batch, rows)
        vectors: dict[int, OwnVector] = {}
        missing = [at for at in range(len(rows)) if at not in supplied]
        if missing and self.embedder is not None:
            try:
                made = await embed_entries(
                    self.embedder,
                    [rows[at].entry.text for at in missing],
                    batch_size=self.limits.embed_batch,
                    dimensions=self.width,
                )
            except PrismMemoryError as exc:  # stored pending instead: the worker retries them
                logger.warning("embedding an import batch failed; stored pending: %s", exc)
            else:
                vectors = dict(zip(missing, made, strict=True))
        # tokenized on worker threads when large: the batch being stored waits on the loop too
        tokens = await tokens_of_texts([row.entry.text for row in rows])
        ready = [
            ImportRow(
                scope=row.scope,
                entry=row.entry,
                vector=supplied.get(at, vectors.get(at)),
                model=self.model if at in supplied or at in vectors else None,
                terms=terms,
            )
            for at, (row, terms) in enumerate(zip(rows, tokens, strict=True))
        ]
        return _Prepared(batch, ready, len(vectors))

    async def store_batch(self, prepared: _Prepared, report: ImportReport) -> int:
        """Write a prepared batch (one all-or-nothing store call), after every earlier batch is
        committed; return how many rows were new."""
        batch, rows = prepared.batch, prepared.rows
        if not batch.rows and not batch.known:
            return 0
        await self._check_lineage(batch)  # sources of earlier batches are stored by now
        try:
            inserted, pending = (
                await self.store.import_rows(rows, now=self.clock()) if rows else (0, 0)
            )
        except ValidationError:
            # a lineage source forgotten since the check above (the store checks again under
            # its lock): the same check now names the line, as it would have before the race
            await self._check_lineage(batch)
            raise
        report.inserted += inserted
        report.existing += len(batch.rows) - inserted + batch.repeated + batch.known
        report.embedded += prepared.embedded
        report.pending += pending
        report.batches += 1
        meters = otel.instruments()
        if meters is not None:
            store = otel.store_id(self.store)
            existing = len(batch.rows) - inserted + batch.repeated + batch.known
            for outcome, rows_ in (("inserted", inserted), ("existing", existing)):
                if rows_:
                    meters.import_rows.add(
                        rows_, {"gen_ai.memory.store.id": store, "prism_memory.outcome": outcome}
                    )
            if pending:
                meters.pending.add(pending, {"gen_ai.memory.store.id": store})
        return inserted

    async def _check_models(self, batch: _Batch, rows: list[ImportRow]) -> None:
        """The threads that get vectors of this import's model must hold no other model's (rows
        without a recorded model do not count), as ``remember()`` checks
        (:class:`~prism_memory.errors.EmbeddingModelMismatchError`, nothing of the batch written).
        Each thread is checked once per import, before its first vectors are written."""
        if self.model is None:
            return
        embeds = self.embedder is not None
        fresh = list(
            dict.fromkeys(
                row.scope
                for row in rows
                if (embeds or (row.scope, row.entry.id) in batch.vectors)
                and row.scope not in self.model_checked
            )
        )
        held = await self.store.embedding_models_of(fresh) if fresh else {}
        for scope, models in held.items():
            if models - {self.model}:
                where = min(place for (s, _), (place, _) in batch.rows.items() if s == scope)[2]
                raise EmbeddingModelMismatchError(
                    f"{where}: its thread's vectors were made by another model than this "
                    "import's: nothing of its batch was written. Import with the thread's "
                    "model, or re-embed the thread with rebuild_index(switch_model=True) "
                    "(docs/operations.md, 'Switching models')"
                )
        if len(self.model_checked) >= _SCOPE_CACHE:
            self.model_checked.clear()
        self.model_checked.update(fresh)

    async def _check_lineage(self, batch: _Batch) -> None:
        """Lineage sources must be entries of the same thread: in this batch, or stored (an
        earlier batch of the import included)."""
        outside: dict[MemoryIdentity, dict[str, _Place]] = {}
        for (scope, _), (place, row) in batch.rows.items():
            lineage = row.entry.lineage
            for source in lineage.source_ids if lineage is not None else ():
                if (scope, source) not in batch.rows:
                    outside.setdefault(scope, {}).setdefault(source, place)
        for scope, sources in outside.items():
            known = await self.store.known_ids(scope, list(sources))
            unknown = [place for source, place in sources.items() if source not in known]
            if unknown:
                _, line, where = min(unknown)
                raise ImportLineError(
                    f"{where}: lineage names an entry unknown in its thread "
                    "(sources must come earlier in the import, or be stored)",
                    line=line,
                )


@otel.traced("create_memory", "import_entries", count=lambda report: report.inserted)
async def import_entries(
    store: EntryStore,
    source: ImportSource,
    *,
    embedder: Embedder | None = None,
    model: str | None = None,
    redactor: Redactor | None = None,
    secrets: Iterable[str] | None = None,
    limits: Limits | Mapping[str, Any] | None = None,
    batch_size: int = DEFAULT_IMPORT_BATCH,
    checkpoint: str | os.PathLike[str] | None = None,
    source_id: str | None = None,
    on_progress: ProgressHook | None = None,
    clock: Callable[[], datetime] | None = None,
) -> ImportReport:
    """Import a stream of entries of many tenants, resources and threads into ``store``.

    ``source`` is a sync or async iterable of :class:`ImportEntry` objects or mappings with its
    fields (the readers of :mod:`prism_memory.importing` make them from files and other systems);
    it is read once, in order, ``batch_size`` entries at a time, so memory stays bounded whatever
    its length. Every entry keeps ``remember()``'s rules: the same caps, validation, ``redactor``
    and ``secrets`` applied before anything persists, an id defaulting to the digest of role and
    redacted text, consent defaulting as it does there, lineage sources that exist in the entry's
    thread (earlier in the stream, or stored), and vectors that are finite and of one width (the
    store's pinned one, the embedder's, or the first vector's) made by one ``model``. An id that is
    stored already is left exactly as stored, so importing the same stream twice changes nothing.

    Entries that come without a vector are embedded in batches by ``embedder``, or -- without one,
    or when it fails -- stored ``pending`` for the indexing worker. A refused entry raises
    :class:`ImportLineError` naming its position; nothing of its batch is written (each batch is
    one all-or-nothing :meth:`~prism_memory.stores.base.EntryStore.import_rows`). With
    ``checkpoint`` (a file path) the number of entries done is recorded after every batch, with
    what names the source (``source_id``, else the ``source_id`` of a reader's iterator: the
    file's identity) and the target (:func:`import_target`: the PostgreSQL database, schema and
    table, never a credential), and a rerun of the same source into the same target skips them:
    a killed import resumes where it stopped. A checkpoint left by another source or target is
    set aside with a warning and the import starts from the first entry
    (:attr:`ImportReport.restarted`), which re-reads but rewrites nothing stored. ``on_progress`` is called with the
    running :class:`ImportReport` after each batch. ``importance_from`` hooks do not run: an entry's
    importance is the given one (clamped) or 1.0.
    """
    if not isinstance(store, EntryStore):
        raise ConfigurationError(
            "store must subclass prism_memory.stores.EntryStore (every VectorStore does)"
        )
    if isinstance(batch_size, bool) or not isinstance(batch_size, int):
        raise ValidationError("batch_size must be an integer")
    if not 1 <= batch_size <= MAX_IMPORT_BATCH:
        raise ValidationError(f"batch_size must be between 1 and {MAX_IMPORT_BATCH}")
    importer = _Importer(
        store,
        embedder=embedder,
        model=model,
        scrubber=Scrubber(redactor, secrets),
        limits=parse(Limits, limits if limits is not None else {}, "limits"),
        clock=clock or utcnow,
    )
    report = ImportReport()
    state = None
    if checkpoint is not None:
        state = ImportCheckpoint.load(checkpoint)
        named = source_id if source_id is not None else getattr(source, "source_id", None)
        here = (named if isinstance(named, str) else None, import_target(store))
        if state.done and not state.resumes(*here):
            logger.warning(
                "the import checkpoint %s was left by an import of another source or into "
                "another target: set aside, this import starts from the first entry",
                state.path,
            )
            report.restarted = True
            state = ImportCheckpoint(state.path)
        state.source, state.target = here
    batch = _Batch()
    writing: asyncio.Task[None] | None = None  # the latest batch handed over
    earlier: asyncio.Task[None] | None = None  # the one before it
    handed: _Batch | None = None  # the batch ``writing`` writes

    async def commit(
        done: _Batch, previous: asyncio.Task[None] | None, before: _Batch | None
    ) -> None:
        prepared = await importer.prepare(done, before.rows if before is not None else {})
        if previous is not None:
            await previous  # batches are stored in stream order, each after the one before
        inserted = await importer.store_batch(prepared, report)
        if state is not None and done.last:
            state.done, state.inserted = done.last, state.inserted + inserted
            state.save()
        if on_progress is not None:
            outcome = on_progress(report)
            if isinstance(outcome, Awaitable):
                await outcome

    async def hand_over() -> None:
        """Prepare the batch while the previous one is stored and the next one read (two batches
        in flight at most; stored in order)."""
        nonlocal batch, writing, earlier, handed
        if earlier is not None:
            await earlier
        if writing is not None and writing.done():
            await writing  # a failed batch raises here, before another one is prepared
        earlier, writing = writing, asyncio.create_task(commit(batch, writing, handed))
        handed, batch = batch, _Batch()

    async def take(position: int, item: Mapping[str, Any] | ImportEntry, new: bool) -> None:
        """Check an entry and add it to the batch (``new``: :meth:`_Importer.stored` found its
        key not stored); hand the batch over once it is full."""
        if isinstance(item, Located):
            place = (position, item.line, item.where)
        else:
            place = (position, position, f"entry {position}")
        if batch.now is None:
            batch.now = importer.clock()
        try:
            row, vector = importer.row(item, batch.now)
        except PrismMemoryError as exc:
            raise ImportLineError(f"{place[2]}: {exc}", line=place[1]) from exc
        key = (row.scope, row.entry.id)
        previous = batch.rows.get(key)
        if previous is not None:
            if previous[1].entry != row.entry:
                raise ImportLineError(
                    f"{place[2]}: its id appears earlier in its thread, with different "
                    f"content ({previous[0][2]})",
                    line=place[1],
                )
            batch.repeated += 1
        else:
            batch.rows[key] = (place, row)
            batch.scopes.add(row.scope)
            if vector is not None:
                batch.vectors[key] = vector
            if new:
                batch.screened.add(key)
        batch.last = position
        if len(batch.rows) + batch.known >= batch_size or len(batch.scopes) >= MAX_SCOPES_PER_BATCH:
            await hand_over()
        elif position % _YIELD_EVERY == 0:
            await asyncio.sleep(0)  # a sync source never yields: let the write progress

    async def drain(waiting: list[tuple[int, Mapping[str, Any] | ImportEntry]]) -> None:
        """Take the entries read, leaving out those found stored (one read for all of them)."""
        asked, stored = await importer.stored(waiting)
        for position, item in waiting:
            if position in stored:  # left as stored: nothing of it is checked or read further
                batch.known += 1
                batch.last = position
                if len(batch.rows) + batch.known >= batch_size:
                    await hand_over()
            else:
                await take(position, item, position in asked)
        waiting.clear()

    waiting: list[tuple[int, Mapping[str, Any] | ImportEntry]] = []
    position = 0
    items = aiter(source_items(source))
    try:
        while True:
            try:
                item = await anext(items)
            except StopAsyncIteration:
                break
            except PrismMemoryError:
                # the source refused a line: a refusal of a line read before it comes first
                await drain(waiting)
                for task in (earlier, writing):
                    if task is not None:
                        await task
                await importer.check(batch, {})
                raise
            position += 1
            report.read += 1
            if state is not None and position <= state.done:
                report.skipped += 1
                continue
            waiting.append((position, item))
            if len(waiting) >= batch_size:
                await drain(waiting)
            elif position % _YIELD_EVERY == 0:
                await asyncio.sleep(0)
        await drain(waiting)
        await hand_over()
        for task in (earlier, writing):
            if task is not None:
                await task
    except BaseException as exc:
        for task in (earlier, writing):
            if task is None:
                continue
            if isinstance(exc, asyncio.CancelledError) and not task.done():
                task.cancel()
            # the batches in flight were valid: let them commit (and checkpoint) first
            with contextlib.suppress(BaseException):
                await task
        raise
    return report
