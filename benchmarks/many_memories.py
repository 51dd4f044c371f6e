"""Many open memories on one PostgreSQL store: what their indexing costs the database.

Opens ``--memories`` memories (one thread each) on one store with one free embedder, remembers
``--writes`` single-row entries through each (``--concurrency`` calls in flight), waits until every
row is indexed, then leaves them open and idle for ``--idle-seconds``, and closes them. Reports:

* transactions: the library's own (SQLAlchemy commit / rollback events, per phase; statements
  sent to the asyncpg driver directly are not seen) and the server's (``pg_stat_database``
  ``xact_commit`` / ``xact_rollback`` deltas over the whole run, read after the statistics
  settle: the total to compare);
* the connection pool: peak overflow, peak checked-out connections, pool timeouts, failed
  ``remember()`` calls and failed indexing iterations (logged by ``prism_memory.indexing``);
* rows/s until every row is indexed; claim statements per minute while idle (the idle polls);
  indexing tasks running.

``--before DIR`` first runs the same measurement, in a subprocess on the same server, with
``prism_memory`` imported from another checkout (for example main's tree, exported with
``mkdir -p /tmp/main && git archive main | tar -x -C /tmp/main``), and prints both side by side.

    .venv/bin/python benchmarks/many_memories.py                       # this checkout, 1,000 memories
    .venv/bin/python benchmarks/many_memories.py --before /tmp/main    # main, then this checkout
    .venv/bin/python benchmarks/many_memories.py --memories 200 --idle-seconds 10
"""

from __future__ import annotations

import os

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import sys

# Run from a checkout without installing: the repository root goes first on the path, or with
# --library DIR another checkout (the "before" side of a comparison).
sys.path.insert(
    0,
    os.path.abspath(sys.argv[sys.argv.index("--library") + 1])
    if "--library" in sys.argv
    else os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
)

import argparse
import asyncio
import contextlib
import json
import logging
import subprocess
import tempfile
import time
import uuid
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from sqlalchemy import event

import prism_memory
from prism_memory import HashEmbedder, create_memory
from prism_memory.postgres import create_postgres_memory_stores

DIMENSION = 64


@dataclass
class Phase:
    """What the library sent during one phase (SQLAlchemy events)."""

    seconds: float = 0.0
    commits: int = 0
    rollbacks: int = 0
    checkouts: int = 0
    connects: int = 0
    statements: int = 0
    claims: int = 0
    peak_checked_out: int = 0


@dataclass
class Result:
    library: str
    memories: int
    rows: int
    load: Phase = field(default_factory=Phase)
    idle: Phase = field(default_factory=Phase)
    close: Phase = field(default_factory=Phase)
    rows_per_second: float = 0.0
    claims_per_minute_idle: float = 0.0
    statements_per_minute_idle: float = 0.0
    server_commits: int = 0
    server_rollbacks: int = 0
    peak_overflow: int = 0
    peak_checked_out: int = 0
    pool_size: int = 0
    pool_timeouts: int = 0
    failed_remembers: int = 0
    failed_iterations: int = 0
    indexing_tasks: int = 0


class _Counter:
    """Counts the engine's transactions, checkouts and statements into the current phase."""

    def __init__(self, engine: Any) -> None:
        self.phase = Phase()
        sync = engine.sync_engine
        event.listen(sync, "commit", self._commit)
        event.listen(sync, "rollback", self._rollback)
        event.listen(sync, "before_cursor_execute", self._statement)
        event.listen(sync.pool, "checkout", self._checkout)
        event.listen(sync.pool, "connect", self._connect)

    def _commit(self, *_: Any) -> None:
        self.phase.commits += 1

    def _rollback(self, *_: Any) -> None:
        self.phase.rollbacks += 1

    def _checkout(self, *_: Any) -> None:
        self.phase.checkouts += 1

    def _connect(self, *_: Any) -> None:
        self.phase.connects += 1  # an overflow connection is opened anew (and closed on return)

    def _statement(self, _conn: Any, _cursor: Any, statement: str, *_: Any) -> None:
        self.phase.statements += 1
        if "FOR UPDATE SKIP LOCKED" in statement:  # a claim: the idle poll's statement
            self.phase.claims += 1


class _SlowEmbedder:
    """A free embedder behind a fixed latency per call (a remote embedding API's round trip)."""

    def __init__(self, inner: Any, seconds: float) -> None:
        self._inner = inner
        self._seconds = seconds
        self.dimensions = inner.dimensions

    async def embed(self, texts: Any) -> Any:
        await asyncio.sleep(self._seconds)
        return await self._inner.embed(texts)


