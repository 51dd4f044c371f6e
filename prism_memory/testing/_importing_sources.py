"""Conformance checks of the bulk import's sources: files read by the readers (physical lines, the
line limit, mem0's metadata), messages that never repeat a value, repeated lines and the
checkpoint's source and target, on every backend."""

from __future__ import annotations

import io
import itertools
import json
import tempfile
from collections.abc import Awaitable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import ConfigurationError, DimensionMismatchError, InvalidVectorError
from ..importing import (
    MAX_LINE_BYTES,
    ImportLineError,
    import_entries,
    read_jsonl,
    read_mem0,
)
from ..models import MemoryIdentity
from ..stores.base import RecallFilter, SearchRequest
from ..stores.memory import InMemoryVectorStore
from ._conformance_agents import _NamedEmbedder
from ._support import ConformanceKit, _Case, _check, _forget_threads, _raises

__all__ = ["IMPORT_SOURCE_CHECKS"]

MARKER = "pm-marker-7f3a"
"""A value planted in ids, models, keys and timestamps: no message may repeat it."""


def _line(case: _Case, thread: str, text: str, **fields: Any) -> dict[str, Any]:
    return {
        "tenant_id": case.tenant,
        "resource_id": "user-ada",
        "thread_id": thread,
        "text": text,
        **fields,
    }


def _write(directory: str, name: str, lines: list[str]) -> Path:
    path = Path(directory) / name
    path.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    return path


def _scope(case: _Case, thread: str = "t-1") -> MemoryIdentity:
    return MemoryIdentity(tenant_id=case.tenant, resource_id="user-ada", thread_id=thread)


async def import_names_a_files_physical_lines(kit: ConformanceKit) -> None:
    """An entry of a file refused after blank lines is named by its physical line, whether the
    entry check, the lineage check before the write or the reader refuses it."""
    case = _Case(kit)
    good = json.dumps(_line(case, "t-1", "Ada keeps bees", id="bees"))
    orphan = json.dumps(_line(case, "t-1", "orphan", id="o", lineage={"source_ids": ["nowhere"]}))
    files = {
        "no scope": [good, "", "   ", json.dumps({"tenant_id": case.tenant, "text": "x"})],
        "unknown lineage": [good, "", "", orphan],
        "not an object": [good, "", "", "[1, 2]"],
    }
    with tempfile.TemporaryDirectory() as directory:
        for what, lines in files.items():
            path = _write(directory, "lines.jsonl", lines)
            error = await _raises(
                ImportLineError, import_entries(kit.vector_store, read_jsonl(path)), what
            )
            _check(getattr(error, "line", None) == 4, f"{what}: names file line 4: {error!r}")
            _check(str(error).startswith("line 4:"), f"{what}: the message says line 4: {error}")
    _check(
        await kit.vector_store.known_ids(_scope(case), ["bees", "o"]) == set(),
        "nothing of the refused batch was written",
    )


def _messages(error: BaseException) -> list[str]:
    """What a traceback of ``error`` shows of it: it, its causes and the contexts it shows."""
    shown: list[str] = []
    current: BaseException | None = error
    while current is not None and len(shown) < 16:
        shown.append(f"{type(current).__name__}: {current} {current.args!r}")
        if current.__cause__ is not None:
            current = current.__cause__
        else:
            current = None if current.__suppress_context__ else current.__context__
    return shown


