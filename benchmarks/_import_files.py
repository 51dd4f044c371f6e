"""The file mode of ``import_speed.py``: what users run -- ``prism-memory import FILE`` as a
subprocess -- on a JSONL file with vectors as JSON lists (and on an ``export`` file), against a
hand-written binary ``COPY`` of the same rows read from the same file, into a table of the same
shape with the same indexes and into a bare table. Not a benchmark itself."""

from __future__ import annotations

import asyncio
import json
import os
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
from _common import DIM, postmaster_pid, server_cpu_seconds, unit_vectors, zipf_sizes

from prism_memory.lexical import tokenize
from prism_memory.postgres import create_postgres_memory_stores
from prism_memory.postgres._engine import encode_vectors
from prism_memory.postgres._engine import register_vector_codec as register_codec

THREADS = 1000
MODEL = "bench-model"
WORDS = [f"w{i}" for i in range(2000)]
_BLOCK = 1000


def text_of(i: int) -> str:
    """Twelve words of a 2,000-word vocabulary and a unique one (as ``import_speed.text_of``)."""
    return " ".join(WORDS[(i * 7919 + k * 104_729) % len(WORDS)] for k in range(12)) + f" n{i}"


def thread_order(count: int, seed: int) -> np.ndarray:
    """The thread of each row: 1,000 threads of Zipf sizes (1/rank), rows interleaved at random."""
    threads = min(THREADS, count)
    order = np.repeat(np.arange(threads), zipf_sizes(count, threads))
    np.random.default_rng(seed).shuffle(order)
    return order


def scope_of(thread: int) -> tuple[str, str, str]:
    """10 tenants x 10 resources; thread ``k`` belongs to one of them."""
    return f"tenant{thread % 10}", f"user{thread // 10 % 10}", f"thread{thread}"


def write_file(path: Path, count: int, fmt: str, seed: int = 7) -> None:
    """``count`` rows in the import's JSONL format (vectors as JSON lists of 7-decimal floats,
    ~4.5 KB a line: the issue's 216 MB for 50,000 lines) or as ``prism-memory export`` writes
    them (one exported entry per line, ``MemoryRecord.to_json()``: explicit consent, a sequence,
    no vector -- an export holds none)."""
    rng = np.random.default_rng(seed)
    order = thread_order(count, seed)
    sequences = [0] * THREADS
    now = datetime.now(UTC).isoformat()
    with path.open("w", encoding="utf-8") as out:
        for start in range(0, count, _BLOCK):
            size = min(_BLOCK, count - start)
            block = np.round(unit_vectors(rng, size).astype(np.float64), 7).tolist()
            lines = []
            for k, vector in enumerate(block):
                i = start + k
                thread = int(order[i])
                tenant, resource, thread_id = scope_of(thread)
                fields: dict[str, Any] = {
                    "tenant_id": tenant,
                    "resource_id": resource,
                    "thread_id": thread_id,
                    "id": f"e{i}",
                    "text": text_of(i),
                }
                if fmt == "jsonl":
                    fields["vector"] = vector
                else:
                    fields.update(
                        role="user",
                        metadata={},
                        consent={
                            "source": "user",
                            "scope": "thread",
                            "visible": True,
                            "granted_at": None,
                            "revoked_at": None,
                        },
                        sequence=sequences[thread],
                        occurred_at=now,
                        created_at=now,
                        importance=1.0,
                        lineage=None,
                    )
                    sequences[thread] += 1
                lines.append(json.dumps(fields))
            out.write("\n".join(lines) + "\n")


# ---- the hand-written COPY (run in a child process, as the CLI is) ------------------------------

COLUMNS = [
    "tenant_id", "resource_id", "thread_id", "id", "text", "role", "metadata",
    "consent_explicit", "consent_source", "consent_scope", "consent_visible", "sequence",
    "occurred_at", "created_at", "written_at", "importance", "legal_hold", "status",
    "revision", "attempts", "embedding", "embedding_model", "term_count", "text_tsv",
]  # fmt: skip


def _tsvector_binary(terms: list[str]) -> bytes:
    return len(terms).to_bytes(4, "big") + b"".join(t.encode() + b"\0\0\0" for t in terms)