class _Failures(logging.Handler):
    """Counts failed indexing iterations and pool timeouts the library logs."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.iterations = 0
        self.timeouts = 0

    def emit(self, record: logging.LogRecord) -> None:
        message = record.getMessage()
        if "indexing iteration failed" in message:
            self.iterations += 1
        if "QueuePool limit" in message or "TimeoutError" in message:
            self.timeouts += 1


async def _server_xacts(url: str) -> tuple[int, int]:
    import asyncpg

    dsn = url.replace("postgresql+asyncpg://", "postgresql://")
    connection = await asyncpg.connect(dsn)
    try:
        row = await connection.fetchrow(
            "SELECT xact_commit, xact_rollback FROM pg_stat_database "
            "WHERE datname = current_database()"
        )
        return int(row["xact_commit"]), int(row["xact_rollback"])
    finally:
        await connection.close()


async def measure(url: str, args: argparse.Namespace) -> Result:
    failures = _Failures()
    logging.getLogger("prism_memory").addHandler(failures)
    logging.getLogger("prism_memory").setLevel(logging.WARNING)
    schema = f"bench_many_{uuid.uuid4().hex[:10]}"
    engine = None
    if args.pool_size:  # the library's own engine, with a bigger pool
        from prism_memory.postgres._engine import create_engine

        engine = create_engine(url, pool_size=args.pool_size)
    stores = await create_postgres_memory_stores(
        None if engine else url, engine=engine, schema=schema, dimension=DIMENSION
    )
    engine = stores.vector_store.engine
    pool = engine.sync_engine.pool
    counter = _Counter(engine)
    result = Result(
        library=str(Path(prism_memory.__file__).parent.parent),
        memories=args.memories,
        rows=args.memories * args.writes,
        pool_size=pool.size(),
    )
    await asyncio.sleep(args.settle)  # other sessions' statistics reach pg_stat first
    commits0, rollbacks0 = await _server_xacts(url)

    stop = asyncio.Event()

    async def sample_pool() -> None:
        while not stop.is_set():
            result.peak_overflow = max(result.peak_overflow, pool.overflow())
            result.peak_checked_out = max(result.peak_checked_out, pool.checkedout())
            phase = counter.phase
            phase.peak_checked_out = max(phase.peak_checked_out, pool.checkedout())
            await asyncio.sleep(0.005)

    sampler = asyncio.create_task(sample_pool())
    embedder: Any = HashEmbedder(dimensions=DIMENSION)
    if args.embed_ms:
        embedder = _SlowEmbedder(embedder, args.embed_ms / 1000)
    memories = [
        create_memory(
            tenant_id="bench-tenant",
            resource_id=f"user-{i % 50}",
            thread_id=f"thread-{i}",
            embedder=embedder,
            vector_store=stores.vector_store,
            working_store=stores.working_store,
        )
        for i in range(args.memories)
    ]
    gate = asyncio.Semaphore(args.concurrency)
    done: list[Any] = []

    async def write(index: int, memory: Any, turn: int) -> None:
        async with gate:
            try:
                written = await memory.remember(
                    {"text": f"memory {index} remembers note {turn}"}, wait=args.wait
                )
            except Exception as exc:  # noqa: BLE001 - counted; a pool timeout is a finding
                result.failed_remembers += 1
                if "timeout" in repr(exc).lower() or "QueuePool" in repr(exc):
                    result.pool_timeouts += 1
                return
            done.append(written.done)

    started = time.perf_counter()
    for memory in memories:
        await memory.__aenter__()
    for turn in range(args.writes):
        await asyncio.gather(*(write(i, m, turn) for i, m in enumerate(memories)))
    outcomes = await asyncio.gather(*done, return_exceptions=True)
    result.load = counter.phase
    result.load.seconds = time.perf_counter() - started
    indexed = sum(len(o.indexed) for o in outcomes if not isinstance(o, BaseException))
    result.rows_per_second = indexed / result.load.seconds
    if indexed != result.rows - result.failed_remembers:
        print(f"warning: {indexed} rows indexed of {result.rows}", file=sys.stderr)

    counter.phase = Phase()
    result.indexing_tasks = sum(
        1 for task in asyncio.all_tasks() if task.get_name().startswith("prism-indexer")
    )
    idle_started = time.perf_counter()
    await asyncio.sleep(args.idle_seconds)
    result.idle = counter.phase
    result.idle.seconds = time.perf_counter() - idle_started
    result.claims_per_minute_idle = 60 * result.idle.claims / result.idle.seconds
    result.statements_per_minute_idle = 60 * result.idle.statements / result.idle.seconds

    counter.phase = result.close
    closing = time.perf_counter()
    for memory in memories:
        await memory.aclose()
    result.close.seconds = time.perf_counter() - closing
    stop.set()
    await sampler
    result.failed_iterations = failures.iterations
    result.pool_timeouts += failures.timeouts
    await stores.close()
    if args.pool_size:
        await engine.dispose()
    await asyncio.sleep(args.settle)
    commits1, rollbacks1 = await _server_xacts(url)
    result.server_commits = commits1 - commits0
    result.server_rollbacks = rollbacks1 - rollbacks0
    return result


def table(results: list[Result]) -> str:
    """A Markdown table, one column per measured library."""
    rows: list[tuple[str, Any]] = [
        ("memories open / rows remembered", lambda r: f"{r.memories:,} / {r.rows:,}"),
        ("indexing tasks running", lambda r: f"{r.indexing_tasks:,}"),
        ("rows/s until all indexed", lambda r: f"{r.rows_per_second:,.0f}"),
        ("load: seconds", lambda r: f"{r.load.seconds:.1f}"),
        ("load: commits / rollbacks (library)", lambda r: f"{r.load.commits:,} / {r.load.rollbacks:,}"),
        ("load: pool checkouts / statements", lambda r: f"{r.load.checkouts:,} / {r.load.statements:,}"),
        ("load: claim statements", lambda r: f"{r.load.claims:,}"),
        ("load: new connections (pool overflow churn)", lambda r: f"{r.load.connects:,}"),
        ("idle: claim statements per minute", lambda r: f"{r.claims_per_minute_idle:,.0f}"),
        ("idle: statements per minute", lambda r: f"{r.statements_per_minute_idle:,.0f}"),
        ("idle: commits / rollbacks (library)", lambda r: f"{r.idle.commits:,} / {r.idle.rollbacks:,}"),
        ("idle: peak connections checked out", lambda r: f"{r.idle.peak_checked_out}"),
        ("close all: seconds / commits", lambda r: f"{r.close.seconds:.1f} / {r.close.commits:,}"),
        ("server xact_commit / xact_rollback, whole run", lambda r: f"{r.server_commits:,} / {r.server_rollbacks:,}"),
        ("pool: size / peak overflow / peak checked out", lambda r: f"{r.pool_size} / {r.peak_overflow} / {r.peak_checked_out}"),
        ("pool timeouts / failed remember() / failed indexing iterations", lambda r: f"{r.pool_timeouts} / {r.failed_remembers} / {r.failed_iterations}"),
    ]  # fmt: skip
    names = [Path(r.library).name or r.library for r in results]
    lines = ["| | " + " | ".join(names) + " |", "| --- |" + " --- |" * len(results)]
    lines += [f"| {label} | " + " | ".join(cell(r) for r in results) + " |" for label, cell in rows]
    return "\n".join(lines)


def _before(directory: str, url: str, args: argparse.Namespace) -> Result:
    """Measure another checkout in a subprocess (its own imports) on the same server."""
    with tempfile.TemporaryDirectory() as scratch:
        out = Path(scratch) / "before.json"
        command = [sys.executable, os.path.abspath(__file__), "--library", directory]
        command += ["--url", url, "--json", str(out), *_shared_flags(args)]
        environment = {**os.environ, "PYTHONDONTWRITEBYTECODE": "1"}
        subprocess.run(command, check=True, env=environment)
        data = json.loads(out.read_text())
    for phase in ("load", "idle", "close"):
        data[phase] = Phase(**data[phase])
    return Result(**data)


def _shared_flags(args: argparse.Namespace) -> list[str]:
    flags = ["--memories", str(args.memories), "--writes", str(args.writes)]
    flags += ["--concurrency", str(args.concurrency), "--idle-seconds", str(args.idle_seconds)]
    flags += ["--settle", str(args.settle)]
    flags += ["--pool-size", str(args.pool_size)] if args.pool_size else []
    flags += ["--embed-ms", str(args.embed_ms)]
    return flags + (["--wait"] if args.wait else [])


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--memories", type=int, default=1000)
    parser.add_argument("--writes", type=int, default=3, help="remember() calls per memory")
    parser.add_argument("--concurrency", type=int, default=32, help="remember() calls in flight")
    parser.add_argument("--wait", action="store_true", help="remember(wait=True)")
    parser.add_argument("--pool-size", type=int, help="engine pool size (default: the library's)")
    parser.add_argument("--embed-ms", type=float, default=0.0, help="embedder latency per call")
    parser.add_argument("--idle-seconds", type=float, default=30.0)
    parser.add_argument("--settle", type=float, default=11.0, help="for pg_stat to catch up")
    parser.add_argument("--url", help="PostgreSQL URL (default: start an embedded server)")
    parser.add_argument("--library", help="import prism_memory from this checkout instead")
    parser.add_argument("--before", help="first measure this checkout, then this one")
    parser.add_argument("--json", help="write the result(s) as JSON here")
    args = parser.parse_args()
    server = None
    url = args.url
    if url is None:
        from prism_memory.postgres.embedded import start_embedded_postgres

        server = start_embedded_postgres()
        url = server.url
    try:
        results = [_before(args.before, url, args)] if args.before else []
        results.append(await measure(url, args))
    finally:
        if server is not None:
            server.close()
    if args.json:
        data = [asdict(r) for r in results]
        _write(args.json, json.dumps(data[0] if len(data) == 1 else data, indent=2))
    print(table(results))


def _write(path: str, content: str) -> None:
    Path(path).write_text(content)


if __name__ == "__main__":
    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(main())
