"""``prism-memory`` (also ``python -m prism_memory``): the demo and the operator's commands.

``demo`` runs remember → recall → working memory → the prompt block (in memory, or ``--postgres``);
``worker`` runs the all-scopes indexing queue as a service; ``migrate`` runs the Alembic revisions
with explicit targets; ``doctor`` checks a database; ``stats`` counts; ``export`` and ``rebuild``
loop over cursors with a progress bar and resume after Ctrl-C; ``import`` bulk-imports a file (or a
LangGraph store) and resumes after a kill; ``models`` changes the embedding model without
downtime (start, backfill, compare, switch, rollback, drop). Errors print one line (``--verbose``
adds the traceback) and exit non-zero.

``_app`` holds the command tree and :func:`main`; each command family has a module of its own.
"""

from ._app import app, main
from ._demo import run_demo
from ._embedder import load_embedder

__all__ = ["app", "load_embedder", "main", "run_demo"]
