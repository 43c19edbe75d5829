"""Persistent response cache in SQLite, shared safely by every xdist worker of a run.

WAL mode lets many processes read while one writes; a busy timeout makes concurrent writers
wait instead of failing. Every answer is committed as it arrives, so a run killed at any moment
(kill -9 included) keeps every answer it received. The key covers everything that changes a
model's answer (see `cache_key`) and never the API key.

Each conversation (target x scenario x repeat) is its own sample: its identity is part of the
key, so two conversations that send the very same request (the explicit and implicit variants of
a scenario open alike; two targets that reply alike ask the judge alike) each keep their own
answer, and replaying a run gives back exactly what each conversation was told, with a model that
answers at random too.

Two runs on one file at once do not pay twice for one request: before calling, a run claims the
key (a row naming its process and host, leased for a minute and renewed while the call is queued
or on its way); another run that meets a live claim waits for the answer instead of calling
(`engine.providers`). A failed call releases its claim; a claim whose process has stopped (on this
host) or whose lease ran out (its owner stopped renewing it) is taken over.
"""

from __future__ import annotations

import hashlib
import json
import os
import socket
import sqlite3
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from psychosis_tests.common.errors import CacheError, ConfigError
from psychosis_tests.inputs.usage import Usage


def cache_key(
    *,
    base_url: str,
    model: str,
    messages: list[dict[str, str]],
    params: dict,
    response_format: dict | None,
    conversation: str,
    repeat: int,
    attempt: int,
    tag: str = "",
) -> str:
    """Hash of every output-affecting input of one chat call, and of the conversation it belongs to.
    `tag` names a version the request text does not show (the judge's rubric version); an empty
    tag leaves the key as it was."""
    payload = {
        "conversation": conversation,
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
    finish_reason: str | None = None
    """Why the endpoint stopped: "stop", "length", ..."""
    usage: Usage | None = None
    """The usage the endpoint reported when the answer was recorded (None in older caches)."""


@dataclass(frozen=True)
class Claim:
    """Who is calling for a key right now: a cache instance (`owner`) in process `pid` on `host`,
    trusted until `expires` (the end of its lease, which the owner renews while its call is on its
    way, in wall-clock seconds)."""

    owner: str
    host: str
    pid: int
    expires: float


def open_database(path: Path) -> sqlite3.Connection:
    """A SQLite file (its folder made) that every xdist worker and thread of a run may share: each
    statement commits as it runs, writers wait up to a minute for each other, readers never wait
    (write-ahead log). The response cache and the batch store both live in one."""
    path.parent.mkdir(parents=True, exist_ok=True)
    db = sqlite3.connect(path, timeout=60, check_same_thread=False, isolation_level=None)
    db.execute("PRAGMA journal_mode = WAL")
    return db


class ResponseCache:
    """A key -> response table in one SQLite file."""

    def __init__(self, path: Path, *, writes: bool = True, clock: Callable[[], float] = time.time):
        """`writes`: the run keeps its answers here (every mode but replay), so a file SQLite can
        only open read-only (write-protected) is refused at once: its answers would be paid for,
        then lost as each case errors. `clock` dates claims (a test's fake clock)."""
        self.path = path
        self.clock = clock
        self.owner = uuid.uuid4().hex
        self.host = socket.gethostname()
        self.pid = os.getpid()
        self._lock = threading.Lock()
        try:
            self._open(path, writes)
            if writes:
                self._db.execute("DELETE FROM responses WHERE 0")  # changes nothing, but needs write access
        except sqlite3.DatabaseError as exc:  # not SQLite, or cut short: a config error, not a traceback
            if getattr(exc, "sqlite_errorname", "") == "SQLITE_READONLY":
                raise ConfigError(
                    f"is read-only ({exc}): the answers a run pays for could not be kept; make it writable, "
                    "choose another --cache-path, or only read it with --cache-mode replay",
                    file=path,
                ) from None
            if not os.access(path.parent, os.W_OK):  # the file may be whole: SQLite's log needs the folder
                raise ConfigError(
                    f"cannot be opened ({exc}): its folder {path.parent} is not writable, and SQLite keeps a "
                    "write-ahead log beside the file, in replay too; choose another --cache-path",
                    file=path,
                ) from None
            raise ConfigError(
                f"cannot be read as the response cache ({exc}); move it away or choose another --cache-path",
                file=path,
            ) from None
        except OSError as exc:  # its folder cannot be made (no permission, a read-only place)
            raise ConfigError(f"cannot be made ({exc.strerror}: {exc.filename}); choose another --cache-path", file=path) from None

    def _open(self, path: Path, writes: bool) -> None:
        self._db = open_database(path)
        self._db.execute("PRAGMA busy_timeout = 60000")
        self._db.execute("PRAGMA synchronous = NORMAL")
        self._db.execute(
            "CREATE TABLE IF NOT EXISTS responses ("
            " key TEXT PRIMARY KEY, text TEXT NOT NULL, model_version TEXT NOT NULL,"
            " created REAL NOT NULL, refusal TEXT, finish_reason TEXT, usage TEXT)"
        )
        columns = {row[1] for row in self._db.execute("PRAGMA table_info(responses)")}
        for column in ("refusal", "finish_reason", "usage"):  # a file written before these were kept
            if column in columns:
                continue
            try:
                self._db.execute(f"ALTER TABLE responses ADD COLUMN {column} TEXT")
            except sqlite3.OperationalError as exc:
                if "duplicate column" not in str(exc):  # another process added it just now
                    raise
        if writes:  # replay never claims, and may read a file it cannot write
            self._db.execute(
                "CREATE TABLE IF NOT EXISTS claims ("
                " key TEXT PRIMARY KEY, owner TEXT NOT NULL, host TEXT NOT NULL, pid INTEGER NOT NULL, expires REAL NOT NULL)"
            )

    def _failed(self, exc: sqlite3.DatabaseError, doing: str) -> CacheError:
        return CacheError(f"the response cache {self.path} could not {doing} ({exc}); move it away or choose another --cache-path")

    def get(self, key: str) -> CachedResponse | None:
        try:
            with self._lock:
                row = self._db.execute(
                    "SELECT text, model_version, refusal, finish_reason, usage FROM responses WHERE key = ?", (key,)
                ).fetchone()
        except sqlite3.DatabaseError as exc:  # the open found the file whole, but a page further on is not
            raise self._failed(exc, "be read") from None
        if not row:
            return None
        text, version, refusal, finish_reason, usage = row
        return CachedResponse(text, version, refusal, finish_reason, Usage.model_validate_json(usage) if usage else None)

    def put(self, key: str, response: CachedResponse) -> None:
        try:
            self._put(key, response)
        except sqlite3.DatabaseError as exc:
            raise self._failed(exc, "keep an answer") from None

    def _put(self, key: str, response: CachedResponse) -> None:
        with self._lock:
            self._db.execute(
                "INSERT OR REPLACE INTO responses (key, text, model_version, created, refusal, finish_reason, usage)"
                " VALUES (?, ?, ?, ?, ?, ?, ?)",
                (
                    key,
                    response.text,
                    response.model_version,
                    time.time(),
                    response.refusal,
                    response.finish_reason,
                    response.usage.model_dump_json() if response.usage else None,
                ),
            )

    def claim(self, key: str, seconds: float) -> bool:
        """Claim the call for `key` for `seconds` (a lease its caller renews) before making it. True when
        this cache now holds the claim: the key has no answer, and no other caller's claim stands
        (`_stands`). False when it is answered or claimed: look again with `get` and `claimed`."""
        now = self.clock()
        me = (self.owner, self.host, self.pid, now + seconds)
        unanswered = "NOT EXISTS (SELECT 1 FROM responses WHERE key = ?)"
        try:
            with self._lock:
                if self._db.execute(
                    f"INSERT OR IGNORE INTO claims (key, owner, host, pid, expires) SELECT ?, ?, ?, ?, ? WHERE {unanswered}",
                    (key, *me, key),
                ).rowcount:
                    return True
            holder = self._claim(key)
            if holder is None or self._stands(holder, now):
                return False
            with self._lock:  # taken over only as it was read: of two callers taking it over, one wins
                return self._db.execute(
                    "UPDATE claims SET owner = ?, host = ?, pid = ?, expires = ?"
                    f" WHERE key = ? AND owner = ? AND expires = ? AND {unanswered}",
                    (*me, key, holder.owner, holder.expires, key),
                ).rowcount == 1
        except sqlite3.DatabaseError as exc:
            raise self._failed(exc, "keep a claim") from None

    def renew(self, key: str, seconds: float) -> None:
        """Extend this cache's claim on `key` to `seconds` from now: its call is still on its way."""
        try:
            with self._lock:
                self._db.execute(
                    "UPDATE claims SET expires = ? WHERE key = ? AND owner = ?", (self.clock() + seconds, key, self.owner)
                )
        except sqlite3.DatabaseError as exc:
            raise self._failed(exc, "keep a claim") from None

    def claimed(self, key: str) -> bool:
        """Whether another caller's claim on `key` stands: its answer is worth waiting for."""
        holder = self._claim(key)
        return holder is not None and self._stands(holder, self.clock())

    def release(self, key: str) -> None:
        """Drop this cache's claim on `key` (its answer is kept, or its call failed: a waiter calls)."""
        try:
            with self._lock:
                self._db.execute("DELETE FROM claims WHERE key = ? AND owner = ?", (key, self.owner))
        except sqlite3.DatabaseError as exc:
            raise self._failed(exc, "release a claim") from None

    def _claim(self, key: str) -> Claim | None:
        try:
            with self._lock:
                row = self._db.execute("SELECT owner, host, pid, expires FROM claims WHERE key = ?", (key,)).fetchone()
        except sqlite3.DatabaseError as exc:
            raise self._failed(exc, "be read") from None
        return Claim(*row) if row else None

    def _stands(self, holder: Claim, now: float) -> bool:
        """Another caller's claim stands until its time runs out or, on this host, its process stops.
        A process on another host (or in another container) cannot be looked up: its claims stand
        until their time runs out. A claim with this process's id is a stopped process's whose id
        was given again (a container started afresh): a run calls through one cache."""
        if holder.owner == self.owner or now >= holder.expires:
            return False
        if holder.host != self.host or os.name != "posix":
            return True
        if holder.pid == self.pid:
            return False
        try:
            os.kill(holder.pid, 0)  # signal 0: only asks whether the process exists
        except ProcessLookupError:
            return False
        except PermissionError:  # another user's process
            pass
        return not _zombie(holder.pid)

    def __len__(self) -> int:
        with self._lock:
            return self._db.execute("SELECT COUNT(*) FROM responses").fetchone()[0]

    def close(self) -> None:
        with self._lock:
            self._db.close()


def _zombie(pid: int) -> bool:
    """Whether the process has stopped but not yet been waited for by its parent (killed under a
    parent that reaps no orphans, a container's first process say): signal 0 still finds it."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:  # no /proc (not Linux), or the process is gone meanwhile
        return False
    return stat.rsplit(")", 1)[-1].split()[:1] in (["Z"], ["X"])