def hand_records(path: Path, fmt: str) -> Iterator[tuple[Any, ...]]:
    """The rows of the file as the table holds them, read, parsed (``json.loads`` per line),
    tokenized and numbered per thread by hand; vectors encoded 1,000 rows at a time."""
    now = datetime.now(UTC)
    sequences: dict[tuple[str, str, str], int] = {}
    with path.open("rb") as handle:
        while True:
            block = [json.loads(line) for _, line in zip(range(_BLOCK), handle, strict=False)]
            if not block:
                return
            vectors: list[bytes | None] = [None] * len(block)
            if fmt == "jsonl":
                vectors = list(encode_vectors(np.array([row["vector"] for row in block], ">f4")))
            for row, vector in zip(block, vectors, strict=True):
                key = (row["tenant_id"], row["resource_id"], row["thread_id"])
                sequence = row.get("sequence")
                if sequence is None:
                    sequence = sequences.get(key, -1) + 1
                sequences[key] = max(sequence, sequences.get(key, -1))
                words = tokenize(row["text"])
                consent = row.get("consent")
                explicit, consent = consent is not None, consent or {}
                yield (
                    *key, row["id"], row["text"], row.get("role", "user"),
                    json.dumps(row.get("metadata") or {}), explicit,
                    consent.get("source", "user"), consent.get("scope", "thread"), True,
                    sequence, now, now, now, float(row.get("importance", 1.0)), False,
                    "indexed" if vector is not None else "pending", 1, 0, vector,
                    MODEL if vector is not None else None, len(words), sorted(set(words)),
                )  # fmt: skip


async def hand_copy(libpq: str, target: str, path: Path, fmt: str) -> None:
    """One binary ``COPY`` of the file's rows into ``target`` (``schema.table``)."""
    conn = await asyncpg.connect(libpq)
    try:
        await conn.set_type_codec(
            "tsvector",
            schema="pg_catalog",
            encoder=_tsvector_binary,
            decoder=bytes,
            format="binary",
        )
        await register_codec(conn)
        schema, table = target.split(".")
        await conn.copy_records_to_table(
            table, schema_name=schema, columns=COLUMNS, records=hand_records(path, fmt)
        )
    finally:
        await conn.close()


# ---- the runs -----------------------------------------------------------------------------------


def run_child(command: list[str]) -> tuple[float, float]:
    """Run ``command`` to its end; its wall seconds and its CPU seconds (user + system)."""
    start = time.perf_counter()
    child = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    assert child.stderr is not None
    err = child.stderr.read()
    _, status, usage = os.wait4(child.pid, 0)
    seconds = time.perf_counter() - start
    child.returncode = os.waitstatus_to_exitcode(status)
    if child.returncode:
        raise SystemExit(f"{command[:4]} failed:\n{err[-3000:]}")
    return seconds, usage.ru_utime + usage.ru_stime


def cli(url: str, path: Path, fmt: str, schema: str, state: Path) -> list[str]:
    command = [sys.executable, "-m", "prism_memory", "import", str(path), "--url", url]
    command += ["--schema", schema, "--dimension", str(DIM), "--state", str(state)]
    command += ["--format", fmt]
    return [*command, "--model", MODEL] if fmt == "jsonl" else command


def timed_cli(url: str, path: Path, fmt: str, schema: str) -> tuple[float, float, float, str]:
    """The CLI's wall seconds, CPU seconds and peak RSS (MiB), measured with ``wait4`` on the
    child itself, and what it printed."""
    state = path.with_name(f"{schema}.state.json")
    state.unlink(missing_ok=True)
    command = cli(url, path, fmt, schema, state)
    start = time.perf_counter()
    child = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    assert child.stdout is not None
    out = child.stdout.read()
    _, status, usage = os.wait4(child.pid, 0)
    seconds = time.perf_counter() - start
    child.returncode = os.waitstatus_to_exitcode(status)
    if child.returncode:
        raise SystemExit(f"prism-memory import failed ({child.returncode}): {out[-2000:]}")
    return seconds, usage.ru_utime + usage.ru_stime, usage.ru_maxrss / 1024, out.strip()


async def server_pid(libpq: str) -> int | None:
    conn = await asyncpg.connect(libpq)
    try:
        return await postmaster_pid(conn)
    finally:
        await conn.close()


async def prepare_schema(url: str, libpq: str, schema: str) -> None:
    """The library's tables in ``schema`` (as ``prism-memory migrate`` makes them), and two hand
    targets: ``copy_same`` (LIKE the entries table INCLUDING ALL: the same indexes) and
    ``copy_bare`` (its columns only); autovacuum off on the three."""
    stores = await create_postgres_memory_stores(url, schema=schema, dimension=DIM)
    await stores.close()
    conn = await asyncpg.connect(libpq)
    try:
        await conn.execute(
            f'CREATE TABLE "{schema}".copy_same (LIKE "{schema}".semantic_memory INCLUDING ALL);'
            f'CREATE TABLE "{schema}".copy_bare (LIKE "{schema}".semantic_memory)'
        )
        # no autovacuum on any of the three: one contender's 100k new rows would otherwise be
        # vacuumed while the next one runs (seen: the server's CPU per imported row x4)
        for table in ("semantic_memory", "copy_same", "copy_bare"):
            await conn.execute(
                f'ALTER TABLE "{schema}".{table} SET (autovacuum_enabled = false, '
                "toast.autovacuum_enabled = false)"
            )
    finally:
        await conn.close()


async def drop_schema(libpq: str, schema: str) -> None:
    conn = await asyncpg.connect(libpq)
    try:
        await conn.execute(f'DROP SCHEMA "{schema}" CASCADE')
    finally:
        await conn.close()


