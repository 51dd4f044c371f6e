"""Write speed, side by side in one run: ``remember(wait=True)`` against a hand-written asyncpg
``INSERT ... SELECT FROM unnest(...)``, and the bulk import against a hand-written binary ``COPY``,
each into a table of the same shape with the same indexes; the re-import; peak RSS.

    OPENBLAS_NUM_THREADS=1 python benchmarks/import_speed.py --rows 100000
    python benchmarks/import_speed.py --rows 100000 --rss 100000,1000000   # peak RSS, subprocesses
    python benchmarks/import_speed.py --files --file-rows 100000,1000000    # the CLI on files

``--files``: what users run, ``prism-memory import FILE`` (a subprocess), on a generated JSONL file
(vectors as JSON lists, rows interleaved over 1,000 Zipf-sized threads) and an ``export`` file,
against a hand-written binary ``COPY`` of the same rows read from the same file (a subprocess too)
into a table with the same indexes and into a bare table; the re-import; the CLI's peak RSS.

Run on demand (not a test). Ratios come from the same run, rounds alternating between contenders
so a change in a shared machine's load falls on both alike. Needs the ``postgres-embedded`` extra
(or ``--url``).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import resource
import struct
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import asyncpg
import numpy as np
from _common import DIM, LookupEmbedder, database, server_cpu_seconds, unit_vectors
from _import_files import files_round
from _import_files import hand_copy as hand_copy_file

from prism_memory import create_memory
from prism_memory.importing import import_entries
from prism_memory.lexical import tokenize
from prism_memory.postgres import create_postgres_memory_stores
from prism_memory.postgres._engine import encode_vectors
from prism_memory.postgres._engine import register_vector_codec as register_codec

WORDS = [f"w{i}" for i in range(2000)]
TENANT = "bench"


def text_of(i: int) -> str:
    """Twelve words of a 2,000-word vocabulary and a unique one, cheaply and deterministically."""
    return " ".join(WORDS[(i * 7919 + k * 104_729) % len(WORDS)] for k in range(12)) + f" n{i}"


def tsvector_binary(terms: list[str]) -> bytes:
    """PostgreSQL's binary ``tsvector``: count, then each lexeme NUL-terminated, no positions."""
    return struct.pack(">i", len(terms)) + b"".join(t.encode() + b"\0\0\0" for t in terms)


async def copy_table(conn: asyncpg.Connection, schema: str, name: str) -> str:
    """An empty table like the entries table, with the same indexes."""
    target = f'"{schema}"."{name}"'
    await conn.execute(f'CREATE TABLE {target} (LIKE "{schema}".semantic_memory INCLUDING ALL)')
    return target


# ---- remember(wait=True) vs INSERT ... SELECT FROM unnest --------------------------------------

HAND_INSERT = (
    "INSERT INTO {target} (tenant_id, resource_id, thread_id, id, text, role, metadata, "
    "consent_explicit, consent_source, consent_scope, consent_visible, sequence, occurred_at, "
    "created_at, written_at, importance, legal_hold, status, revision, attempts, embedding, "
    "embedding_model, text_tsv, term_count) "
    "SELECT $1, $2, $3, i.id, i.text, 'user', '{{}}'::jsonb, false, 'user', 'thread', true, "
    "i.seq, $4, $4, $4, 1.0, false, 'indexed', 1, 0, i.embedding, NULL, "
    "array_to_tsvector(string_to_array(i.terms, ' ')), i.term_count "
    "FROM unnest($5::text[], $6::text[], $7::bigint[], $8::vector[], $9::text[], $10::int[]) "
    "AS i(id, text, seq, embedding, terms, term_count)"
)


async def hand_batches(
    pool: asyncpg.Pool, target: str, thread: str, texts: list[str], table: dict[str, Any]
) -> None:
    """What remember(wait=True) does, written by hand: per 128-row batch, embed (a dict lookup),
    tokenize, one INSERT ... SELECT FROM unnest in its own transaction."""
    statement = HAND_INSERT.format(target=target)
    async with pool.acquire() as conn:
        for start in range(0, len(texts), 128):
            batch = texts[start : start + 128]
            vectors = encode_vectors(np.stack([table[t] for t in batch]))
            words = [tokenize(t) for t in batch]
            await conn.execute(
                statement,
                TENANT,
                "user",
                thread,
                datetime.now(UTC),
                [f"h{start + k}" for k in range(len(batch))],
                batch,
                list(range(start, start + len(batch))),
                vectors,
                [" ".join(sorted(set(w))) for w in words],
                [len(w) for w in words],
            )


async def remember_batches(make: Any, thread: str, texts: list[str]) -> None:
    async with make(thread) as memory:
        for start in range(0, len(texts), 128):
            await memory.remember([{"text": t} for t in texts[start : start + 128]], wait=True)