async def import_messages_never_repeat_values(kit: ConformanceKit) -> None:
    """Refusals of entries whose id, model, keys, metadata or timestamp hold a planted value name
    the line and the rule, never the value -- in the error, its causes or the report."""
    case = _Case(kit)
    store = kit.vector_store
    vector = np.asarray(await kit.embedder.embed(["a fact"]), dtype=np.float32)[0].tolist()
    named = _NamedEmbedder(kit.embedder, f"{MARKER}-stored")
    memory = case.memory(thread="t-stored", embedder=named)
    await memory.remember({"id": "m1", "text": "a stored fact"}, wait=True)
    await memory.aclose()
    attempts: list[tuple[str, list[dict[str, Any]], dict[str, Any]]] = [
        (
            "an id repeated with other content",
            [_line(case, "t-1", "one", id=MARKER), _line(case, "t-1", "two", id=MARKER)],
            {},
        ),
        (
            "vectors of two models",
            [
                _line(case, "t-1", "a", id="a", vector=vector, embedding_model=f"{MARKER}-a"),
                _line(case, "t-1", "b", id="b", vector=vector, embedding_model=f"{MARKER}-b"),
            ],
            {},
        ),
        (
            "another model than the thread's",
            [_line(case, "t-stored", "c", id="c", vector=vector)],
            {"model": f"{MARKER}-other"},
        ),
        ("a model that is not the embedder's", [], {"model": MARKER, "embedder": named}),
        (
            "an embedder whose model is too long",
            [],
            {"embedder": _NamedEmbedder(kit.embedder, MARKER * 40)},
        ),
        ("an unknown field", [_line(case, "t-1", "d", **{MARKER: 1})], {}),
        ("a reserved metadata key", [_line(case, "t-1", "e", metadata={f"_{MARKER}": 1})], {}),
        (
            "an unknown lineage source",
            [_line(case, "t-1", "f", lineage={"source_ids": [MARKER]})],
            {},
        ),
        ("a bad timestamp", [_line(case, "t-1", "g", occurred_at=MARKER)], {}),
        ("a bad consent", [_line(case, "t-1", "h", consent={"scope": MARKER})], {}),
        ("a bad key", [_line(case, "t-1", "i", tenant_id=f"{MARKER}\x01")], {}),
        ("a too long model", [_line(case, "t-1", "j", embedding_model=MARKER * 20)], {}),
    ]
    for what, lines, options in attempts:
        try:
            report = await import_entries(store, lines, **options)
        except (ImportLineError, ConfigurationError) as refused:
            shown = _messages(refused)
            _check(not any(MARKER in message for message in shown), f"{what}: {shown}")
        else:
            raise AssertionError(f"{what}: nothing was refused ({report})")
    with tempfile.TemporaryDirectory() as directory:
        memory_line = {"id": MARKER, "memory": "x", "user_id": "u", "created_at": MARKER}
        path = _write(directory, "mem0.jsonl", [json.dumps(memory_line)])
        error = await _raises(
            ImportLineError,
            import_entries(store, read_mem0(path, tenant_id=case.tenant)),
            "a mem0 memory with a bad created_at",
        )
        shown = _messages(error)
        _check(not any(MARKER in message for message in shown), f"mem0 created_at: {shown}")
    stored = await import_entries(store, [_line(case, "t-1", "k", id=MARKER)], model=MARKER)
    _check(MARKER not in repr(stored), f"the report: {stored!r}")
    await _forget_threads(case, "t-1", "t-stored")  # other models' vectors: leave none behind


async def import_stores_a_repeated_line_once(kit: ConformanceKit) -> None:
    """Two identical lines in one batch are the same entry, stored once -- with an
    ``occurred_at`` or without one (the import's clock gives both the same), with an id or the
    digest of their text."""
    case = _Case(kit)
    start = datetime(2026, 1, 1, tzinfo=UTC)
    ticks = itertools.count()

    def clock() -> datetime:  # every reading is a later moment
        return start + timedelta(seconds=next(ticks))

    lines = [
        _line(case, "t-1", "Ada keeps bees", id="bees"),
        _line(case, "t-1", "Ada plays the cello"),
        _line(case, "t-1", "Ada rows", occurred_at="2025-03-01T09:00:00+00:00"),
    ]
    doubled = [line for line in lines for _ in range(2)]
    report = await import_entries(kit.vector_store, doubled, clock=clock)
    _check((report.inserted, report.existing) == (3, 3), f"each line stored once: {report}")
    listed = await kit.vector_store.list_by_thread(_scope(case), after=None, limit=10)
    _check([r.sequence for r in listed] == [0, 1, 2], f"three rows: {[r.id for r in listed]}")


