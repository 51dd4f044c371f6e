"""The ``prism-memory`` command tree and its entry point, :func:`main`."""

from __future__ import annotations

import logging
import sys
import traceback
from collections.abc import Sequence
from typing import Annotated

import typer

from ._demo import demo
from ._dev_server import dev_server
from ._import import import_command
from ._mcp import mcp
from ._migrate import migrate_app
from ._models import models_app
from ._ops import doctor, stats, worker
from ._rls import rls_app
from ._thread_ops import export, rebuild

app = typer.Typer(
    name="prism-memory",
    help="prism_memory's demo and operator commands (`prism-memory COMMAND --help` for each).",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
)
app.add_typer(migrate_app, name="migrate")
app.add_typer(models_app, name="models")
app.add_typer(rls_app, name="rls")


@app.callback()
def _root(
    verbose: Annotated[
        bool,
        typer.Option("--verbose", "-v", help="show tracebacks of errors, and Alembic's log"),
    ] = False,
) -> None:
    """prism_memory's demo and operator commands."""
    # Alembic logs each plugin and revision it loads at INFO: one command, one line of output
    logging.getLogger("alembic").setLevel(logging.NOTSET if verbose else logging.WARNING)


app.command()(demo)
app.command()(doctor)
app.command()(stats)
app.command()(export)
app.command()(rebuild)
app.command("import")(import_command)
app.command()(worker)
app.command("dev-server")(dev_server)
app.command()(mcp)


def main(argv: Sequence[str] | None = None) -> int:
    """Command-line entry point; returns the exit code.

    Usage errors (an unknown option, a missing ``--url``) print typer's message and return 2; any
    other error prints one line on stderr (``--verbose`` adds the traceback) and returns 1.
    """
    args = list(sys.argv[1:] if argv is None else argv)
    verbose = "--verbose" in args or "-v" in args
    try:
        # standalone mode: typer reports its own usage errors (exit 2) and aborts (exit 1) and
        # ends with SystemExit; everything else a command raises comes through to the handler below
        app(args=args, prog_name="prism-memory", standalone_mode=True)
    except SystemExit as exc:
        code = exc.code
        if code is None:
            return 0
        if isinstance(code, int):
            return code
        print(code, file=sys.stderr)
        return 1
    except Exception as exc:  # noqa: BLE001 - the one place errors become an exit code
        if verbose:
            traceback.print_exc()
        message = str(exc).strip().splitlines()
        print(f"error: {message[0] if message else type(exc).__name__}", file=sys.stderr)
        return 1
    return 0
