"""``prism-memory dev-server``: an embedded PostgreSQL kept running for the other commands."""

from __future__ import annotations

import shlex
import signal
import sys
import threading
from pathlib import Path
from types import FrameType
from typing import Annotated

import typer

from ._options import URL_ENV


def dev_server(
    data_dir: Annotated[
        Path | None,
        typer.Option(
            "--data-dir",
            help="keep the data in this directory (default: a temporary one, deleted on stop)",
        ),
    ] = None,
) -> None:
    """Run an embedded PostgreSQL + pgvector in the foreground until Ctrl-C or SIGTERM.

    The first line on stdout is the postgresql+asyncpg URL to use; stderr says how to export it.
    For local use only (the postgres-embedded extra): a unix socket, no network listener.
    A server left running in --data-dir by a dev-server that was killed is taken over (stderr
    says so) and stopped on exit; one another live process serves is refused. It says "stopped"
    only once the server is: else it names the server still running and exits 1.
    """
    from ..errors import StorageError
    from ..postgres.embedded import start_embedded_postgres

    stop = threading.Event()

    def on_signal(signum: int, frame: FrameType | None) -> None:
        stop.set()

    # first, so a signal that arrives while the server starts still stops it cleanly
    previous = {
        signum: signal.signal(signum, on_signal) for signum in (signal.SIGINT, signal.SIGTERM)
    }
    try:
        server = start_embedded_postgres(data_dir, exclusive=True)
        try:
            print(server.url, flush=True)
            kept = f"data kept in {server.data_dir}" if data_dir is not None else "data deleted"
            if server.adopted is not None:
                print(
                    f"# took over the embedded PostgreSQL (process {server.adopted}) left running "
                    f"in {server.data_dir} by a process that is gone; it stops with this one",
                    file=sys.stderr,
                    flush=True,
                )
            print(
                f"export {URL_ENV}={shlex.quote(server.url)}\n"
                f"# Ctrl-C or SIGTERM stops the server ({kept})",
                file=sys.stderr,
                flush=True,
            )
            while not stop.wait(0.5):
                pass
        finally:
            server.close()
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
    still = server.running_pid()
    if still is not None:
        raise StorageError(
            f"the embedded PostgreSQL in {server.data_dir} is still running (process {still}): "
            f"another process uses it; stop it with: {server.bin_dir / 'pg_ctl'} -D "
            f"{server.data_dir} stop"
        )
    print("stopped the embedded PostgreSQL", file=sys.stderr, flush=True)