async def import_refuses_mem0_metadata_that_is_no_object(kit: ConformanceKit) -> None:
    """A mem0 memory whose ``metadata`` is not a JSON object (an array, a string, a number) is
    refused like any bad line -- :class:`ImportLineError` naming its line, nothing of its batch
    written; ``null`` or no metadata is none."""
    case = _Case(kit)

    def memory(at: int, metadata: Any) -> str:
        fields = {"id": f"m{at}", "memory": f"fact {at}", "user_id": "user-ada", "run_id": "t-1"}
        return json.dumps({**fields, "metadata": metadata})

    with tempfile.TemporaryDirectory() as directory:
        for bad in ([1, 2], "ab", 7):
            path = _write(directory, "mem0.jsonl", [memory(1, None), "", memory(3, bad)])
            error = await _raises(
                ImportLineError,
                import_entries(kit.vector_store, read_mem0(path, tenant_id=case.tenant)),
                f"mem0 metadata {type(bad).__name__}",
            )
            _check(getattr(error, "line", None) == 3, f"names line 3: {error!r}")
            _check("metadata" in str(error), f"names the field: {error}")
            known = await kit.vector_store.known_ids(_scope(case), ["m1", "m3"])
            _check(known == set(), f"nothing of the batch written: {sorted(known)}")
        pretty = Path(directory) / "mem0.json"
        pretty.write_text(json.dumps({"results": [json.loads(memory(1, None)), "x"]}, indent=2))
        error = await _raises(
            ImportLineError,
            import_entries(kit.vector_store, read_mem0(pretty, tenant_id=case.tenant)),
            "a document's second memory",
        )
        _check(str(error).startswith("line 1, entry 2:"), f"names its entry: {error}")
        path = _write(directory, "mem0.jsonl", [memory(1, None), memory(2, {"k": "v"})])
        report = await import_entries(kit.vector_store, read_mem0(path, tenant_id=case.tenant))
        _check(report.inserted == 2, f"null and object metadata import: {report}")


async def import_sets_aside_a_checkpoint_of_another_target_or_source(kit: ConformanceKit) -> None:
    """A checkpoint left by an import killed midway into another store, or of another file, is set
    aside: the import starts from the first entry and every row lands (``restarted``); one left
    by the same file into the same store resumes."""
    case = _Case(kit)
    lines = [_line(case, f"t-{i % 3}", f"note {i}", id=f"n{i}") for i in range(12)]

    def broken(given: list[dict[str, Any]]) -> Iterator[dict[str, Any]]:
        yield from given[:5]
        raise OSError("the reader died")

    async def count(ids: list[str]) -> int:
        found = 0
        for thread in range(3):
            found += len(await kit.vector_store.known_ids(_scope(case, f"t-{thread}"), ids))
        return found

    async def killed(call: Awaitable[Any]) -> None:
        await _raises(OSError, call, "the killed import")

    with tempfile.TemporaryDirectory() as directory:
        state = Path(directory) / "import.state"
        other = InMemoryVectorStore()  # target A
        await killed(import_entries(other, broken(lines), checkpoint=state, batch_size=2))
        report = await import_entries(kit.vector_store, lines, checkpoint=state, batch_size=2)
        _check(report.restarted and report.skipped == 0, f"set aside: {report}")
        _check(report.inserted == 12, f"every row lands in target B: {report}")
        _check(await count([f"n{i}" for i in range(12)]) == 12, "all 12 rows in B")

        first = _write(directory, "first.jsonl", [json.dumps(line) for line in lines])
        then = [_line(case, f"t-{i % 3}", f"later {i}", id=f"l{i}") for i in range(12)]
        second = _write(directory, "second.jsonl", [json.dumps(line) for line in then])
        await killed(
            import_entries(
                kit.vector_store,
                broken(list(read_jsonl(first))),
                checkpoint=state,
                batch_size=2,
                source_id=read_jsonl(first).source_id,
            )
        )
        resumed = await import_entries(
            kit.vector_store, read_jsonl(first), checkpoint=state, batch_size=2
        )
        _check(not resumed.restarted and resumed.skipped == 4, f"same file: resumed {resumed}")
        moved = await import_entries(
            kit.vector_store, read_jsonl(second), checkpoint=state, batch_size=2
        )
        _check(moved.restarted and moved.skipped == 0, f"another file: set aside {moved}")
        _check(moved.inserted == 12, f"another file: every row lands {moved}")
        _check(await count([f"l{i}" for i in range(12)]) == 12, "all 12 rows of the file")


