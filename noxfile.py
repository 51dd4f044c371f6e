"""Developer sessions: ``nox -s tests lint types`` before you push."""

import nox

nox.options.sessions = ["tests", "lint", "types"]
nox.options.reuse_existing_virtualenvs = True


@nox.session(python="3.11")
def tests(session: nox.Session) -> None:
    """The whole test suite (real PostgreSQL: PRISM_TEST_POSTGRES_URL, Docker, or embedded)."""
    session.install("-e", ".[test]")
    session.run("python", "-m", "pytest", *session.posargs)


@nox.session(python="3.11")
def lint(session: nox.Session) -> None:
    """ruff check and ruff format --check."""
    session.install("-e", ".[lint]")
    session.run("ruff", "check", ".")
    session.run("ruff", "format", "--check", ".")


@nox.session(python="3.11")
def types(session: nox.Session) -> None:
    """mypy --strict over the package."""
    session.install("-e", ".[lint,test]")
    session.run("mypy")


@nox.session(python="3.11")
def docs(session: nox.Session) -> None:
    """mkdocs build --strict (the examples themselves run in tests/docs)."""
    session.install("-e", ".[docs]")
    session.run("mkdocs", "build", "--strict", "--site-dir", "site")


@nox.session(python="3.11")
def mutation(session: nox.Session) -> None:
    """Mutation testing (minutes for the pure modules, much longer for the ones whose tests need
    servers; not in the default sessions or .ci/run).

    ``.[test]`` brings what every covered module's tests import: the MCP SDK, the OpenTelemetry API
    and SDK, the embedded PostgreSQL; PgBouncer is a system program (Debian ``pgbouncer``), needed
    by the executor's and the engine's tests. ``nox -s mutation -- --module limits`` runs one
    module; see CONTRIBUTING.md.
    """
    session.install("-e", ".[test]")
    session.run("python", "tools/mutate.py", *session.posargs)


@nox.session(python="3.11")
def bench(session: nox.Session) -> None:
    """The speed suite (benchmarks/speed.py), on demand only: ``nox -s bench -- --rows 100000``."""
    session.install("-e", ".[bench]")
    session.run("python", "benchmarks/speed.py", *session.posargs)
