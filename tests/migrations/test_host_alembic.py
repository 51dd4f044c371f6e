"""docs/alembic.md's walk-through, verbatim, in a throw-away host project: on the installed wheel,
and on this environment's editable install of the checkout.

``alembic init -t async alembic`` makes the host; its own set-up is one line (``sqlalchemy.url``).
Then every block between ``<!-- walk-through: start -->`` and ``<!-- walk-through: end -->`` runs
in order: the ``ini`` block's options are set in the host's ``[alembic]`` section (an option
``alembic init`` wrote is changed, not repeated), the ``python`` block's ``do_run_migrations``
replaces the one ``alembic init`` wrote in ``env.py``, ``bash`` blocks run in the project directory
with the install's ``alembic`` and ``prism-memory`` on ``PATH``. The host's revision gets a table of
its own, its autogenerate proposes nothing for prism_memory's tables, and its branch is downgraded
without touching prism_memory's.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import uuid
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import pytest
from sqlalchemy import make_url, text
from sqlalchemy.ext.asyncio import AsyncEngine

from prism_memory.postgres import migrate
from prism_memory.postgres._engine import create_engine

pytestmark = [pytest.mark.postgres, pytest.mark.slow]

DOC = Path(__file__).resolve().parents[2] / "docs" / "alembic.md"
BLOCK = re.compile(r"^```(?P<lang>\w+)\n(?P<body>.*?)^```$", re.MULTILINE | re.DOTALL)


def walk_through() -> list[tuple[str, str]]:
    text_ = DOC.read_text(encoding="utf-8")
    start = text_.index("<!-- walk-through: start -->")
    end = text_.index("<!-- walk-through: end -->")
    return [(m["lang"], m["body"]) for m in BLOCK.finditer(text_[start:end])]


def merge_ini(ini: Path, block: str) -> None:
    """Set each ``key = value`` of the doc's ``[alembic]`` block in the host's ``[alembic]``."""
    options = [
        line.split("=", 1)
        for line in block.splitlines()
        if "=" in line and not line.lstrip().startswith(("#", "["))
    ]
    lines = ini.read_text().splitlines()
    section = lines.index("[alembic]")
    for key, value in options:
        key, value = key.strip(), value.strip()
        pattern = re.compile(rf"^{re.escape(key)}\s*=")
        found = [i for i, line in enumerate(lines) if pattern.match(line)]
        if found:
            lines[found[0]] = f"{key} = {value}"
        else:
            lines.insert(section + 1, f"{key} = {value}")
    ini.write_text("\n".join(lines) + "\n")


DEF = re.compile(r"^def do_run_migrations\(.*?(?=^\S)", re.MULTILINE | re.DOTALL)


def merge_env_py(env_py: Path, block: str) -> None:
    """Put the doc's ``do_run_migrations`` in place of ``alembic init``'s, its imports on top."""
    source = env_py.read_text()
    imports = [line for line in block.splitlines() if line.startswith(("from ", "import "))]
    (ours,) = DEF.findall(block + "\n#")
    assert len(DEF.findall(source)) == 1, source
    source = DEF.sub(lambda _: ours, source, count=1)
    env_py.write_text("\n".join(imports) + "\n" + source)


def _bash(code: str, cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["bash", "-euo", "pipefail", "-c", code],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


@pytest.fixture
async def database(postgres_url: str, engine: AsyncEngine) -> AsyncIterator[str]:
    """A fresh database (the walk-through uses the default schema and version table names)."""
    name = f"pm_host_{uuid.uuid4().hex[:10]}"
    admin = engine.execution_options(isolation_level="AUTOCOMMIT")
    async with admin.connect() as conn:
        await conn.execute(text(f'CREATE DATABASE "{name}"'))
    yield make_url(postgres_url).set(database=name).render_as_string(hide_password=False)
    async with admin.connect() as conn:
        await conn.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))


async def _state(url: str) -> tuple[set[str], set[str], set[str]]:
    """(prism_memory's tables, the host's public tables, the host's version rows)."""
    engine = create_engine(url, pooled=False)
    try:
        async with engine.connect() as conn:
            prism = set(
                (
                    await conn.execute(
                        text("SELECT tablename FROM pg_tables WHERE schemaname = 'prism_memory'")
                    )
                ).scalars()
            )
            public = set(
                (
                    await conn.execute(
                        text("SELECT tablename FROM pg_tables WHERE schemaname = 'public'")
                    )
                ).scalars()
            )
            versions = set(
                (await conn.execute(text("SELECT version_num FROM alembic_version"))).scalars()
            )
            return prism, public, versions
    finally:
        await engine.dispose()


@pytest.fixture(params=["wheel", "editable"])
def install_python(request: pytest.FixtureRequest, run: Callable[..., str]) -> Path:
    """The python of an install: the wheel's fresh virtualenv, or this environment's editable
    install of the checkout (where ``prism_memory/migrations`` links to ``migrations/``)."""
    if request.param == "wheel":
        wheel_python: Path = request.getfixturevalue("wheel_python")
        return wheel_python
    python = Path(sys.executable)
    located = run(
        [str(python), "-c", "import prism_memory; print(prism_memory.__file__)"], cwd=DOC.parent
    )
    assert located.strip() == str(DOC.parents[1] / "prism_memory" / "__init__.py"), located
    return python


async def test_a_host_project_follows_the_docs(
    run: Callable[..., str], install_python: Path, database: str, tmp_path: Path
) -> None:
    steps = walk_through()
    assert [lang for lang, _ in steps] == ["ini", "python", "bash", "bash", "bash", "bash"]
    shims = tmp_path / "bin"
    shims.mkdir()
    for name, module in (("alembic", "alembic"), ("prism-memory", "prism_memory")):
        (shims / name).write_text(f'#!/bin/sh\nexec "{install_python}" -m {module} "$@"\n')
        (shims / name).chmod(0o755)
    env = {k: v for k, v in os.environ.items() if k not in {"PYTHONPATH", "PYTHONHOME"}}
    env["PATH"] = os.pathsep.join([str(shims), env.get("PATH", "")])

    project = tmp_path / "host"
    project.mkdir()
    run([str(shims / "alembic"), "init", "-t", "async", "alembic"], cwd=project)
    ini = project / "alembic.ini"
    # the host's own set-up: where its database is
    merge_ini(ini, "sqlalchemy.url = " + database.replace("%", "%%"))

    def bash(code: str) -> str:
        done = _bash(code, project, env)
        assert done.returncode == 0, f"{code}\nstdout:\n{done.stdout}\nstderr:\n{done.stderr}"
        return done.stdout + done.stderr

    (_, ini_block), (_, env_block), (_, upgrade), (_, own_revision), (_, more), (_, downgrade) = (
        steps
    )
    merge_ini(ini, ini_block)
    written = ini.read_text()
    assert "prism_memory.migrations:versions" in written
    assert [line for line in written.splitlines() if line.startswith("path_separator")] == [
        "path_separator = space"
    ]
    merge_env_py(project / "alembic" / "env.py", env_block)

    # step 3: every branch (the library's only, so far)
    head = migrate.head_revision()
    assert bash("alembic heads").split() == [f"{head}", "(prism_memory)", "(head)"]
    output = bash(upgrade)
    assert head in output
    prism, public, versions = await _state(database)
    assert "semantic_memory" in prism
    assert versions == {head}
    healthy = bash(f'prism-memory doctor --url "{database}" --width 384')
    assert "ok: no problems found" in healthy

    # step 3: the host's own revision, on its own branch; the host writes its body
    bash(own_revision)
    (revision_file,) = (project / "alembic" / "versions").glob("*create_app_tables.py")
    source = revision_file.read_text()
    assert f"depends_on: Union[str, Sequence[str], None] = '{head}'" in source or head in source
    source = source.replace(
        "def upgrade() -> None:\n",
        "def upgrade() -> None:\n"
        "    op.create_table('app_note', sa.Column('id', sa.Integer, primary_key=True))\n",
        1,
    ).replace(
        "def downgrade() -> None:\n",
        "def downgrade() -> None:\n    op.drop_table('app_note')\n",
        1,
    )
    revision_file.write_text(source)
    bash(more)
    prism, public, versions = await _state(database)
    assert "app_note" in public

    # the host's autogenerate (its models: app_note) proposes nothing for prism_memory's tables
    env_py = project / "alembic" / "env.py"
    env_py.write_text(
        env_py.read_text().replace(
            "target_metadata = None",
            "import sqlalchemy as sa\n"
            "target_metadata = sa.MetaData()\n"
            "sa.Table('app_note', target_metadata, sa.Column('id', sa.Integer, primary_key=True))",
            1,
        )
    )
    bash("alembic revision --autogenerate -m probe --head app@head")
    (probe,) = (project / "alembic" / "versions").glob("*probe.py")
    body = probe.read_text()
    upgrade_body = body.split("def upgrade() -> None:", 1)[1].split("def downgrade", 1)[0]
    commands = [
        line.strip()
        for line in upgrade_body.splitlines()
        if line.strip() and not line.strip().startswith(("#", '"""'))
    ]
    assert commands == ["pass"], body  # no operation at all: none on prism_memory's tables
    probe.unlink()
    # the host's head depends on prism_memory's, so Alembic records the host's head alone
    (app_head,) = versions
    assert app_head != head

    # step 4: only the host's branch goes
    bash(downgrade)
    prism_after, public, versions = await _state(database)
    assert "app_note" not in public
    assert prism_after == prism, "the library's tables were touched"
    assert versions == {head}

    # the library's own history finds the tables but no revision of its own: it says so, and
    # an upgrade through it (the stores' default) is refused before it touches them
    current = bash(f'prism-memory migrate current --url "{database}"')
    assert current.startswith("no prism_memory revision recorded in "), current
    refused = _bash(f'prism-memory migrate upgrade head --url "{database}"', project, env)
    assert refused.returncode == 1
    assert "skip_migrations=True" in refused.stderr
    assert "already exists" not in refused.stderr
    assert (await _state(database))[0] == prism

    # without `heads`, Alembic says what the docs explain
    bash("alembic upgrade heads")
    failed = _bash("alembic upgrade head", project, env)
    assert failed.returncode != 0
    assert "Multiple head revisions" in failed.stderr
