"""Conformance checks of the bulk import (:func:`prism_memory.importing.import_entries`): the rules
``remember()`` keeps, idempotency, all-or-nothing batches and resuming, on every backend."""

from __future__ import annotations

import asyncio
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np

from ..entries import entry_digest
from ..errors import DimensionMismatchError, EmbeddingModelMismatchError, InvalidVectorError
from ..importing import ImportLineError, import_entries
from ..models import MemoryConsent, MemoryIdentity
from ._support import ConformanceKit, _Case, _check, _ids, _raises

__all__ = ["IMPORT_CHECKS"]

SECRET = "hunter2-import"  # noqa: S105 - a planted value the redaction must remove


def _line(case: _Case, thread: str, text: str, **fields: Any) -> dict[str, Any]:
    return {
        "tenant_id": fields.pop("tenant_id", case.tenant),
        "resource_id": "user-ada",
        "thread_id": thread,
        "text": text,
        **fields,
    }


async def import_keeps_the_rules_of_remember(kit: ConformanceKit) -> None:
    """Imported entries of several threads and tenants are stored as ``remember()`` would store
    them -- redacted, digest ids, consent, lineage, importance clamped, sequences per thread in
    input order, given vectors kept and the rest embedded -- recallable at once; importing the same
    stream again changes nothing."""
    case = _Case(kit)
    other = f"{case.tenant}-b"
    given = np.asarray(await kit.embedder.embed(["Ada plays the cello"]), dtype=np.float32)[0]
    consent = MemoryConsent(source="user", scope="user")
    lines = [
        _line(case, "t-1", "Ada plays the cello", id="cello", vector=given.tolist()),
        _line(case, "t-1", f"Ada's password is {SECRET}", metadata={"note": SECRET}),
        _line(case, "t-1", "Ada keeps bees", id="bees", importance=2.5, consent=consent),
        _line(case, "t-2", "Ada rows on Sundays", id="rows", sequence=10),
        _line(case, "t-2", "Ada rows fast", id="fast", lineage={"source_ids": ["rows"]}),
        _line(case, "t-1", "Ada keeps bees", tenant_id=other, id="bees"),
    ]
    report = await import_entries(
        kit.vector_store, lines, embedder=kit.embedder, secrets=[SECRET], batch_size=4
    )
    _check(report.inserted == 6 and report.existing == 0, f"first import: {report}")
    _check(report.embedded == 5 and report.pending == 0, f"embedded all but one: {report}")
    store = kit.vector_store
    t1 = MemoryIdentity(tenant_id=case.tenant, resource_id="user-ada", thread_id="t-1")
    t2 = MemoryIdentity(tenant_id=case.tenant, resource_id="user-ada", thread_id="t-2")
    secret_id = entry_digest("user", "Ada's password is [REDACTED]")
    records = {r.id: r for r in await store.get_entries(t1, ["cello", secret_id, "bees"])}
    _check(set(records) == {"cello", secret_id, "bees"}, f"thread t-1 holds {sorted(records)}")
    _check(
        [records[i].sequence for i in ("cello", secret_id, "bees")] == [0, 1, 2],
        "sequences follow the stream within a thread",
    )
    redacted = records[secret_id]
    _check(
        SECRET not in redacted.text and SECRET not in str(redacted.metadata),
        "secrets are redacted before anything is stored",
    )
    bees = records["bees"]
    _check(bees.importance == 1.0 and bees.consent == consent, f"bees stored as {bees}")
    _check(records["cello"].consent is None, "no consent given: the default consent")
    _check(all(r.status == "indexed" for r in records.values()), "every entry indexed")
    pair = {r.id: r for r in await store.get_entries(t2, ["rows", "fast"])}
    _check([pair["rows"].sequence, pair["fast"].sequence] == [10, 11], "explicit then next")
    lineage = pair["fast"].lineage
    _check(lineage is not None and lineage.source_ids == ("rows",), "lineage kept")
    b_scope = MemoryIdentity(tenant_id=other, resource_id="user-ada", thread_id="t-1")
    _check(await store.known_ids(b_scope, ["bees"]) == {"bees"}, "the other tenant's entry")
    async with case.memory(thread="t-1") as memory:
        _check("cello" in await _ids(memory, "Ada plays the cello"), "recalled after import")
    written = {r.id: r.written_at for r in records.values()}

    again = await import_entries(
        kit.vector_store, lines, embedder=kit.embedder, secrets=[SECRET], batch_size=4
    )
    _check(again.inserted == 0 and again.existing == 6, f"re-import: {again}")
    _check(again.embedded == 0, "a re-import embeds nothing")
    after = {r.id: r.written_at for r in await store.get_entries(t1, list(written))}
    _check(after == written, "a re-import rewrites nothing")


