"""``prism-memory import``: a subprocess killed with SIGKILL midway through a 100,000-row file, then
run again, leaves exactly the rows of the file, each once; importing the file again changes
nothing."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from sqlalchemy import text

from prism_memory.postgres._engine import create_engine

pytestmark = pytest.mark.postgres

ROWS = 100_000
THREADS = 1_000
KILL_AFTER = 30_000
"""Rows the checkpoint must count done before the import is killed."""


def _command(path: Path, url: str, schema: str) -> list[str]:
    return [
        sys.executable, "-m", "prism_memory", "import", str(path), "--url", url,
        "--schema", schema, "--dimension", "16", "--batch-size", "500",
    ]  # fmt: skip


def _environment() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if k != "PRISM_MEMORY_DATABASE_URL"}


def _drop(url: str, schema: str) -> None:
    async def drop() -> None:
        engine = create_engine(url, pooled=False)
        try:
            async with engine.begin() as conn:
                await conn.execute(text(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE'))
        finally:
            await engine.dispose()

    asyncio.run(drop())


def _kill_once_done(process: subprocess.Popen[bytes], state: Path, enough: int) -> None:
    """SIGKILL ``process`` once its checkpoint counts ``enough`` entries done."""
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline and process.poll() is None:
        if state.exists():
            try:
                done = json.loads(state.read_text(encoding="utf-8"))["done"]
            except ValueError:  # read between the write and the rename: try again
                done = 0
            if done >= enough:
                break
        time.sleep(0.02)
    assert process.poll() is None, "the import finished before it could be killed"
    os.kill(process.pid, signal.SIGKILL)
    process.wait(timeout=30)


def _rows(url: str, schema: str) -> list[tuple[str, str, int]]:
    async def read() -> list[tuple[str, str, int]]:
        engine = create_engine(url, pooled=False)
        try:
            async with engine.connect() as conn:
                rows = await conn.execute(
                    text(
                        f'SELECT thread_id, id, sequence FROM "{schema}".semantic_memory '
                        "ORDER BY thread_id, sequence"
                    )
                )
                return [(r.thread_id, r.id, int(r.sequence)) for r in rows]
        finally:
            await engine.dispose()

    return asyncio.run(read())


def test_a_killed_import_resumes_and_leaves_each_row_once(postgres_url, schema, tmp_path):
    path = tmp_path / "history.jsonl"
    with path.open("w", encoding="utf-8") as handle:
        for i in range(ROWS):
            line = {
                "tenant_id": "acme",
                "resource_id": f"user-{i % THREADS % 40}",
                "thread_id": f"t{i % THREADS:03d}",
                "id": f"r{i}",
                "text": f"message {i} of the history",
            }
            handle.write(json.dumps(line) + "\n")
    state = Path(str(path) + ".import-state.json")
    process = subprocess.Popen(
        _command(path, postgres_url, schema),
        env=_environment(),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    _kill_once_done(process, state, KILL_AFTER)
    assert process.returncode == -signal.SIGKILL
    partial = _rows(postgres_url, schema)
    assert KILL_AFTER <= len(partial) < ROWS  # killed midway: some batches written, not all
    assert state.exists()

    rerun = subprocess.run(
        _command(path, postgres_url, schema),
        env=_environment(),
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert rerun.returncode == 0, rerun.stderr
    assert "skipped by the checkpoint" in rerun.stdout
    assert not state.exists()  # a finished import removes its checkpoint
    stored = _rows(postgres_url, schema)
    assert len(stored) == ROWS
    assert {row_id for _, row_id, _ in stored} == {f"r{i}" for i in range(ROWS)}
    # each thread holds its rows once, in file order, numbered without a gap or a repeat
    threads: dict[str, list[tuple[str, int]]] = {}
    for thread_id, row_id, sequence in stored:  # ordered by thread, then sequence
        threads.setdefault(thread_id, []).append((row_id, sequence))
    assert len(threads) == THREADS
    for thread in range(THREADS):
        mine = threads[f"t{thread:03d}"]
        expected = [f"r{i}" for i in range(thread, ROWS, THREADS)]
        assert [row_id for row_id, _ in mine] == expected
        assert [seq for _, seq in mine] == list(range(len(expected)))

    again = subprocess.run(
        _command(path, postgres_url, schema),
        env=_environment(),
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert again.returncode == 0, again.stderr
    assert "imported 0 new entries" in again.stdout
    assert f"{ROWS} already stored" in again.stdout
    assert _rows(postgres_url, schema) == stored


def test_a_bad_line_is_named_and_nothing_of_its_batch_is_written(postgres_url, schema, tmp_path):
    path = tmp_path / "bad.jsonl"
    lines = [
        {"tenant_id": "acme", "resource_id": "u", "thread_id": "t", "id": f"r{i}", "text": f"x {i}"}
        for i in range(1, 8)
    ]
    lines[5]["vector"] = [1.0, "a secret-ish word"]  # line 6 of 7
    path.write_text("\n".join(json.dumps(line) for line in lines) + "\n", encoding="utf-8")
    done = subprocess.run(
        [*_command(path, postgres_url, schema)[:-1], "4"],
        env=_environment(),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 1
    assert done.stderr.splitlines()[-1].startswith("error: line 6:"), done.stderr
    assert "secret-ish" not in done.stderr
    # batches of four: lines 1-4 are in, nothing of lines 5-7
    assert [row_id for _, row_id, _ in _rows(postgres_url, schema)] == ["r1", "r2", "r3", "r4"]


def test_a_checkpoint_of_another_schema_is_set_aside(postgres_url, schema, tmp_path):
    """Killed while importing into schema A, the same file imported into schema B lands whole in
    B: the checkpoint names its target, so A's progress skips nothing in B."""
    rows = 8_000
    path = tmp_path / "history.jsonl"
    path.write_text(
        "".join(
            json.dumps(
                {"tenant_id": "acme", "resource_id": "u", "thread_id": f"t{i % 40}",
                 "id": f"r{i}", "text": f"message {i}"}
            ) + "\n"
            for i in range(rows)
        ),
        encoding="utf-8",
    )  # fmt: skip
    state = Path(str(path) + ".import-state.json")
    into_a = subprocess.Popen(
        _command(path, postgres_url, schema),
        env=_environment(),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    _kill_once_done(into_a, state, 2_000)
    assert 2_000 <= len(_rows(postgres_url, schema)) < rows
    other = f"{schema}_b"
    try:
        into_b = subprocess.run(
            _command(path, postgres_url, other),
            env=_environment(),
            capture_output=True,
            text=True,
            timeout=300,
            check=False,
        )
        assert into_b.returncode == 0, into_b.stderr
        said = " ".join(into_b.stdout.split())  # the console wraps long lines
        assert "set aside" in said
        assert f"imported {rows} new entries" in said
        assert "; 0 skipped by the checkpoint" in said
        assert {row_id for _, row_id, _ in _rows(postgres_url, other)} == {
            f"r{i}" for i in range(rows)
        }
    finally:
        _drop(postgres_url, other)


def test_a_line_over_the_limit_is_named(postgres_url, schema, tmp_path):
    path = tmp_path / "long.jsonl"
    line = {"tenant_id": "acme", "resource_id": "u", "thread_id": "t", "id": "r1", "text": "x"}
    path.write_text(json.dumps(line) + "\n\n" + json.dumps({**line, "text": "y" * 300}) + "\n")
    done = subprocess.run(
        [*_command(path, postgres_url, schema), "--max-line-bytes", "200"],
        env=_environment(),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 1
    assert done.stderr.splitlines()[-1].startswith("error: line 3:"), done.stderr
    assert "line limit" in done.stderr


def test_the_progress_bar_counts_against_the_files_total(postgres_url, schema, tmp_path):
    """The bar of a file import shows the entries done of the file's total (estimated from the
    bytes read, exact at the end) and a time left, not ``N/?``; with vectors given as JSON
    lists, parsed and checked a batch at once, and again (a re-import reads no vector)."""
    path = tmp_path / "history.jsonl"
    lines = [
        {
            "tenant_id": "acme",
            "resource_id": "u",
            "thread_id": f"t{i % 7}",
            "id": f"r{i}",
            "text": f"fact {i}",
            "vector": [round(0.1 * ((i + k) % 10) - 0.45, 7) for k in range(16)],
        }
        for i in range(1, 31)
    ]
    path.write_text("\n".join(json.dumps(line) for line in lines) + "\n", encoding="utf-8")
    for new in (30, 0):
        done = subprocess.run(
            [*_command(path, postgres_url, schema)[:-1], "8", "--model", "m"],
            env=_environment(),
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        assert done.returncode == 0, done.stderr
        assert "30/30" in done.stderr, done.stderr
        assert "/?" not in done.stderr
        assert f"imported {new} new entries" in done.stdout
    assert len(_rows(postgres_url, schema)) == 30
