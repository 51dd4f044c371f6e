"""Deployment topologies for the PostgreSQL tests: real processes, never mocks.

A pytest plugin (``tests/conftest.py`` lists it in ``pytest_plugins``) with two session fixtures:

* ``pgbouncer`` / ``pgbouncer_url`` -- a PgBouncer process in ``pool_mode = transaction`` (no
  ``ignore_startup_parameters``, so a startup parameter PgBouncer does not track fails as it
  would in production), listening on ``127.0.0.1`` on a free port, in front of the database of
  ``postgres_url``. Needs the ``pgbouncer`` program (Debian package ``pgbouncer``).
* ``replica_pair`` -- a dedicated embedded primary and a streaming replica made from it with
  ``pg_basebackup -R``, both on unix sockets, with helpers to pause and resume the replica's replay.

A missing program skips these tests -- or fails them with ``PRISM_REQUIRE_POSTGRES=1``.
Servers started elsewhere (``tools/mutate.py`` starts them once for every forked run) are named by
``PRISM_TEST_PGBOUNCER`` and ``PRISM_TEST_REPLICA_PAIR`` (JSON, :func:`describe`); the fixtures then
use them and stop nothing.
As root, PgBouncer (which refuses to run as root) and the replica run as a system user: the owner
of the embedded server's socket directory (``embedded_postgres``), else ``nobody``.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import pwd
import shutil
import signal
import socket
import subprocess
import tempfile
import threading
import time
from collections.abc import Awaitable, Callable, Coroutine, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import asyncpg
import pytest
from sqlalchemy.engine import make_url

from prism_memory.errors import ConfigurationError, StorageError
from prism_memory.postgres._engine import normalize_url
from prism_memory.postgres.embedded import EmbeddedPostgres, start_embedded_postgres

PGBOUNCER_ENV = "PRISM_TEST_PGBOUNCER"
"""A PgBouncer started elsewhere, as :func:`describe` gives it (JSON)."""
REPLICA_PAIR_ENV = "PRISM_TEST_REPLICA_PAIR"
"""A primary and replica started elsewhere, as :func:`describe` gives them (JSON)."""

START_TIMEOUT = 30.0
"""Seconds a process of these fixtures gets to start answering before the fixture fails."""

T = TypeVar("T")


def _unavailable(what: str) -> None:
    if os.environ.get("PRISM_REQUIRE_POSTGRES") == "1":
        pytest.fail(f"PRISM_REQUIRE_POSTGRES=1 but {what}")
    pytest.skip(what)


def _run_sync(coro: Coroutine[Any, Any, T]) -> T:
    """Run ``coro`` on a private event loop in a helper thread (sync fixtures must not touch the
    test session's loop)."""
    result: list[T] = []
    failure: list[BaseException] = []

    def target() -> None:
        try:
            result.append(asyncio.run(coro))
        except BaseException as exc:  # noqa: BLE001 - re-raised in the caller's thread
            failure.append(exc)

    worker = threading.Thread(target=target, name="prism-test-topology")
    worker.start()
    worker.join()
    if failure:
        raise failure[0]
    return result[0]


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _log_tail(path: Path, lines: int = 40) -> str:
    try:
        text = path.read_text(errors="replace")
    except OSError as exc:
        return f"(no log at {path}: {exc})"
    return f"--- last lines of {path} ---\n" + "\n".join(text.splitlines()[-lines:])


def _as_user(user: str | None) -> dict[str, Any]:
    """``subprocess`` keywords that run a child as ``user`` (only when we are root)."""
    if user is None or os.geteuid() != 0:
        return {}
    entry = pwd.getpwnam(user)
    return {"user": entry.pw_uid, "group": entry.pw_gid, "extra_groups": []}


def _give_to(path: Path, user: str | None) -> None:
    if user is not None and os.geteuid() == 0:
        entry = pwd.getpwnam(user)
        os.chown(path, entry.pw_uid, entry.pw_gid)


def _run(args: list[str], user: str | None, what: str, log: Path | None = None) -> None:
    """Run a server tool, failing with its output (and ``log``) when it fails or hangs."""
    try:
        done = subprocess.run(
            args,
            capture_output=True,
            text=True,
            timeout=START_TIMEOUT * 2,
            check=False,
            **_as_user(user),
        )
    except subprocess.TimeoutExpired as exc:
        tail = _log_tail(log) if log else ""
        raise RuntimeError(f"{what} did not finish in {exc.timeout}s: {args}\n{tail}") from exc
    if done.returncode != 0:
        tail = _log_tail(log) if log else ""
        raise RuntimeError(
            f"{what} failed ({done.returncode}): {args}\n{done.stdout}\n{done.stderr}\n{tail}"
        )


async def _poll(
    check: Callable[[], Awaitable[bool]], what: str, log: Path | None, seconds: float
) -> None:
    deadline = time.monotonic() + seconds
    last: BaseException | None = None
    while time.monotonic() < deadline:
        try:
            if await check():
                return
        except (OSError, asyncpg.PostgresError) as exc:
            last = exc
        await asyncio.sleep(0.05)
    tail = _log_tail(log) if log else ""
    raise TimeoutError(f"{what} not within {seconds}s (last error: {last!r})\n{tail}")


# --------------------------------------------------------------------------------------------
# PgBouncer


@dataclass(slots=True)
class PgBouncer:
    """A running PgBouncer in transaction mode in front of one database."""

    url: str
    """``postgresql+asyncpg://`` URL of the database through the pooler."""
    dsn: str
    """The same as a plain ``postgresql://`` URI (asyncpg.connect, psycopg, psql)."""
    admin_dsn: str
    """URI of PgBouncer's admin console (database ``pgbouncer``; simple query protocol only)."""
    port: int
    """The TCP port on ``127.0.0.1``."""
    log: Path
    """PgBouncer's log file."""
    _process: subprocess.Popen[str] | None = field(repr=False)
    _directory: Path | None = field(repr=False)

    def close(self) -> None:
        """Stop the process (SIGTERM, then SIGKILL) and delete its directory (nothing, for a
        PgBouncer started elsewhere)."""
        if self._process is None or self._directory is None:
            return
        if self._process.poll() is None:
            self._process.terminate()
            try:
                self._process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self._process.kill()
                self._process.wait(timeout=10)
        shutil.rmtree(self._directory, ignore_errors=True)


def find_pgbouncer() -> str | None:
    """The ``pgbouncer`` program on ``PATH`` or in ``/usr/sbin`` (Debian), else ``None``."""
    found = shutil.which("pgbouncer")
    if found:
        return found
    debian = Path("/usr/sbin/pgbouncer")
    return str(debian) if os.access(debian, os.X_OK) else None


def _pooler_user(host: str) -> str | None:
    """Who PgBouncer runs as: ourselves, or (as root) the owner of the server's socket directory,
    which may be the only user allowed through it, else ``nobody``."""
    if os.geteuid() != 0:
        return None
    if host.startswith("/"):
        owner = pwd.getpwuid(Path(host).stat().st_uid).pw_name
        if owner != "root":
            return owner
    return "nobody"


def _quote(value: str) -> str:
    return "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"


def start_pgbouncer(server_url: str, program: str, *, pool_size: int = 10) -> PgBouncer:
    """Start PgBouncer (transaction mode) in front of the database of ``server_url``, with at most
    ``pool_size`` server connections (1: every client shares one server connection)."""
    server = make_url(server_url)
    socket_host = server.query.get("host")
    host = str(socket_host if isinstance(socket_host, str) else server.host or "localhost")
    user = server.username or "postgres"
    database = server.database or user
    target = {"host": host, "port": str(server.port or 5432), "dbname": database, "user": user}
    if server.password:
        target["password"] = server.password
    run_as = _pooler_user(host)
    directory = Path(tempfile.mkdtemp(prefix="prism_memory_pgbouncer_"))
    _give_to(directory, run_as)
    log = directory / "pgbouncer.log"
    (directory / "users.txt").write_text(f'"{user}" ""\n')
    connstring = " ".join(f"{key}={_quote(value)}" for key, value in target.items())
    for attempt in range(3):
        port = _free_port()
        (directory / "pgbouncer.ini").write_text(
            "[databases]\n"
            f"{database} = {connstring}\n"
            "[pgbouncer]\n"
            "listen_addr = 127.0.0.1\n"
            f"listen_port = {port}\n"
            "unix_socket_dir =\n"
            "auth_type = trust\n"
            f"auth_file = {directory / 'users.txt'}\n"
            f"admin_users = {user}\n"
            "pool_mode = transaction\n"
            f"default_pool_size = {pool_size}\n"
            "max_client_conn = 200\n"
            f"logfile = {log}\n"
        )
        for name in ("pgbouncer.ini", "users.txt"):
            _give_to(directory / name, run_as)
        process = subprocess.Popen(
            [program, str(directory / "pgbouncer.ini")],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            text=True,
            **_as_user(run_as),
        )
        bouncer = PgBouncer(
            url=normalize_url(f"postgresql://{user}@127.0.0.1:{port}/{database}"),
            dsn=f"postgresql://{user}@127.0.0.1:{port}/{database}",
            admin_dsn=f"postgresql://{user}@127.0.0.1:{port}/pgbouncer",
            port=port,
            log=log,
            _process=process,
            _directory=directory,
        )
        try:
            _run_sync(_until_answers(bouncer))
        except BaseException:
            tail = _log_tail(log)
            bouncer._process.kill()
            bouncer._process.wait(timeout=10)
            if "Address already in use" in tail and attempt < 2:
                continue  # another process took the free port first: try another
            shutil.rmtree(directory, ignore_errors=True)
            raise
        return bouncer
    raise AssertionError("unreachable")  # pragma: no cover


async def _until_answers(bouncer: PgBouncer) -> None:
    async def answers() -> bool:
        if bouncer._process.poll() is not None:
            raise RuntimeError(
                f"pgbouncer exited with {bouncer._process.returncode}\n{_log_tail(bouncer.log)}"
            )
        conn = await asyncpg.connect(bouncer.dsn, statement_cache_size=0, timeout=5)
        try:
            return bool(await conn.fetchval("SELECT 1") == 1)
        finally:
            await conn.close()

    await _poll(answers, "pgbouncer answering a query", bouncer.log, START_TIMEOUT)


@pytest.fixture(scope="session")
def pgbouncer(postgres_url: str) -> Iterator[PgBouncer]:
    """A PgBouncer (``pool_mode = transaction``, pool of 10) in front of ``postgres_url``."""
    started = os.environ.get(PGBOUNCER_ENV)
    if started:
        fields = json.loads(started)
        fields["log"] = Path(fields["log"])
        yield PgBouncer(**fields, _process=None, _directory=None)
        return
    program = find_pgbouncer()
    if program is None:
        _unavailable("pgbouncer is not installed (Debian: apt-get install pgbouncer)")
        return
    bouncer = start_pgbouncer(postgres_url, program)
    try:
        yield bouncer
    finally:
        bouncer.close()


@pytest.fixture(scope="session")
def pgbouncer_url(pgbouncer: PgBouncer) -> str:
    """``postgresql+asyncpg://`` URL of ``postgres_url``'s database through PgBouncer."""
    return pgbouncer.url


# --------------------------------------------------------------------------------------------
# Primary + streaming replica

SLOT = "prism_test_replica"


@dataclass(slots=True)
class ReplicaPair:
    """A primary and a hot-standby replica streaming from it (physical replication slot)."""

    primary_url: str
    """``postgresql+asyncpg://`` URL of the primary (read-write)."""
    replica_url: str
    """``postgresql+asyncpg://`` URL of the replica (read-only, hot standby)."""
    primary_dsn: str
    """The primary as a plain ``postgresql://`` URI (asyncpg.connect, psql)."""
    replica_dsn: str
    """The replica as a plain ``postgresql://`` URI."""
    replica_log: Path
    """The replica's server log."""
    primary: EmbeddedPostgres | None = field(repr=False)
    """``None`` for a pair started elsewhere."""
    _replica_data: Path | None = field(repr=False)
    _directory: Path | None = field(repr=False)

    async def _replica(self, query: str, *args: Any) -> Any:
        conn = await asyncpg.connect(self.replica_dsn, timeout=10)
        try:
            return await conn.fetchval(query, *args)
        finally:
            await conn.close()

    async def pause_replay(self) -> None:
        """Stop applying WAL on the replica; it keeps receiving. Returns once replay is paused."""
        await self._replica("SELECT pg_wal_replay_pause()")

        async def paused() -> bool:
            return bool(await self._replica("SELECT pg_get_wal_replay_pause_state() = 'paused'"))

        await _poll(paused, "replay paused on the replica", self.replica_log, START_TIMEOUT)

    async def resume_replay(self) -> None:
        """Apply WAL again on the replica (what arrived meanwhile is applied soon after)."""
        await self._replica("SELECT pg_wal_replay_resume()")

    async def replay_paused(self) -> bool:
        """Whether replay on the replica is paused (or a pause is requested)."""
        return bool(await self._replica("SELECT pg_is_wal_replay_paused()"))

    async def _primary_lsn(self) -> str:
        primary = await asyncpg.connect(self.primary_dsn, timeout=10)
        try:
            return str(await primary.fetchval("SELECT pg_current_wal_lsn()::text"))
        finally:
            await primary.close()

    async def _wait_lsn(self, function: str, seconds: float) -> None:
        target = await self._primary_lsn()

        async def reached() -> bool:
            query = f"SELECT {function}() >= $1::text::pg_lsn"
            return bool(await self._replica(query, target))

        await _poll(reached, f"replica's {function} up to {target}", self.replica_log, seconds)

    async def wait_caught_up(self, seconds: float = START_TIMEOUT) -> None:
        """Wait until the replica has applied everything the primary has written so far.

        Raises :class:`RuntimeError` at once when replay is paused (it could never catch up)."""
        if await self.replay_paused():
            raise RuntimeError("wait_caught_up() while replay is paused: resume_replay() first")
        await self._wait_lsn("pg_last_wal_replay_lsn", seconds)

    async def wait_received(self, seconds: float = START_TIMEOUT) -> None:
        """Wait until the replica has received (not necessarily applied) everything the primary
        has written so far -- with replay paused: the write is on the replica, not yet visible."""
        await self._wait_lsn("pg_last_wal_receive_lsn", seconds)

    def replica_pids(self) -> list[int]:
        """The replica's postmaster and every process it started (startup, walreceiver,
        checkpointer, backends ...): what stopping "the standby" with a signal must reach."""
        head = (self._replica_data / "postmaster.pid").read_text().split("\n", 1)[0]
        postmaster = int(head)
        children = []
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit():
                continue
            with contextlib.suppress(OSError, ValueError, IndexError):
                fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
                if int(fields[1]) == postmaster:  # the parent pid
                    children.append(int(entry.name))
        return [postmaster, *children]

    @contextlib.contextmanager
    def replica_frozen(self) -> Iterator[None]:
        """Every process of the replica stopped with SIGSTOP (a hung standby: its sockets
        accept, nothing answers) inside the block; SIGCONT after it, whatever happened."""
        pids = self.replica_pids()
        stopped: list[int] = []
        try:
            for pid in pids:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGSTOP)
                    stopped.append(pid)
            yield
        finally:
            for pid in stopped:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGCONT)

    def stop_replica(self) -> None:
        """Stop the replica (``pg_ctl stop -m fast``); :meth:`start_replica` starts it again."""
        _run(
            [
                str(self.primary.bin_dir / "pg_ctl"),
                *("-D", str(self._replica_data), "-m", "fast", "-w", "stop"),
            ],
            self.primary.os_user,
            "stopping the replica",
            self.replica_log,
        )

    def start_replica(self) -> None:
        """Start the replica :meth:`stop_replica` stopped, and wait until it streams again."""
        port = make_url(self.replica_url).query.get("port")
        _run(
            [
                str(self.primary.bin_dir / "pg_ctl"),
                *("-D", str(self._replica_data), "-l", str(self.replica_log), "-w"),
                *("-t", str(int(START_TIMEOUT))),
                *("-o", f"-h '' -k {self._directory} -p {port}", "start"),
            ],
            self.primary.os_user,
            "starting the replica again",
            self.replica_log,
        )
        _run_sync(_until_streaming(self))

    def close(self) -> None:
        """Stop the replica, then the primary, and delete both data directories (nothing, for a
        pair started elsewhere)."""
        if self.primary is None or self._replica_data is None or self._directory is None:
            return
        _stop_replica(self.primary, self._replica_data, self._directory)
        self.primary.close()


