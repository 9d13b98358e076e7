"""The session registry on disk: SQLite under the data directory.

The vault is stored too (the sessions must keep working after a restart); the database file is
created 0600 and lives in a root-only directory, and nothing reads it back but the daemon.
"""

from __future__ import annotations

import os
import sqlite3
from dataclasses import dataclass
from pathlib import Path

from envd.sessions.model import SessionOptions

_SCHEMA = """
CREATE TABLE IF NOT EXISTS sessions (
    session_id TEXT PRIMARY KEY,
    tenant     TEXT NOT NULL,
    options    TEXT NOT NULL,
    spec       TEXT NOT NULL,
    created_at TEXT NOT NULL
);
"""


@dataclass
class StoredSession:
    session_id: str
    tenant: str
    options: SessionOptions
    spec_json: str
    created_at: str


class SessionStore:
    def __init__(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        if not path.exists():
            os.close(os.open(path, os.O_CREAT | os.O_WRONLY, 0o600))
        self._db = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("PRAGMA synchronous=NORMAL")
        self._db.executescript(_SCHEMA)

    def put(self, session_id: str, tenant: str, options: SessionOptions, spec_json: str,
            created_at: str) -> None:
        self._db.execute(
            "INSERT OR REPLACE INTO sessions (session_id, tenant, options, spec, created_at)"
            " VALUES (?, ?, ?, ?, ?)",
            (session_id, tenant, options.model_dump_json(), spec_json, created_at),
        )

    def delete(self, session_id: str) -> None:
        self._db.execute("DELETE FROM sessions WHERE session_id = ?", (session_id,))

    def all(self) -> list[StoredSession]:
        rows = self._db.execute(
            "SELECT session_id, tenant, options, spec, created_at FROM sessions"
        ).fetchall()
        return [
            StoredSession(
                session_id=row[0],
                tenant=row[1],
                options=SessionOptions.model_validate_json(row[2]),
                spec_json=row[3],
                created_at=row[4],
            )
            for row in rows
        ]

    def close(self) -> None:
        self._db.close()