async def remember_round(
    args: argparse.Namespace, url: str, libpq: str, schema: str
) -> dict[str, Any]:
    texts = [text_of(i) for i in range(args.remember_rows)]
    table = dict(zip(texts, unit_vectors(np.random.default_rng(1), len(texts)), strict=True))
    embedder = LookupEmbedder(table)
    # both sides hold 8 connections: the stores' default pool (5) closes the connections beyond
    # it as they come back, so 8 writers at once would open one per write (docs/postgres.md)
    stores = await create_postgres_memory_stores(
        url, schema=schema, dimension=DIM, engine_options={"pool_size": 8}
    )
    pool = await asyncpg.create_pool(libpq, min_size=8, max_size=8, init=register_codec)
    async with pool.acquire() as conn:
        target = await copy_table(conn, schema, "hand_target")

    def make(thread: str) -> Any:
        return create_memory(
            tenant_id=TENANT,
            resource_id="user",
            thread_id=thread,
            embedder=embedder,
            vector_store=stores.vector_store,
            working_store=stores.working_store,
        )

    figures: dict[str, list[float]] = {"prism 1": [], "hand 1": [], "prism 8": [], "hand 8": []}
    # CPU milliseconds per 128-row batch, this process's and the server's: on a machine of few
    # cores the two together bound the rate of 8 writers
    cpu: dict[str, dict[str, list[float]]] = {
        name: {"client": [], "server": []} for name in figures
    }
    batches = -(-len(texts) // 128)
    for text in texts:  # the stemmer's memo warm for both sides (whoever ran first paid it)
        tokenize(text)
    try:
        for round_ in range(args.rounds):
            # who goes first alternates, so a drift in the machine's load falls on both alike
            for kind in ("prism", "hand") if round_ % 2 == 0 else ("hand", "prism"):
                for width in (1, 8):
                    chunks = [texts[k::width] for k in range(width)]
                    client, server = time.process_time(), server_cpu_seconds()
                    start = time.perf_counter()
                    await asyncio.gather(
                        *(
                            remember_batches(make, f"r{round_}-{width}-{k}", chunk)
                            if kind == "prism"
                            else hand_batches(pool, target, f"r{round_}-{width}-{k}", chunk, table)
                            for k, chunk in enumerate(chunks)
                        )
                    )
                    figures[f"{kind} {width}"].append(len(texts) / (time.perf_counter() - start))
                    used = cpu[f"{kind} {width}"]
                    used["client"].append((time.process_time() - client) * 1000 / batches)
                    after = server_cpu_seconds()
                    if server is not None and after is not None:
                        used["server"].append((after - server) * 1000 / batches)
    finally:
        await pool.close()
        await stores.close()
    return {
        **{name: [round(v) for v in values] for name, values in figures.items()},
        "cpu_ms_per_batch": {
            name: {side: [round(v, 2) for v in values] for side, values in sides.items()}
            for name, sides in cpu.items()
        },
    }


# ---- import vs binary COPY -----------------------------------------------------------------------


def rows(count: int, seed: int = 7) -> Iterator[dict[str, Any]]:
    """``count`` entries over 1,000 threads of 100 users, each with its 384-d vector (streamed)."""
    rng = np.random.default_rng(seed)
    for start in range(0, count, 1000):
        block = unit_vectors(rng, min(1000, count - start))
        for k, vector in enumerate(block):
            i = start + k
            yield {
                "tenant_id": TENANT,
                "resource_id": f"u{i % 100}",
                "thread_id": f"t{i % 1000}",
                "id": f"e{i}",
                "text": text_of(i),
                "vector": vector,
                "embedding_model": "bench-model",
            }


async def hand_copy(conn: asyncpg.Connection, target: str, count: int) -> float:
    """The same rows by hand: one binary COPY into a table with the same indexes."""
    await conn.set_type_codec(
        "tsvector", schema="pg_catalog", encoder=tsvector_binary, decoder=bytes, format="binary"
    )
    await register_codec(conn)
    now = datetime.now(UTC)
    columns = [
        "tenant_id", "resource_id", "thread_id", "id", "text", "role", "metadata",
        "consent_explicit", "consent_source", "consent_scope", "consent_visible", "sequence",
        "occurred_at", "created_at", "written_at", "importance", "legal_hold", "status",
        "revision", "attempts", "embedding", "embedding_model", "term_count", "text_tsv",
    ]  # fmt: skip
    start = time.perf_counter()

    def records() -> Iterator[tuple[Any, ...]]:
        for i, row in enumerate(rows(count)):
            words = tokenize(row["text"])
            yield (
                row["tenant_id"], row["resource_id"], row["thread_id"], row["id"], row["text"],
                "user", "{}", False, "user", "thread", True, i // 1000, now, now, now, 1.0,
                False, "indexed", 1, 0, encode_vectors([row["vector"]])[0], "bench-model",
                len(words), sorted(set(words)),
            )  # fmt: skip

    await conn.copy_records_to_table(
        target.split(".")[1].strip('"'),
        schema_name=target.split(".")[0].strip('"'),
        columns=columns,
        records=records(),
    )
    return count / (time.perf_counter() - start)


async def import_round(
    args: argparse.Namespace, url: str, libpq: str, schema: str
) -> dict[str, Any]:
    figures: dict[str, list[float]] = {"import": [], "re-import": [], "copy": []}
    for round_ in range(args.rounds):
        for kind in ("import", "copy"):
            sub = f"{schema}_{kind}_{round_}"
            stores = await create_postgres_memory_stores(url, schema=sub, dimension=DIM)
            try:
                if kind == "import":
                    start = time.perf_counter()
                    report = await import_entries(stores.vector_store, rows(args.rows))
                    figures["import"].append(args.rows / (time.perf_counter() - start))
                    print(f"round {round_} import {figures['import'][-1]:.0f}", file=sys.stderr)
                    assert report.inserted == args.rows, report
                    start = time.perf_counter()
                    again = await import_entries(stores.vector_store, rows(args.rows))
                    figures["re-import"].append(args.rows / (time.perf_counter() - start))
                    assert again.inserted == 0, again
                    assert again.existing == args.rows, again
                else:
                    conn = await asyncpg.connect(libpq)
                    try:
                        target = await copy_table(conn, sub, "copy_target")
                        figures["copy"].append(await hand_copy(conn, target, args.rows))
                        print(f"round {round_} copy {figures['copy'][-1]:.0f}", file=sys.stderr)
                    finally:
                        await conn.close()
            finally:
                conn = await asyncpg.connect(libpq)
                await conn.execute(f'DROP SCHEMA "{sub}" CASCADE')
                await conn.close()
                await stores.close()
    return {name: [round(v) for v in values] for name, values in figures.items()}


# ---- peak RSS ------------------------------------------------------------------------------------


def peak_rss_mib() -> float:
    return round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)


