"""Run, inspect and render prism_memory's Alembic revisions.

The revisions are the one owner of the schema. They run

* by hand: ``prism-memory migrate upgrade head --url ...``, or ``alembic -c "$(prism-memory migrate
  ini-path)" -x url=... upgrade prism_memory@head`` (works from an installed wheel, where the
  revisions ship as the package ``prism_memory.migrations``, and from a checkout or editable install);
* inside a host's own Alembic history: ``version_locations = ... prism_memory.migrations:versions``
  (:data:`VERSION_LOCATION`) and ``alembic upgrade heads`` (branch label ``prism_memory``);
* programmatically, through :func:`upgrade` -- which is what the store factories do unless
  ``skip_migrations=True``.

The revisions read the host's names from :func:`settings_from_config`: ``config.attributes
["prism_memory"]`` (a :class:`MigrationSettings`), else ``-x schema=... -x table=... -x dimension=...``,
else the ini options ``prism_memory_schema`` / ``prism_memory_table`` / ``prism_memory_dimension``,
else the defaults ``prism_memory`` / ``semantic_memory`` / unpinned.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.resources
import io
import os
import re
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from alembic import command
from alembic.config import Config
from alembic.script import ScriptDirectory
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine

from ..errors import ConfigurationError, DimensionMismatchError, PrismMemoryError
from . import _history
from ._engine import create_engine, normalize_url
from ._errors import wrap_db_errors
from .statements.catalog import EMBEDDING_TYPMOD, INVALID_INDEXES, RELATION_EXISTS, SchemaSql
from .tables import (
    DEFAULT_SCHEMA,
    DEFAULT_TABLE,
    Names,
    names_for,
    validate_dimension,
)

if TYPE_CHECKING:
    from sqlalchemy.engine import Connection
    from sqlalchemy.ext.asyncio import AsyncConnection

__all__ = [
    "BRANCH_LABEL",
    "SETTINGS_KEY",
    "VERSION_LOCATION",
    "IncludeName",
    "MigrationSettings",
    "alembic_config",
    "build_ddl",
    "build_search_index_ddl",
    "check_version_locations",
    "current_revision",
    "describe_current",
    "downgrade",
    "exclude_prism_memory",
    "head_revision",
    "ini_path",
    "invalid_indexes",
    "main",
    "migrations_dir",
    "repair_invalid_indexes",
    "revision_settings",
    "search_index_names",
    "settings_from_config",
    "upgrade",
]

BRANCH_LABEL = "prism_memory"
"""The Alembic branch label of every prism_memory revision (``alembic upgrade prism_memory@head``)."""

VERSION_LOCATION = "prism_memory.migrations:versions"
"""The entry a host adds to its ``version_locations`` (an importlib resource; no filesystem path)."""

SETTINGS_KEY = "prism_memory"
"""Key of :class:`MigrationSettings` in ``alembic.config.Config.attributes``."""

_PACKAGE_ROOT = Path(__file__).resolve().parent.parent


@dataclass(frozen=True, slots=True)
class MigrationSettings:
    """The host's names for one prism_memory schema, validated on construction."""

    schema: str = DEFAULT_SCHEMA
    table: str = DEFAULT_TABLE
    dimension: int | None = None

    def __post_init__(self) -> None:
        names_for(self.schema, self.table)
        validate_dimension(self.dimension)

    @property
    def names(self) -> Names:
        """Every object name derived from ``schema`` and ``table``."""
        return names_for(self.schema, self.table)


def _parse_dimension(raw: object) -> int | None:
    if raw is None or raw == "" or (isinstance(raw, str) and raw.lower() in {"none", "null"}):
        return None
    if isinstance(raw, int) and not isinstance(raw, bool):
        return validate_dimension(raw)
    try:
        value = int(str(raw))
    except ValueError as exc:
        raise ConfigurationError(f"dimension must be an integer; got {raw!r}") from exc
    return validate_dimension(value)