def _stop_replica(primary: EmbeddedPostgres, data: Path, directory: Path) -> None:
    """Stop the replica in ``data`` (if it runs) and delete ``directory``."""
    if (data / "postmaster.pid").exists():
        with contextlib.suppress(RuntimeError):
            _run(
                [str(primary.bin_dir / "pg_ctl"), "-D", str(data), "-m", "immediate", "-w", "stop"],
                primary.os_user,
                "stopping the replica",
            )
    shutil.rmtree(directory, ignore_errors=True)


def _socket_dsn(socket_dir: Path, port: int) -> str:
    return f"postgresql://postgres@/postgres?host={socket_dir}&port={port}"


def start_replica_pair() -> ReplicaPair:
    """Start a dedicated embedded primary and a streaming replica of it; wait until it streams."""
    primary = start_embedded_postgres()
    try:
        return _start_replica(primary)
    except BaseException:
        primary.close()
        raise


def _start_replica(primary: EmbeddedPostgres) -> ReplicaPair:
    user = primary.os_user
    directory = Path(tempfile.mkdtemp(prefix="prism_memory_replica_"))
    _give_to(directory, user)
    data, log = directory / "data", directory / "replica.log"
    port = primary.port + 1  # its own socket directory too: never the primary's socket
    bins = primary.bin_dir
    try:
        _run(
            [
                str(bins / "pg_basebackup"),
                *("-h", str(primary.socket_dir), "-p", str(primary.port), "-U", "postgres"),
                *("-D", str(data), "-R", "-X", "stream", "-C", "-S", SLOT, "-c", "fast"),
            ],
            user,
            "pg_basebackup from the primary",
            primary.data_dir / "log",
        )
        _run(
            [
                str(bins / "pg_ctl"),
                *("-D", str(data), "-l", str(log), "-w", "-t", str(int(START_TIMEOUT))),
                *("-o", f"-h '' -k {directory} -p {port}", "start"),
            ],
            user,
            "starting the replica",
            log,
        )
        pair = ReplicaPair(
            primary_url=primary.url,
            replica_url=normalize_url(_socket_dsn(directory, port)),
            primary_dsn=_socket_dsn(primary.socket_dir, primary.port),
            replica_dsn=_socket_dsn(directory, port),
            replica_log=log,
            primary=primary,
            _replica_data=data,
            _directory=directory,
        )
        _run_sync(_until_streaming(pair))
    except BaseException:
        _stop_replica(primary, data, directory)  # the caller closes the primary
        raise
    return pair


