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
from ..errors import (
    DimensionMismatchError,
    EmbeddingModelMismatchError,
    InvalidVectorError,
)
from ..importing import ImportLineError, import_entries
from ..models import MemoryConsent, MemoryIdentity
from ._conformance_agents import _NamedEmbedder
from ._importing_sources import IMPORT_SOURCE_CHECKS
from ._support import (
    ConformanceKit,
    _Case,
    _check,
    _forget_threads,
    _ids,
    _raises,
    _write_refused_or_done,
)

__all__ = ["IMPORT_CHECKS", "IMPORT_RACES", "race_import_against_forget"]

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


async def import_inherits_the_exclusions_of_its_sources(kit: ConformanceKit) -> None:
    """An imported entry derived from a revoked or held source takes over its exclusion, as
    ``remember()`` makes it (so a chain below it stays excluded, whether its links come in one
    batch or several, and a re-grant brings the chain back); one derived from a forgotten source
    is refused, and remembering the source's words again brings nothing derived back."""
    case = _Case(kit)
    memory = case.memory(thread="t-1")
    await memory.remember(
        [
            {"id": "s", "text": "Emmy proves theorems"},
            {"id": "h", "text": "Emmy holds lectures"},
            {"id": "f", "text": "Emmy forgets keys"},
        ],
        wait=True,
    )
    await memory.set_consent("s", visible=False)
    await memory.forget(ids=["h"], hold=True)
    await memory.forget(ids=["f"])

    def chain(source: str, prefix: str) -> list[dict[str, Any]]:
        return [
            _line(
                case,
                "t-1",
                f"Emmy {prefix} summary",
                id=f"{prefix}1",
                lineage={"source_ids": [source]},
            ),
            _line(
                case,
                "t-1",
                f"Emmy {prefix} summary of summary",
                id=f"{prefix}2",
                lineage={"source_ids": [f"{prefix}1"]},
            ),
            _line(
                case,
                "t-1",
                f"Emmy {prefix} third summary",
                id=f"{prefix}3",
                lineage={"source_ids": [f"{prefix}2"]},
            ),
        ]

    # the revoked source's chain in one batch, the held source's one link per batch
    await import_entries(kit.vector_store, chain("s", "r"), embedder=kit.embedder)
    await import_entries(kit.vector_store, chain("h", "k"), embedder=kit.embedder, batch_size=1)
    ids = await _ids(memory, "Emmy summary theorems lectures", top_k=10)
    _check(ids == [], f"nothing derived from an excluded source is recalled: {ids}")
    error = await _raises(
        ImportLineError,
        import_entries(kit.vector_store, chain("f", "g"), embedder=kit.embedder),
        "an import derived from a forgotten source",
    )
    _check(getattr(error, "line", None) == 1, f"the error names entry 1: {error}")
    await memory.remember({"id": "f", "text": "Emmy forgets keys"}, wait=True)
    scope = MemoryIdentity(tenant_id=case.tenant, resource_id="user-ada", thread_id="t-1")
    _check(
        await kit.vector_store.known_ids(scope, ["g1", "g2", "g3"]) == set(),
        "nothing derived from the forgotten source was stored",
    )
    await memory.set_consent("s", visible=True)
    ids = sorted(await _ids(memory, "Emmy summary theorems lectures", top_k=10))
    _check(ids == ["f", "r1", "r2", "r3", "s"], f"a re-grant brings the imported chain back: {ids}")
    await memory.aclose()


async def import_keeps_stream_order_across_kinds(kit: ConformanceKit) -> None:
    """Rows with and without a vector in one batch are numbered in stream order, and a row with a
    vector may name a pending row before it as its lineage source."""
    case = _Case(kit)
    vector = np.asarray(await kit.embedder.embed(["Ada keeps bees"]), dtype=np.float32)[0]
    lines = [
        _line(case, "t-1", "Ada plays the cello", id="cello"),
        _line(
            case,
            "t-1",
            "Ada keeps bees",
            id="bees",
            vector=vector.tolist(),
            lineage={"source_ids": ["cello"]},
        ),
        _line(case, "t-1", "Ada rows", id="rows"),
    ]
    report = await import_entries(kit.vector_store, lines, model=None)
    _check(report.inserted == 3 and report.pending == 2, f"two pending: {report}")
    scope = MemoryIdentity(tenant_id=case.tenant, resource_id="user-ada", thread_id="t-1")
    listed = await kit.vector_store.list_by_thread(scope, after=None, limit=10)
    order = [(r.id, r.sequence) for r in listed]
    _check(order == [("cello", 0), ("bees", 1), ("rows", 2)], f"stream order: {order}")