def settings_from_config(config: Config | None) -> MigrationSettings:
    """The :class:`MigrationSettings` an Alembic run was given (see the module docstring)."""
    if config is None:
        return MigrationSettings()
    given = config.attributes.get(SETTINGS_KEY)
    if given is not None:
        return MigrationSettings(
            schema=given.schema, table=given.table, dimension=_parse_dimension(given.dimension)
        )
    x_args: dict[str, str] = {}
    cmd_opts = getattr(config, "cmd_opts", None)
    for item in getattr(cmd_opts, "x", None) or ():
        key, sep, value = str(item).partition("=")
        if sep:
            x_args[key.strip()] = value.strip()

    def pick(key: str, default: str | None) -> str | None:
        if key in x_args:
            return x_args[key]
        option = config.get_main_option(f"prism_memory_{key}")
        return option if option else default

    return MigrationSettings(
        schema=pick("schema", DEFAULT_SCHEMA) or DEFAULT_SCHEMA,
        table=pick("table", DEFAULT_TABLE) or DEFAULT_TABLE,
        dimension=_parse_dimension(pick("dimension", None)),
    )


IncludeName = Callable[[str | None, str, Mapping[str, str | None]], bool]
"""The shape of Alembic's ``include_name`` hook: ``(name, type_, parent_names) -> include?``."""


def exclude_prism_memory(config: Config | None = None) -> IncludeName:
    """An ``include_name`` hook for a host's own ``env.py``: the host's autogenerate (and ``alembic
    check``) leaves prism_memory's tables to prism_memory's revisions, with ``include_schemas=True``
    too. Pass it to ``context.configure(..., include_name=exclude_prism_memory(config))``.

    prism_memory's names come from ``config`` as its revisions read them
    (:func:`settings_from_config`: the ``prism_memory_schema`` / ``prism_memory_table`` options of
    the host's ``alembic.ini``). Every ``package:folder`` entry of the config's
    ``version_locations`` is checked too -- Alembic itself skips a folder it cannot find without a
    word -- and one that does not resolve raises :class:`ConfigurationError`.
    """
    settings = settings_from_config(config)
    if config is not None:
        check_version_locations(config)
    names = settings.names
    own = {*names.tables, names.version_table}
    schemas = {settings.schema, None} if settings.schema == "public" else {settings.schema}

    def include_name(name: str | None, type_: str, parent_names: Mapping[str, str | None]) -> bool:
        if type_ == "table":
            return not (name in own and parent_names.get("schema_name") in schemas)
        return True

    return include_name


def check_version_locations(config: Config) -> None:
    """Raise :class:`ConfigurationError` if a ``package:folder`` entry of ``version_locations``
    names a package or folder that does not exist (Alembic would skip it silently)."""
    for location in ScriptDirectory.from_config(config).version_locations or ():
        if os.path.isabs(location) or ":" not in location:
            continue
        package, _, folder = location.partition(":")
        try:
            found = importlib.resources.files(package).joinpath(folder).is_dir()
        except ImportError as exc:
            raise ConfigurationError(
                f"version_locations names {location!r}, but {package!r} cannot be imported: {exc}"
            ) from exc
        if not found:
            raise ConfigurationError(
                f"version_locations names {location!r}, but {package!r} has no folder {folder!r}"
            )


def revision_settings() -> MigrationSettings:
    """The settings of the Alembic run in progress; revisions call this for every object name."""
    from alembic import op

    return settings_from_config(op.get_context().config)


def migrations_dir() -> Path:
    """The Alembic script directory, the package ``prism_memory.migrations``: shipped in a wheel,
    and a link to the repository's top-level ``migrations/`` in a checkout or editable install."""
    found = _PACKAGE_ROOT / "migrations"
    if (found / "env.py").is_file() and (found / "versions").is_dir():
        return found
    raise ConfigurationError(
        f"prism_memory's Alembic revisions were not found in {found}: this install of "
        "prism_memory is broken (reinstall it; in a checkout, prism_memory/migrations must link "
        "to the top-level migrations/)"
    )


def ini_path() -> Path:
    """The ``alembic.ini`` next to the revisions' ``env.py``: ``prism_memory/migrations/alembic.ini``."""
    return migrations_dir() / "alembic.ini"


