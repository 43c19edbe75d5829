"""Persistent response cache in SQLite, shared safely by every xdist worker of a run.

WAL mode lets many processes read while one writes; a busy timeout makes concurrent writers
wait instead of failing. The key covers everything that changes a model's answer (see
`cache_key`) and never the API key.
"""

from __future__ import annotations

import hashlib
import json
import sqlite3
import threading
import time
from dataclasses import dataclass
from pathlib import Path


def cache_key(
    *,
    base_url: str,
    model: str,
    messages: list[dict[str, str]],
    params: dict,
    response_format: dict | None,
    repeat: int,
    attempt: int,
    tag: str = "",
) -> str:
    """Hash of every output-affecting input of one chat call. `tag` names a version the request
    text does not show (the judge's rubric version); an empty tag leaves the key as it was."""
    payload = {
        "base_url": base_url.rstrip("/"),
        "model": model,
        "messages": messages,
        "params": params,
        "response_format": response_format,
        "repeat": repeat,
        "attempt": attempt,
    }
    if tag:
        payload["tag"] = tag
    encoded = json.dumps(payload, sort_keys=True, ensure_ascii=False, separators=(",", ":"))
    return hashlib.sha256(encoded.encode()).hexdigest()


@dataclass(frozen=True)
class CachedResponse:
    text: str
    model_version: str
    refusal: str | None = None
    """A judge's refusal (`message.refusal`), kept so that replay meets it again; text is then ""."""


class ResponseCache:
    """A key -> response table in one SQLite file."""

    def __init__(self, path: Path):
        path.parent.mkdir(parents=True, exist_ok=True)
        self.path = path
        self._lock = threading.Lock()
        self._db = sqlite3.connect(path, timeout=60, check_same_thread=False, isolation_level=None)
        self._db.execute("PRAGMA busy_timeout = 60000")
        self._db.execute("PRAGMA journal_mode = WAL")
        self._db.execute("PRAGMA synchronous = NORMAL")
        self._db.execute(
            "CREATE TABLE IF NOT EXISTS responses ("
            " key TEXT PRIMARY KEY, text TEXT NOT NULL, model_version TEXT NOT NULL,"
            " created REAL NOT NULL)"
        )
        columns = {row[1] for row in self._db.execute("PRAGMA table_info(responses)")}
        if "refusal" not in columns:  # a cache file from before refusals were kept
            try:
                self._db.execute("ALTER TABLE responses ADD COLUMN refusal TEXT")
            except sqlite3.OperationalError as exc:
                if "duplicate column" not in str(exc):  # another process added it just now
                    raise

    def get(self, key: str) -> CachedResponse | None:
        with self._lock:
            row = self._db.execute(
                "SELECT text, model_version, refusal FROM responses WHERE key = ?", (key,)
            ).fetchone()
        return CachedResponse(*row) if row else None

    def put(self, key: str, response: CachedResponse) -> None:
        with self._lock:
            self._db.execute(
                "INSERT OR REPLACE INTO responses (key, text, model_version, created, refusal) VALUES (?, ?, ?, ?, ?)",
                (key, response.text, response.model_version, time.time(), response.refusal),
            )

    def __len__(self) -> int:
        with self._lock:
            return self._db.execute("SELECT COUNT(*) FROM responses").fetchone()[0]

    def close(self) -> None:
        with self._lock:
            self._db.close()