async def rss_child(url: str, count: int) -> None:
    """Import ``count`` generated rows; print the peak RSS so far every 100,000 rows (to stderr,
    so a run stopped early still shows how far it stayed flat) and at the end (to stdout)."""
    schema = f"rss_{uuid.uuid4().hex[:8]}"
    stores = await create_postgres_memory_stores(url, schema=schema, dimension=DIM)
    marks = iter(range(100_000, count + 1, 100_000))
    mark = next(marks, None)
    started = time.perf_counter()

    def progress(report: Any) -> None:
        nonlocal mark
        while mark is not None and report.inserted >= mark:
            seconds = round(time.perf_counter() - started)
            line = {"rows": mark, "peak_rss_mib": peak_rss_mib(), "seconds": seconds}
            print(json.dumps(line), file=sys.stderr, flush=True)
            mark = next(marks, None)

    try:
        report = await import_entries(stores.vector_store, rows(count), on_progress=progress)
        assert report.inserted == count, report
    finally:
        await stores.close()
    print(json.dumps({"rows": count, "peak_rss_mib": peak_rss_mib()}))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--url", default=os.environ.get("PRISM_BENCH_URL"))
    parser.add_argument("--rows", type=int, default=100_000)
    parser.add_argument("--remember-rows", type=int, default=12288)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--rss", default="", help="comma-separated row counts for peak RSS")
    parser.add_argument("--skip", default="", help="comma-separated: remember,import")
    parser.add_argument("--rss-child", type=int, default=0, help=argparse.SUPPRESS)
    parser.add_argument(
        "--files", action="store_true", help="the file mode only: the CLI on generated files"
    )
    parser.add_argument("--file-rows", default="100000", help="comma-separated row counts")
    parser.add_argument("--file-formats", default="jsonl,export", help="jsonl and/or export")
    parser.add_argument("--file-dir", default="/tmp/prism-import-bench", help="where files go")
    parser.add_argument("--hand-copy", default="", help=argparse.SUPPRESS)
    parser.add_argument("--target", default="", help=argparse.SUPPRESS)
    parser.add_argument("--format", default="jsonl", help=argparse.SUPPRESS)
    args = parser.parse_args()
    with database(args.url) as (url, libpq):
        if args.rss_child:
            asyncio.run(rss_child(url, args.rss_child))
            return
        if args.hand_copy:
            asyncio.run(hand_copy_file(libpq, args.target, Path(args.hand_copy), args.format))
            return
        if args.files:
            print(json.dumps(files_round(args, url, libpq), indent=2))
            return
        schema = f"bench_{uuid.uuid4().hex[:8]}"
        result: dict[str, Any] = {"rows": args.rows, "remember_rows": args.remember_rows}
        skip = set(args.skip.split(","))
        if "remember" not in skip:
            result["remember"] = asyncio.run(remember_round(args, url, libpq, schema))
        if "import" not in skip:
            result["import"] = asyncio.run(import_round(args, url, libpq, schema))
        for count in [int(c) for c in args.rss.split(",") if c]:
            done = subprocess.run(
                [sys.executable, __file__, "--url", url, "--rss-child", str(count)],
                capture_output=True,
                text=True,
                check=True,
            )
            result.setdefault("rss", []).append(json.loads(done.stdout.strip().splitlines()[-1]))
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