def alembic_config(
    *,
    schema: str = DEFAULT_SCHEMA,
    table: str = DEFAULT_TABLE,
    dimension: int | None = None,
    url: str | None = None,
    stdout: Any = None,
) -> Config:
    """An Alembic :class:`~alembic.config.Config` for prism_memory's revisions and these names.

    ``script_location`` points at :func:`migrations_dir`, so the same call works in a checkout and
    from an installed wheel. ``url`` (optional) becomes ``sqlalchemy.url`` for env.py to connect with.
    """
    settings = MigrationSettings(schema=schema, table=table, dimension=dimension)
    config = Config(str(ini_path()), stdout=stdout if stdout is not None else sys.stdout)
    config.set_main_option("script_location", str(migrations_dir()))
    config.set_main_option("version_locations", str(migrations_dir() / "versions"))
    if url is not None:
        config.set_main_option("sqlalchemy.url", normalize_url(url).replace("%", "%%"))
    config.attributes[SETTINGS_KEY] = settings
    return config


def invalid_indexes(connection: Connection, names: Names) -> tuple[str, ...]:
    """The names of :data:`INVALID_INDEXES` in ``names.schema``."""
    rows = connection.execute(
        text(INVALID_INDEXES), {"schema": names.schema, "tables": list(names.tables)}
    )
    return tuple(rows.scalars())


def repair_invalid_indexes(connection: Connection, names: Names) -> tuple[str, ...]:
    """Rebuild every index a failed concurrent build left INVALID; returns their names.

    An INVALID index is not used by queries but is still maintained by every write, and ``CREATE
    INDEX CONCURRENTLY IF NOT EXISTS`` skips it, so rerunning the revision would never mend it.
    ``REINDEX INDEX CONCURRENTLY`` rebuilds it without blocking writers (autocommit, outside any
    transaction); leftovers of a failed ``REINDEX CONCURRENTLY`` itself (``*_ccnew``) are dropped.
    Runs at the end of every online upgrade (:mod:`migrations.env`), under the migration lock.
    """
    broken = invalid_indexes(connection, names)
    if not broken:
        return ()
    previous = connection.get_isolation_level()
    if connection.in_transaction():
        connection.commit()
    connection.execution_options(isolation_level="AUTOCOMMIT")
    sql = SchemaSql(names)
    try:
        for name in broken:
            if re.search(r"_ccnew\d*$", name):
                connection.execute(text(sql.drop_index(name)))
            else:
                connection.execute(text(sql.reindex(name)))
    finally:
        connection.commit()  # ends SQLAlchemy's own autobegun (no-op) transaction
        connection.execution_options(isolation_level=previous)
    return broken


def head_revision() -> str:
    """The head revision id of the ``prism_memory`` branch."""
    script = ScriptDirectory.from_config(alembic_config())
    heads = script.get_revisions(f"{BRANCH_LABEL}@head")
    if len(heads) != 1 or heads[0] is None:
        raise ConfigurationError(f"expected one head for {BRANCH_LABEL}, found {len(heads)}")
    return heads[0].revision


def _revision_ids() -> list[str]:
    """Every revision id of the ``prism_memory`` branch."""
    script = ScriptDirectory.from_config(alembic_config())
    return [revision.revision for revision in script.walk_revisions()]


async def _with_connection(
    engine_or_url: AsyncEngine | str,
    fn: Callable[[Connection], Any],
    action: str = "running prism_memory migrations",
) -> Any:
    owned = not isinstance(engine_or_url, AsyncEngine)
    engine = (
        engine_or_url
        if isinstance(engine_or_url, AsyncEngine)
        else create_engine(engine_or_url, pooled=False)
    )
    try:
        with wrap_db_errors(action):
            conn: AsyncConnection
            async with engine.connect() as conn:
                return await conn.run_sync(fn)
    finally:
        if owned:
            await engine.dispose()


def _check_pinned_width(connection: Connection, settings: MigrationSettings) -> None:
    """Refuse an upgrade asked for ``dimension=N`` of an existing table pinned to another width
    (or unpinned): the revisions never re-type a column, so they would silently do nothing."""
    if settings.dimension is None:
        return
    names = settings.names
    typmod = connection.execute(
        text(EMBEDDING_TYPMOD), {"relation": SchemaSql(names).entries}
    ).scalar_one_or_none()
    connection.rollback()  # the look ends its own transaction: Alembic begins the next
    if typmod is None:
        return  # no table yet: the revisions create it pinned to the width asked for
    pinned = int(typmod) if int(typmod) > 0 else None
    if pinned != settings.dimension:
        where = f"{names.schema}.{names.entries}.embedding"
        held = f"pinned to vector({pinned})" if pinned is not None else "not pinned"
        raise DimensionMismatchError(
            f"{where} is {held} but dimension {settings.dimension} was asked for: nothing was "
            "changed (the revisions never re-type an existing column)"
        )