def file_round(
    url: str, libpq: str, path: Path, fmt: str, count: int, round_: int, figures: dict[str, Any]
) -> None:
    """One round on one file: the CLI import and its re-import, the hand ``COPY`` into the same
    table and into the bare one, in an order that alternates between rounds."""
    schema = f"bench_files_{uuid.uuid4().hex[:8]}"
    asyncio.run(prepare_schema(url, libpq, schema))
    pid = asyncio.run(server_pid(libpq))
    here = Path(__file__).resolve()
    try:
        kinds = ["cli", "same", "bare"]
        for kind in kinds if round_ % 2 == 0 else kinds[::-1]:
            server = server_cpu_seconds(pid)
            if kind == "cli":
                seconds, cpu, peak, out = timed_cli(url, path, fmt, schema)
                assert f"imported {count} new" in out, out
                figures["cli"].append(round(count / seconds))
                figures["cli_peak_rss_mib"].append(round(peak, 1))
                used = server_cpu_seconds(pid)
                seconds, again_cpu, _, out = timed_cli(url, path, fmt, schema)
                assert "imported 0 new" in out, out
                figures["re-import"].append(round(count / seconds))
                rows = figures["cpu_us_per_row"]
                rows["re-import client"].append(round(again_cpu / count * 1e6))
                after = server_cpu_seconds(pid)
                if used is not None and after is not None:
                    rows["re-import server"].append(round((after - used) / count * 1e6))
            else:
                target = f"{schema}.copy_{kind}"
                seconds, cpu = run_child(
                    [sys.executable, str(here.with_name("import_speed.py")), "--url", url,
                     "--hand-copy", str(path), "--target", target, "--format", fmt]
                )  # fmt: skip
                figures[f"copy {kind}"].append(round(count / seconds))
                used = server_cpu_seconds(pid)
            # CPU per row: the child's (interpreter start included) and the server's meanwhile
            figures["cpu_us_per_row"][f"{kind} client"].append(round(cpu / count * 1e6))
            if server is not None and used is not None:
                figures["cpu_us_per_row"][f"{kind} server"].append(
                    round((used - server) / count * 1e6)
                )
            print(f"{fmt} round {round_} {kind}: {figures}", file=sys.stderr, flush=True)
    finally:
        asyncio.run(drop_schema(libpq, schema))


def startup_seconds(url: str, libpq: str, directory: Path) -> float:
    """The CLI's fixed cost: ``prism-memory import`` of a one-line file into a ready schema."""
    schema = f"bench_start_{uuid.uuid4().hex[:8]}"
    asyncio.run(prepare_schema(url, libpq, schema))
    one = directory / "one.jsonl"
    write_file(one, 1, "jsonl")
    try:
        return round(timed_cli(url, one, "jsonl", schema)[0], 2)
    finally:
        asyncio.run(drop_schema(libpq, schema))
        one.unlink(missing_ok=True)


def files_round(args: Any, url: str, libpq: str) -> dict[str, Any]:
    """The file mode: per format and row count, ``--rounds`` rounds; rows/s and ratios."""
    directory = Path(args.file_dir)
    directory.mkdir(parents=True, exist_ok=True)
    result: dict[str, Any] = {
        "load_average_before": os.getloadavg(),
        "cli_startup_s": startup_seconds(url, libpq, directory),
    }
    for fmt in args.file_formats.split(","):
        for count in [int(c) for c in args.file_rows.split(",")]:
            path = directory / f"bench-{count}.{fmt}.jsonl"
            started = time.perf_counter()
            write_file(path, count, fmt)
            size, generated = path.stat().st_size, time.perf_counter() - started
            figures: dict[str, Any] = {
                "cli": [], "re-import": [], "copy same": [], "copy bare": [],
                "cli_peak_rss_mib": [],
                "cpu_us_per_row": {
                    f"{kind} {side}": [] for kind in ("cli", "re-import", "same", "bare")
                    for side in ("client", "server")
                },
            }  # fmt: skip
            rounds = args.rounds if count < 1_000_000 else 1
            try:
                for round_ in range(rounds):
                    file_round(url, libpq, path, fmt, count, round_, figures)
            finally:
                path.unlink(missing_ok=True)
            figures["ratios"] = {
                "cli / copy same": [
                    round(a / b, 2)
                    for a, b in zip(figures["cli"], figures["copy same"], strict=True)
                ],
                "cli / copy bare": [
                    round(a / b, 2)
                    for a, b in zip(figures["cli"], figures["copy bare"], strict=True)
                ],
                "re-import / cli": [
                    round(a / b, 2)
                    for a, b in zip(figures["re-import"], figures["cli"], strict=True)
                ],
            }
            figures["file_mb"] = round(size / 1e6)
            figures["generated_in_s"] = round(generated)
            figures["load_average_after"] = os.getloadavg()
            result[f"{fmt} {count}"] = figures
    return result