async def import_stores_a_repeat_of_the_batch_in_flight_once(kit: ConformanceKit) -> None:
    """An entry repeated in the next batch -- prepared (its stored ids looked up, embedded) while
    the batch before is still being written -- is stored once; the thread's sequences follow the
    stream with no gap, and the report counts the repeat as existing."""
    case = _Case(kit)
    texts = ["Ada plays the cello", "Ada keeps bees", "Ada rows", "Ada sings", "Ada reads"]
    ids = ["cello", "bees", "cello", "rows", "rows", "sings", "bees", "reads"]
    lines = [_line(case, "t-1", texts[["cello", "bees", "rows", "sings", "reads"].index(i)], id=i)
             for i in ids]  # fmt: skip
    report = await import_entries(kit.vector_store, lines, embedder=kit.embedder, batch_size=2)
    _check(
        (report.inserted, report.existing, report.embedded) == (5, 3, 5),
        f"each entry stored and embedded once: {report}",
    )
    scope = MemoryIdentity(tenant_id=case.tenant, resource_id="user-ada", thread_id="t-1")
    listed = await kit.vector_store.list_by_thread(scope, after=None, limit=10)
    order = [(r.id, r.sequence, r.status) for r in listed]
    expected = [
        (i, at, "indexed") for at, i in enumerate(["cello", "bees", "rows", "sings", "reads"])
    ]
    _check(order == expected, f"stream order, no gap: {order}")


async def import_checks_the_threads_model(kit: ConformanceKit) -> None:
    """Vectors of another model than the one a thread's stored vectors hold are refused with
    :class:`EmbeddingModelMismatchError` -- given with the entries or made by the import's
    embedder -- and nothing of their batch is written; the thread's own model imports."""
    case = _Case(kit)
    memory = case.memory(thread="t-1", embedder=_NamedEmbedder(kit.embedder, "model-a@1"))
    await memory.remember({"id": "m1", "text": "the cat sat on the mat"}, wait=True)
    await memory.aclose()
    vector = np.asarray(await kit.embedder.embed(["a dog"]), dtype=np.float32)[0].tolist()
    store = kit.vector_store
    t1 = MemoryIdentity(tenant_id=case.tenant, resource_id="user-ada", thread_id="t-1")
    t2 = MemoryIdentity(tenant_id=case.tenant, resource_id="user-ada", thread_id="t-2")
    lines = [
        _line(case, "t-2", "a dog in the fog", id="d1", vector=vector),
        _line(case, "t-1", "a dog on the log", id="d2", vector=vector),
    ]
    attempts: list[tuple[str, dict[str, Any]]] = [
        ("vectors of another model", {"model": "model-b@2"}),
        ("another model's embedder", {"embedder": _NamedEmbedder(kit.embedder, "model-b@2")}),
    ]
    held = await store.embedding_models_of([t2, t1, t1])
    _check(held == {t1: {"model-a@1"}}, f"the threads' stored models, in one read: {held}")
    for what, options in attempts:
        given = lines if "model" in options else [{**line, "vector": None} for line in lines]
        await _raises(EmbeddingModelMismatchError, import_entries(store, given, **options), what)
        _check(await store.known_ids(t1, ["d2"]) == set(), f"{what}: nothing written to t-1")
        _check(await store.known_ids(t2, ["d1"]) == set(), f"{what}: nothing of the batch")
    tagged = [{**line, "embedding_model": "model-b@2"} for line in lines]
    await _raises(EmbeddingModelMismatchError, import_entries(store, tagged), "tagged vectors")
    report = await import_entries(store, lines, model="model-a@1")
    _check(report.inserted == 2, f"the thread's own model imports: {report}")
    records = await store.get_entries(t1, ["d2"])
    _check(records[0].embedding_model == "model-a@1", "its model is recorded")
    await _forget_threads(case, "t-1", "t-2")  # model-a@1's vectors: leave the store as found