def _run_command(config: Config, action: str, revision: str) -> Callable[[Connection], None]:
    def run(connection: Connection) -> None:
        config.attributes["connection"] = connection
        try:
            if action == "upgrade":
                settings = settings_from_config(config)
                _history.check_own_history(connection, settings.names, _revision_ids())
                _check_pinned_width(connection, settings)
                command.upgrade(config, revision)
            else:
                command.downgrade(config, revision)
        finally:
            config.attributes.pop("connection", None)

    return run


async def upgrade(
    engine_or_url: AsyncEngine | str,
    *,
    schema: str = DEFAULT_SCHEMA,
    table: str = DEFAULT_TABLE,
    dimension: int | None = None,
    revision: str = "head",
) -> None:
    """Upgrade the schema to ``revision`` (default: the head of the ``prism_memory`` branch).

    Concurrent callers are serialised by an advisory lock, so many workers may start at once.
    """
    config = alembic_config(schema=schema, table=table, dimension=dimension, stdout=io.StringIO())
    await _with_connection(engine_or_url, _run_command(config, "upgrade", _qualify(revision)))


async def downgrade(
    engine_or_url: AsyncEngine | str,
    *,
    schema: str = DEFAULT_SCHEMA,
    table: str = DEFAULT_TABLE,
    dimension: int | None = None,
    revision: str,
) -> None:
    """Downgrade the schema to ``revision`` (required; ``base`` drops every prism_memory table)."""
    config = alembic_config(schema=schema, table=table, dimension=dimension, stdout=io.StringIO())
    await _with_connection(engine_or_url, _run_command(config, "downgrade", _qualify(revision)))


def _qualify(revision: str) -> str:
    if revision == "head":
        return f"{BRANCH_LABEL}@head"
    if revision == "base":
        return "base"
    return revision


async def current_revision(
    engine_or_url: AsyncEngine | str,
    *,
    schema: str = DEFAULT_SCHEMA,
    table: str = DEFAULT_TABLE,
) -> str | None:
    """The revision recorded in prism_memory's own version table, or ``None`` if there is none."""
    names = names_for(schema, table)

    def read(connection: Connection) -> str | None:
        sql = SchemaSql(names)
        exists = connection.execute(text(RELATION_EXISTS), {"name": sql.version_table}).scalar_one()
        if not exists:
            return None
        rows = connection.execute(text(sql.versions)).scalars()
        found = list(rows)
        return found[0] if len(found) == 1 else None

    result = await _with_connection(engine_or_url, read, "reading the schema revision")
    return result if isinstance(result, str) or result is None else None


async def describe_current(
    engine_or_url: AsyncEngine | str,
    *,
    schema: str = DEFAULT_SCHEMA,
    table: str = DEFAULT_TABLE,
) -> str:
    """What ``migrate current`` prints: the revision prism_memory's own version table records,
    else one sentence -- a host's version table that records a prism_memory revision (its own
    Alembic history ran them: open the stores with ``skip_migrations=True``), or none at all."""
    names = names_for(schema, table)
    ids = _revision_ids()
    found = await _with_connection(
        engine_or_url,
        lambda connection: _history.describe_current(connection, names, ids),
        "reading the schema revision",
    )
    return str(found)


def build_ddl(
    *,
    schema: str = DEFAULT_SCHEMA,
    table: str = DEFAULT_TABLE,
    dimension: int | None = None,
) -> str:
    """The SQL the revisions emit from an empty database to head (Alembic offline mode).

    Everything, in revision order: the extension and schema, every table, constraint and index of
    ``prism_memory_0001``, the entries' HNSW index of ``prism_memory_0002`` (pinned dimensions up
    to 2,000 only; ``CREATE INDEX CONCURRENTLY`` between ``COMMIT`` and ``BEGIN``) and its ``DROP
    INDEX CONCURRENTLY`` in ``prism_memory_0010``, the RAG chunks table, and the version-table
    bookkeeping.
    """
    buffer = io.StringIO()
    config = alembic_config(schema=schema, table=table, dimension=dimension, stdout=buffer)
    config.output_buffer = buffer
    command.upgrade(config, f"{BRANCH_LABEL}@head", sql=True)
    return buffer.getvalue()