class _Endless(io.StringIO):
    """A text handle of one endless line, counting what is read of it."""

    def __init__(self) -> None:
        super().__init__()
        self.given = 0

    def read(self, size: int | None = -1) -> str:
        size = 65_536 if size is None or size < 0 else size
        self.given += size
        return "x" * size


async def import_refuses_an_over_long_line(kit: ConformanceKit) -> None:
    """A line one byte over the line limit is refused -- :class:`ImportLineError` naming its
    physical line, the batches before it written, nothing after -- once the limit is read, never
    read whole; so is a pretty-printed document over it."""
    case = _Case(kit)
    good = [json.dumps(_line(case, "t-1", f"fact {i}", id=f"f{i}")) for i in range(1, 4)]

    def sized(size: int, entry_id: str) -> str:  # a valid line, padded with JSON's whitespace
        line = json.dumps(_line(case, "t-1", f"padded {entry_id}", id=entry_id))
        return line + " " * (size - len(line))

    long = sized(MAX_LINE_BYTES + 1, "long")
    with tempfile.TemporaryDirectory() as directory:
        path = _write(directory, "long.jsonl", [*good[:2], "", long, good[2]])
        error = await _raises(
            ImportLineError,
            import_entries(kit.vector_store, read_jsonl(path), batch_size=2),
            "an over-long line",
        )
        _check(getattr(error, "line", None) == 4, f"names line 4: {error!r}")
        _check("line limit" in str(error), f"names the limit: {error}")
        known = await kit.vector_store.known_ids(_scope(case), ["f1", "f2", "f3", "long"])
        _check(known == {"f1", "f2"}, f"the batch before it only: {sorted(known)}")
        exact = _write(directory, "exact.jsonl", [sized(MAX_LINE_BYTES, "exact")])
        _check(len(exact.read_bytes()) == MAX_LINE_BYTES + 1, "a line of the limit, and \\n")
        report = await import_entries(kit.vector_store, read_jsonl(exact))
        _check(report.inserted == 1, f"a line of the limit imports: {report}")
        pretty = Path(directory) / "pretty.json"
        pretty.write_text(json.dumps(_line(case, "t-1", "z" * 300, id="p"), indent=2))
        error = await _raises(
            ImportLineError,
            import_entries(kit.vector_store, read_jsonl(pretty, max_line_bytes=200)),
            "a document over the limit",
        )
        _check(getattr(error, "line", None) == 1, f"names its first line: {error!r}")
    endless = _Endless()
    reading = import_entries(kit.vector_store, read_jsonl(endless, max_line_bytes=100_000))
    await _raises(ImportLineError, reading, "an endless line")
    _check(endless.given <= 100_000 + 65_536, f"read {endless.given} characters of it")


def _vector_line(case: _Case, entry_id: str, vector: str, **fields: Any) -> str:
    """A JSONL line whose ``vector`` is the JSON text given (written as is)."""
    line = json.dumps(_line(case, "t-1", f"fact {entry_id}", id=entry_id, **fields))
    return line[:-1] + f', "vector": {vector}}}'


