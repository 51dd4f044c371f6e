"""An import's checkpoint: how many entries of which source are stored in which target."""

from __future__ import annotations

import json
import os
import uuid
import weakref
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..errors import ConfigurationError
from ..stores.base import EntryStore

__all__ = ["ImportCheckpoint", "import_target"]

_INSTANCES: weakref.WeakKeyDictionary[EntryStore, str] = weakref.WeakKeyDictionary()
"""A token per store instance that names no database (an in-memory store): its rows die with it,
so a checkpoint names the instance, and a new process's store never resumes an old one's."""


def import_target(store: EntryStore) -> str:
    """What names where an import's rows go, for its checkpoint: on PostgreSQL the server, the
    database, the schema and the entries table (never a user name nor a password); for a store of
    another kind, its class and this instance."""
    engine: Any = getattr(store, "engine", None)
    tables: Any = getattr(store, "tables", None)
    url = getattr(engine, "url", None)
    names = getattr(tables, "names", None)
    if url is not None and names is not None:
        socket = url.query.get("host")  # a unix socket's directory, given in the query
        return json.dumps(
            {
                "backend": "postgresql",
                "server": f"{url.host or socket or ''}:{url.port or ''}",
                "database": url.database,
                "schema": names.schema,
                "table": names.entries,
            },
            sort_keys=True,
            default=str,
        )
    token = _INSTANCES.get(store)
    if token is None:
        token = _INSTANCES[store] = uuid.uuid4().hex
    return json.dumps({"backend": type(store).__qualname__, "instance": token}, sort_keys=True)


@dataclass(slots=True)
class ImportCheckpoint:
    """A resumable import's state, in a small JSON file written after every committed batch:
    how many entries of the stream are done, of which ``source`` (a file's identity: its path,
    size, modification time and a digest of its start, with the reader's options; ``None`` for a
    stream that names none) into which ``target`` (:func:`import_target`). A rerun with the same
    file, source and target skips the entries done; one of another source or target starts from
    the first entry (:attr:`ImportReport.restarted`). A kill between a commit and the file's
    update only makes the rerun write that batch again, which changes nothing (existing ids are
    left as stored)."""

    path: Path
    done: int = 0
    inserted: int = field(default=0)
    source: str | None = None
    target: str | None = None

    @classmethod
    def load(cls, path: str | os.PathLike[str]) -> ImportCheckpoint:
        """The checkpoint at ``path``, or a fresh one (nothing done) when there is no file."""
        where = Path(path)
        try:
            raw = json.loads(where.read_text(encoding="utf-8"))
        except FileNotFoundError:
            return cls(where)
        except (OSError, ValueError) as exc:
            raise ConfigurationError("the import checkpoint file is unreadable") from exc
        if not isinstance(raw, dict):
            raise ConfigurationError("the import checkpoint file holds no JSON object")
        done, inserted = raw.get("done"), raw.get("inserted", 0)
        if not isinstance(done, int) or isinstance(done, bool) or done < 0:
            raise ConfigurationError("the import checkpoint file holds no valid 'done' count")
        if not isinstance(inserted, int) or isinstance(inserted, bool):
            raise ConfigurationError("the import checkpoint file holds no valid 'inserted' count")
        source, target = raw.get("source"), raw.get("target")
        return cls(
            where,
            done=done,
            inserted=inserted,
            source=source if isinstance(source, str) else None,
            target=target if isinstance(target, str) else None,
        )

    def resumes(self, source: str | None, target: str) -> bool:
        """Whether an import of ``source`` into ``target`` may skip what this checkpoint counts
        done: it was left by an import of the same source into the same target. A checkpoint
        that names no target (written before checkpoints named one) never resumes."""
        return self.target == target and self.source == source

    def save(self) -> None:
        """Write the state atomically (a temporary file renamed over the old one)."""
        temporary = self.path.with_name(self.path.name + ".tmp")
        state = {
            "done": self.done,
            "inserted": self.inserted,
            "source": self.source,
            "target": self.target,
        }
        temporary.write_text(json.dumps(state), encoding="utf-8")
        os.replace(temporary, self.path)