_CREATE_INDEX = re.compile(
    r'^CREATE INDEX (?:CONCURRENTLY )?(?:IF NOT EXISTS )?"?(?P<name>[a-z_][a-z0-9_]*)"? ON [^;]*;$',
    re.MULTILINE,
)


def search_index_names(names: Names) -> tuple[str, ...]:
    """The indexes :func:`build_search_index_ddl` returns: the ``text_tsv`` GIN (lexical leg). The
    entries table has no HNSW index at head, whatever ``dimension`` is (``prism_memory_0010``)."""
    return (names.ix_tsv,)


def build_search_index_ddl(
    *,
    schema: str = DEFAULT_SCHEMA,
    table: str = DEFAULT_TABLE,
    dimension: int | None = None,
) -> str:
    """Only the search index of :func:`build_ddl`, verbatim.

    That is the ``CREATE INDEX ... USING gin (text_tsv)`` of ``prism_memory_0001`` (the lexical
    leg), ending with ``;`` and a blank line; the HNSW index ``prism_memory_0002`` built and
    ``prism_memory_0010`` dropped is not part of the schema at head. No tables, no ``text_tsv``
    column (it is part of ``CREATE TABLE``), no B-tree or lineage GIN index, no transaction control
    and no version-table bookkeeping.
    """
    script = build_ddl(schema=schema, table=table, dimension=validate_dimension(dimension))
    wanted = search_index_names(names_for(schema, table))
    found = {match["name"]: match.group(0) for match in _CREATE_INDEX.finditer(script)}
    missing = [name for name in wanted if name not in found]
    if missing:  # an internal inconsistency: the revisions and this list are tested together
        raise ConfigurationError(f"the revisions did not emit the search indexes {missing}")
    return "".join(f"{found[name]}\n\n" for name in wanted)


# ---- command line ------------------------------------------------------------------------------


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m prism_memory.postgres.migrate",
        description="Run prism_memory's Alembic revisions against a PostgreSQL database.",
    )
    sub = parser.add_subparsers(dest="action", required=True)
    for action in ("upgrade", "downgrade", "current", "sql"):
        cmd = sub.add_parser(action)
        if action != "sql":
            cmd.add_argument("--url", required=True, help="postgresql[+asyncpg]://... URL")
        cmd.add_argument("--schema", default=DEFAULT_SCHEMA)
        cmd.add_argument("--table", default=DEFAULT_TABLE)
        cmd.add_argument("--dimension", type=int, default=None)
        if action == "upgrade":
            cmd.add_argument("--revision", default="head")
        elif action == "downgrade":
            # No default: a downgrade to ``base`` drops every table, so it is never implied.
            cmd.add_argument("--revision", required=True, help="a revision id, or base")
    sub.add_parser("ini-path", help="print the path of the shipped alembic.ini")
    sub.add_parser("script-location", help="print the path of the Alembic script directory")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Command-line entry point; returns the process exit code."""
    args = _parser().parse_args(argv)
    try:
        if args.action == "ini-path":
            print(ini_path())
        elif args.action == "script-location":
            print(migrations_dir())
        elif args.action == "sql":
            print(build_ddl(schema=args.schema, table=args.table, dimension=args.dimension))
        elif args.action == "current":
            print(asyncio.run(describe_current(args.url, schema=args.schema, table=args.table)))
        else:
            run = upgrade if args.action == "upgrade" else downgrade
            before = asyncio.run(current_revision(args.url, schema=args.schema, table=args.table))
            asyncio.run(
                run(
                    args.url,
                    schema=args.schema,
                    table=args.table,
                    dimension=args.dimension,
                    revision=args.revision,
                )
            )
            after = asyncio.run(current_revision(args.url, schema=args.schema, table=args.table))
            verb = "upgraded" if args.action == "upgrade" else "downgraded"
            done = (
                f"{verb} {args.schema}.{args.table}: {before or '(empty)'} -> {after or '(empty)'}"
            )
            print(done if before != after else f"{args.schema}.{args.table} is already at {after}")
    except ConfigurationError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except PrismMemoryError as exc:  # a refused connection, a failed statement: one line
        print(f"error: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    # Run the canonical module's ``main`` (not this ``__main__`` copy), so env.py and the CLI share
    # one MigrationSettings class.
    from prism_memory.postgres.migrate import main as _main

    raise SystemExit(_main())