async def import_refuses_a_bad_batch_whole(kit: ConformanceKit) -> None:
    """A refused entry raises :class:`ImportLineError` naming its position; nothing of its batch
    is written, the batches before it are."""
    case = _Case(kit)
    store = kit.vector_store
    scope = MemoryIdentity(tenant_id=case.tenant, resource_id="user-ada", thread_id="t-1")
    width = kit.embedder.dimensions
    good = [_line(case, "t-1", f"fact {i}", id=f"f{i}") for i in range(1, 3)]

    def stream(bad: dict[str, Any]) -> Iterator[dict[str, Any]]:
        yield from good
        yield _line(case, "t-1", "fact 3", id="f3")
        yield bad
        yield _line(case, "t-1", "fact 5", id="f5")

    cases: list[tuple[dict[str, Any], type[BaseException]]] = [
        (_line(case, "t-1", "nan", id="f4", vector=[float("nan")] * width), InvalidVectorError),
        (_line(case, "t-1", "wide", id="f4", vector=[0.5] * (width + 1)), DimensionMismatchError),
        (
            _line(case, "t-1", "orphan", id="f4", lineage={"source_ids": ["nowhere"]}),
            ImportLineError,
        ),
        (_line(case, "t-1", "x" * 70_000, id="f4"), ImportLineError),
        (_line(case, "t-1", "f3 again", id="f3"), ImportLineError),
        ({"tenant_id": case.tenant, "text": "no scope"}, ImportLineError),
    ]
    for bad, cause in cases:
        error = await _raises(
            ImportLineError,
            import_entries(store, stream(bad), embedder=kit.embedder, batch_size=2),
            f"a bad entry ({cause.__name__})",
        )
        _check(getattr(error, "line", None) == 4, f"the error names entry 4: {error}")
        _check(
            isinstance(error, cause) or isinstance(error.__cause__, cause),
            f"{error!r} comes from {cause.__name__}",
        )
        known = await store.known_ids(scope, ["f1", "f2", "f3", "f4", "f5"])
        _check(known == {"f1", "f2"}, f"only the batch before it is written: {sorted(known)}")
    vector = np.asarray(await kit.embedder.embed(["fact 4"]), dtype=np.float32)[0].tolist()
    mixed = [
        _line(case, "t-2", "fact 4", id="m1", vector=vector, embedding_model="model-a"),
        _line(case, "t-2", "fact 5", id="m2", vector=vector, embedding_model="model-b"),
    ]
    error = await _raises(
        ImportLineError, import_entries(store, mixed), "vectors of two models in one import"
    )
    _check(isinstance(error.__cause__, EmbeddingModelMismatchError), f"model check: {error!r}")


async def import_without_an_embedder_stores_pending_rows(kit: ConformanceKit) -> None:
    """Without an embedder, entries that bring no vector are stored pending for the worker (any
    memory of the thread embeds them); the ones with a vector are indexed at once."""
    case = _Case(kit)
    vector = np.asarray(await kit.embedder.embed(["Ada keeps bees"]), dtype=np.float32)[0]
    lines = [
        _line(case, "t-1", "Ada keeps bees", id="bees", vector=vector),
        _line(case, "t-1", "Ada plays the cello", id="cello"),
    ]
    report = await import_entries(kit.vector_store, lines, model=None)
    _check(report.inserted == 2 and report.pending == 1, f"one pending: {report}")
    scope = MemoryIdentity(tenant_id=case.tenant, resource_id="user-ada", thread_id="t-1")
    status = await kit.vector_store.index_status(scope, ["bees", "cello"])
    _check(
        {k: v[0] for k, v in status.items()} == {"bees": "indexed", "cello": "pending"},
        f"statuses {status}",
    )
    async with case.memory(thread="t-1") as memory:
        _check(await memory.resume_indexing() == 1, "the memory's worker embeds the pending row")
        _check("cello" in await _ids(memory, "Ada plays the cello"), "then it is recalled")


