"""Every ``python`` and shell block of README.md and docs/ runs, as pasted.

The convention (also in docs/contributing.md): fences whose language is ``python``/``py`` or
``bash``/``sh``/``shell`` are executed, each on its own, in a fresh temporary directory, with
``PRISM_MEMORY_DATABASE_URL`` naming a fresh database of its own on the test PostgreSQL. A block is
skipped only when the line right before its fence is ``<!-- not-run: <reason> -->``. The blocks
that use ``PRISM_MEMORY_DATABASE_URL`` also run once more, one after the other in reading order,
against ONE shared database, as a reader following the docs would.
"""

from __future__ import annotations

import asyncio
import os
import re
import subprocess
import sys
import uuid
from dataclasses import dataclass
from pathlib import Path

import pytest
from sqlalchemy import make_url, text

from prism_memory.postgres._engine import create_engine

REPO = Path(__file__).resolve().parents[2]
RUN_LANGUAGES = {"python": "python", "py": "python", "bash": "bash", "sh": "bash", "shell": "bash"}
NOT_RUN = re.compile(r"^\s*<!--\s*not-run:(?P<reason>.*?)-->\s*$")
FENCE = re.compile(r"^(?P<indent>\s*)(?P<fence>`{3,}|~{3,})\s*(?P<info>[^`]*)$")
TIMEOUT_SECONDS = 120


@dataclass(frozen=True)
class Block:
    """One fenced code block of a Markdown file."""

    path: Path
    line: int  # 1-based line of the opening fence
    language: str
    code: str
    not_run: str | None  # the reason, when marked not-run

    @property
    def name(self) -> str:
        return f"{self.path.relative_to(REPO)}:{self.line}"


def markdown_files() -> list[Path]:
    return [REPO / "README.md", *sorted((REPO / "docs").rglob("*.md"))]


def parse_blocks(path: Path) -> list[Block]:
    """The fenced blocks of ``path``, with the not-run marker of the line before each fence."""
    lines = path.read_text(encoding="utf-8").splitlines()
    blocks: list[Block] = []
    index = 0
    while index < len(lines):
        opening = FENCE.match(lines[index])
        if opening is None:
            index += 1
            continue
        fence, indent = opening["fence"], len(opening["indent"])
        language = (opening["info"].split() or [""])[0].lower()
        body: list[str] = []
        end = index + 1
        while end < len(lines):
            closing = FENCE.match(lines[end])
            if closing and closing["fence"].startswith(fence) and not closing["info"].strip():
                break
            body.append(lines[end][indent:] if lines[end][:indent].isspace() else lines[end])
            end += 1
        marker = NOT_RUN.match(lines[index - 1]) if index > 0 else None
        blocks.append(
            Block(
                path=path,
                line=index + 1,
                language=language,
                code="\n".join(body) + "\n",
                not_run=marker["reason"].strip() if marker else None,
            )
        )
        index = end + 1
    return blocks


def runnable_blocks() -> list[Block]:
    return [
        block
        for path in markdown_files()
        for block in parse_blocks(path)
        if block.language in RUN_LANGUAGES
    ]


BLOCKS = runnable_blocks()


def test_the_docs_have_runnable_blocks() -> None:
    """The parser finds the README's quick start: a parser that finds nothing cannot pass."""
    readme = [b for b in BLOCKS if b.path.name == "README.md" and b.language == "python"]
    assert any("asyncio.run(main())" in b.code for b in readme)
    assert all(b.not_run != "" for b in BLOCKS), "a not-run marker needs a reason"


def test_not_run_markers_name_a_reason() -> None:
    empty = [b.name for b in BLOCKS if b.not_run is not None and not b.not_run]
    assert not empty, f"not-run without a reason: {empty}"


async def _create_database(url: str, name: str) -> str:
    engine = create_engine(url, pooled=False).execution_options(isolation_level="AUTOCOMMIT")
    try:
        async with engine.connect() as conn:
            await conn.execute(text(f'CREATE DATABASE "{name}"'))
    finally:
        await engine.dispose()
    target = make_url(url).set(database=name).render_as_string(hide_password=False)
    engine = create_engine(target, pooled=False)
    try:
        async with engine.begin() as conn:
            await conn.execute(text("CREATE EXTENSION IF NOT EXISTS vector"))
    finally:
        await engine.dispose()
    return target


async def _drop_database(url: str, name: str) -> None:
    engine = create_engine(url, pooled=False).execution_options(isolation_level="AUTOCOMMIT")
    try:
        async with engine.connect() as conn:
            await conn.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
    finally:
        await engine.dispose()


def _run_block(block: Block, url: str, directory: Path) -> str | None:
    """Run ``block`` in ``directory`` against ``url``; ``None``, or what it printed when it failed."""
    bin_dir = str(Path(sys.executable).parent)
    env = {k: v for k, v in os.environ.items() if k not in {"PYTHONPATH", "PYTHONHOME"}}
    env["PRISM_MEMORY_DATABASE_URL"] = url
    env["PATH"] = bin_dir + os.pathsep + env.get("PATH", "")
    if RUN_LANGUAGES[block.language] == "python":
        script = directory / "snippet.py"
        command = [sys.executable, str(script)]
    else:
        script = directory / "snippet.sh"
        command = ["bash", "-euo", "pipefail", str(script)]
    script.write_text(block.code, encoding="utf-8")
    done = subprocess.run(
        command,
        cwd=directory,
        env=env,
        capture_output=True,
        text=True,
        timeout=TIMEOUT_SECONDS,
        check=False,
    )
    if done.returncode == 0:
        return None
    return (
        f"{block.name} failed (exit {done.returncode}):\n{block.code}\n"
        f"--- stdout\n{done.stdout}\n--- stderr\n{done.stderr}"
    )


@pytest.mark.postgres
@pytest.mark.slow
@pytest.mark.parametrize("block", [b for b in BLOCKS if b.not_run is None], ids=lambda b: b.name)
def test_docs_block_runs(block: Block, postgres_url: str, tmp_path: Path) -> None:
    database = f"pm_docs_{uuid.uuid4().hex[:10]}"
    url = asyncio.run(_create_database(postgres_url, database))
    try:
        failed = _run_block(block, url, tmp_path)
        assert failed is None, failed
    finally:
        asyncio.run(_drop_database(postgres_url, database))


SHARED_DATABASE_BLOCKS = [
    b for b in BLOCKS if b.not_run is None and "PRISM_MEMORY_DATABASE_URL" in b.code
]
"""The blocks that run against ``PRISM_MEMORY_DATABASE_URL``, in reading order (README, then docs/)."""


@pytest.mark.postgres
@pytest.mark.slow
def test_docs_blocks_run_in_order_against_one_database(postgres_url: str, tmp_path: Path) -> None:
    """A reader runs the README's and the docs' blocks one after the other against one database
    (one schema): they must agree, the pinned width first of all (one ``vector(384)``)."""
    assert len(SHARED_DATABASE_BLOCKS) > 5, "the filter finds the database blocks"
    database = f"pm_docs_{uuid.uuid4().hex[:10]}"
    url = asyncio.run(_create_database(postgres_url, database))
    failures: list[str] = []
    try:
        for number, block in enumerate(SHARED_DATABASE_BLOCKS):
            directory = tmp_path / f"block-{number}"
            directory.mkdir()
            failed = _run_block(block, url, directory)
            if failed is not None:
                failures.append(failed)
    finally:
        asyncio.run(_drop_database(postgres_url, database))
    assert not failures, "\n\n".join(failures)