IMPORT_RACES = 24
"""Races of :func:`race_import_against_forget` the conformance suite runs (CI-sized)."""


async def race_import_against_forget(kit: ConformanceKit, races: int) -> int:
    """Race an import of an entry derived from ``s`` against ``forget(ids=[s])`` on the same
    thread, then remember ``s``'s words again (same digest id): return how many races left the
    derived entry stored or recallable (the answer is 0). The forget starts after a varying
    number of event-loop turns, so the races cover the interleavings of the calls' awaits."""
    case = _Case(kit)
    memory = case.memory(thread="t-1")
    survivors = 0
    for race in range(races):
        words = f"race fact {race}"
        source = (await memory.remember({"text": words}, wait=True)).accepted[0]
        derived = [
            _line(case, "t-1", f"derived {race}", id=f"d{race}", lineage={"source_ids": [source]}),
            _line(
                case,
                "t-1",
                f"derived again {race}",
                id=f"e{race}",
                lineage={"source_ids": [f"d{race}"]},
            ),
        ]

        async def forget_later(turns: int, source: str = source) -> int:
            for _ in range(turns):
                await asyncio.sleep(0)
            return await memory.forget(ids=[source])

        outcome = await asyncio.gather(
            import_entries(kit.vector_store, derived, embedder=kit.embedder),
            forget_later(race % 8),
            return_exceptions=True,
        )
        _write_refused_or_done(outcome)
        refused = outcome[0]
        if isinstance(refused, BaseException):  # refused: typed, naming the entry whose source went
            _check(
                isinstance(refused, ImportLineError) and refused.line == 1,
                f"a refused import names the line of the entry that lost its source: {refused!r}",
            )
        again = (await memory.remember({"text": words}, wait=True)).accepted[0]
        _check(again == source, "the same words get the same digest id")
        left = await kit.vector_store.get_entries(memory.identity, [f"d{race}", f"e{race}"])
        recalled = await _ids(memory, f"derived again {race}", top_k=5)
        if left or {f"d{race}", f"e{race}"} & set(recalled):
            survivors += 1
    await memory.aclose()
    return survivors


async def import_races_with_forget_never_resurrect(kit: ConformanceKit) -> None:
    """An import of entries derived from a source while the source is forgotten is refused or
    forgotten with it, so remembering the source again (same id) never brings them back."""
    survivors = await race_import_against_forget(kit, IMPORT_RACES)
    _check(survivors == 0, f"{survivors} of {IMPORT_RACES} races left a derived entry behind")


IMPORT_CHECKS = {
    "import_inherits_the_exclusions_of_its_sources": (
        import_inherits_the_exclusions_of_its_sources
    ),
    "import_keeps_stream_order_across_kinds": import_keeps_stream_order_across_kinds,
    "import_stores_a_repeat_of_the_batch_in_flight_once": (
        import_stores_a_repeat_of_the_batch_in_flight_once
    ),
    "import_checks_the_threads_model": import_checks_the_threads_model,
    "import_races_with_forget_never_resurrect": import_races_with_forget_never_resurrect,
    "import_keeps_the_rules_of_remember": import_keeps_the_rules_of_remember,
    "import_refuses_a_bad_batch_whole": import_refuses_a_bad_batch_whole,
    "import_without_an_embedder_stores_pending_rows": import_without_an_embedder_stores_pending_rows,
    "import_resumes_from_its_checkpoint": import_resumes_from_its_checkpoint,
    "import_and_remember_interleave_without_colliding": (
        import_and_remember_interleave_without_colliding
    ),
    **IMPORT_SOURCE_CHECKS,
}