async def import_resumes_from_its_checkpoint(kit: ConformanceKit) -> None:
    """A killed import (here: a stream that breaks after five entries) rerun with its checkpoint
    skips what was written and ends with every entry of the stream stored once."""
    case = _Case(kit)
    lines = [_line(case, f"t-{i % 3}", f"note {i}", id=f"n{i}") for i in range(12)]

    def broken() -> Iterator[dict[str, Any]]:
        yield from lines[:5]
        raise OSError("the reader died")

    with tempfile.TemporaryDirectory() as directory:
        state = Path(directory) / "import.state"
        await _raises(
            OSError,
            import_entries(kit.vector_store, broken(), checkpoint=state, batch_size=2),
            "the broken stream",
        )
        report = await import_entries(kit.vector_store, lines, checkpoint=state, batch_size=2)
    _check(report.skipped == 4, f"the two written batches are skipped: {report}")
    _check(report.inserted == 8 and report.existing == 0, f"the rest is written: {report}")
    total = 0
    for thread in range(3):
        scope = MemoryIdentity(
            tenant_id=case.tenant, resource_id="user-ada", thread_id=f"t-{thread}"
        )
        listed = await kit.vector_store.list_by_thread(scope, after=None, limit=100)
        expected = [f"n{i}" for i in range(thread, 12, 3)]
        _check([r.id for r in listed] == expected, f"thread {thread}: {[r.id for r in listed]}")
        total += len(listed)
    _check(total == 12, "every entry once")


async def import_and_remember_interleave_without_colliding(kit: ConformanceKit) -> None:
    """An import and ``remember()`` calls writing the same thread at once: every row lands once,
    and no two rows of the thread share a sequence (both take the thread's lock)."""
    case = _Case(kit)
    lines = [_line(case, "t-1", f"imported {i}", id=f"i{i}") for i in range(400)]

    async def remember_some() -> None:
        async with case.memory(thread="t-1") as memory:
            for start in range(0, 40, 4):
                batch = [
                    {"id": f"r{i}", "text": f"remembered {i}"} for i in range(start, start + 4)
                ]
                await memory.remember(batch)
                await asyncio.sleep(0)

    await asyncio.gather(import_entries(kit.vector_store, lines, batch_size=25), remember_some())
    scope = MemoryIdentity(tenant_id=case.tenant, resource_id="user-ada", thread_id="t-1")
    listed = await kit.vector_store.list_by_thread(scope, after=None, limit=1000)
    ids = [r.id for r in listed]
    _check(
        len(ids) == 440
        and set(ids) == {*(f"i{i}" for i in range(400)), *(f"r{i}" for i in range(40))},
        f"{len(ids)} rows",
    )
    sequences = [r.sequence for r in listed]
    _check(sorted(set(sequences)) == list(range(440)), "one sequence per row, none skipped")
    imported = [r.id for r in listed if r.id.startswith("i")]
    _check(imported == [f"i{i}" for i in range(400)], "imported rows keep their stream order")


IMPORT_CHECKS = {
    "import_keeps_the_rules_of_remember": import_keeps_the_rules_of_remember,
    "import_refuses_a_bad_batch_whole": import_refuses_a_bad_batch_whole,
    "import_without_an_embedder_stores_pending_rows": import_without_an_embedder_stores_pending_rows,
    "import_resumes_from_its_checkpoint": import_resumes_from_its_checkpoint,
    "import_and_remember_interleave_without_colliding": (
        import_and_remember_interleave_without_colliding
    ),
}