async def _until_streaming(pair: ReplicaPair) -> None:
    async def streaming() -> bool:
        if not await pair._replica("SELECT pg_is_in_recovery()"):
            raise RuntimeError("the replica is not in recovery: pg_basebackup -R wrote no signal")
        conn = await asyncpg.connect(pair.primary_dsn, timeout=10)
        try:
            return bool(
                await conn.fetchval(
                    "SELECT count(*) FROM pg_stat_replication WHERE state = 'streaming'"
                )
            )
        finally:
            await conn.close()

    await _poll(streaming, "the replica streaming from the primary", pair.replica_log, 30)


@pytest.fixture(scope="session")
def replica_pair() -> Iterator[ReplicaPair]:
    """A dedicated embedded primary with a streaming replica (even when ``postgres_url`` is
    another server): see :class:`ReplicaPair`."""
    started = os.environ.get(REPLICA_PAIR_ENV)
    if started:
        fields = json.loads(started)
        fields["replica_log"] = Path(fields["replica_log"])
        pair = ReplicaPair(**fields, primary=None, _replica_data=None, _directory=None)
        # a run killed midway (a mutant's timeout) may have left replay paused
        if _run_sync(pair.replay_paused()):
            _run_sync(pair.resume_replay())
        _run_sync(pair.wait_caught_up())
        yield pair
        return
    try:
        pair = start_replica_pair()
    except (ConfigurationError, StorageError) as exc:
        _unavailable(f"no embedded PostgreSQL for the replica pair: {exc}")
        return
    try:
        yield pair
    finally:
        pair.close()


def describe(server: PgBouncer | ReplicaPair) -> str:
    """``server`` as JSON for :data:`PGBOUNCER_ENV` / :data:`REPLICA_PAIR_ENV` (its addresses)."""
    if isinstance(server, PgBouncer):
        fields = {"url": server.url, "dsn": server.dsn, "admin_dsn": server.admin_dsn}
        fields.update({"port": server.port, "log": str(server.log)})
    else:
        fields = {
            "primary_url": server.primary_url,
            "replica_url": server.replica_url,
            "primary_dsn": server.primary_dsn,
            "replica_dsn": server.replica_dsn,
            "replica_log": str(server.replica_log),
        }
    return json.dumps(fields)