async def import_checks_the_vectors_of_new_ids_only(kit: ConformanceKit) -> None:
    """A JSONL file's vectors are parsed and checked as a batch, for the new ids only: a bad
    vector of a new id is refused naming its line (nothing of its batch written) -- a number too
    large for float32, a number that is not JSON, a vector of another width; a vector is stored
    exactly as given (a ``vector`` key in the metadata is left in the metadata); a re-import
    leaves an entry whose scope keys and id name a stored one as stored without reading the rest
    of its line -- a bad vector or an unknown field of a stored id is not refused -- while a new
    id's bad vector still is."""
    case = _Case(kit)
    store = kit.vector_store
    width = kit.embedder.dimensions
    rows = np.asarray(await kit.embedder.embed(["one", "two", "three"]), dtype=np.float32)
    lists = [json.dumps(row.tolist()) for row in rows]
    good = [
        _vector_line(case, "a", lists[0], metadata={"vector": [9, 9], "k": "[1]"}),
        _vector_line(case, "b", lists[1]),
    ]
    bad_vectors = {
        "too large for float32": ("[" + ", ".join(["1e39"] * width) + "]", InvalidVectorError),
        "not a JSON number": ("[1.5.2" + ", 0.5" * (width - 1) + "]", ImportLineError),
        "another width": ("[" + ", ".join(["0.5"] * (width + 1)) + "]", DimensionMismatchError),
    }
    with tempfile.TemporaryDirectory() as directory:
        for what, (vector, cause) in bad_vectors.items():
            lines = [*good, _vector_line(case, "c", vector)]
            path = _write(directory, "vectors.jsonl", lines)
            error = await _raises(
                ImportLineError, import_entries(store, read_jsonl(path)), f"a vector {what}"
            )
            _check(getattr(error, "line", None) == 3, f"{what}: names line 3: {error}")
            _check(
                isinstance(error, cause) or isinstance(error.__cause__, cause),
                f"{what}: {error!r} comes from {cause.__name__}",
            )
            known = await store.known_ids(_scope(case), ["a", "b", "c"])
            _check(known == set(), f"{what}: nothing of the batch written: {sorted(known)}")
        path = _write(directory, "vectors.jsonl", good)
        report = await import_entries(store, read_jsonl(path))
        _check(report.inserted == 2, f"two good lines stored: {report}")
        (stored,) = await store.get_entries(_scope(case), ["a"])
        _check(
            dict(stored.metadata) == {"vector": [9, 9], "k": "[1]"},
            f"the metadata's vector key is the metadata's: {stored.metadata}",
        )
        found = await store.search(
            _scope(case),
            SearchRequest(
                vector=rows[0],
                terms=frozenset(),
                limit=1,
                filter=RecallFilter(now=datetime.now(UTC)),
            ),
        )
        nearest = found.candidates[0]
        _check(nearest.id == "a", f"the stored vector is the line's: {nearest.id}")
        _check(
            np.allclose(nearest.vector, rows[0], atol=1e-6),
            "the stored vector is exactly the given one",
        )
        huge = bad_vectors["too large for float32"][0]
        again = [good[0], _vector_line(case, "b", huge, unknown=1)]
        path = _write(directory, "again.jsonl", again)
        report = await import_entries(store, read_jsonl(path))
        _check(
            (report.inserted, report.existing) == (0, 2),
            f"a re-import leaves stored ids as stored, their lines unread: {report}",
        )
        path = _write(directory, "again.jsonl", [*again, _vector_line(case, "d", huge)])
        error = await _raises(
            ImportLineError, import_entries(store, read_jsonl(path)), "a new id's bad vector"
        )
        _check(
            getattr(error, "line", None) == 3, f"a re-import still names a new id's line: {error}"
        )
        _check(not await store.known_ids(_scope(case), ["d"]), "and writes nothing of it")
        odd = json.dumps(_line(case, "t-1", "odd", id="a\u0000b"))
        path = _write(directory, "again.jsonl", [*again, odd])
        error = await _raises(
            ImportLineError, import_entries(store, read_jsonl(path)), "an id no store can hold"
        )
        _check(getattr(error, "line", None) == 3, f"it is named, not asked about: {error}")


IMPORT_SOURCE_CHECKS = {
    "import_checks_the_vectors_of_new_ids_only": import_checks_the_vectors_of_new_ids_only,
    "import_names_a_files_physical_lines": import_names_a_files_physical_lines,
    "import_messages_never_repeat_values": import_messages_never_repeat_values,
    "import_stores_a_repeated_line_once": import_stores_a_repeated_line_once,
    "import_refuses_mem0_metadata_that_is_no_object": (
        import_refuses_mem0_metadata_that_is_no_object
    ),
    "import_sets_aside_a_checkpoint_of_another_target_or_source": (
        import_sets_aside_a_checkpoint_of_another_target_or_source
    ),
    "import_refuses_an_over_long_line": import_refuses_an_over_long_line,
}
