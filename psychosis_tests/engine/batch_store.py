"""Which request went into which batch, kept next to the response cache so a killed run resumes.

A side file `<cache file>.batches.sqlite3` holds each submission (an id the suite makes, its
model, when it was made and, once the provider created it, its batch id) and each request (its
cache key) in it. A submission is recorded before its batch is created and the batch id after,
so a run killed between the two leaves a submission without a batch id: the next run asks the
provider for the batch carrying that submission id in its metadata (`batch_transport`).

When a batch finished, each line's answer is kept here until a caller reads it, so a line nobody
of this run waited for, or whose caller was given up first (a run stopped as the batch finished),
is there for the run that asks. A run that meets a request already submitted polls its batch (or
takes its kept answer) instead of submitting it again. A line read by its caller is forgotten (the
response cache holds it from then on), and so is a line that failed, so asking again submits it
anew. A submission whose batch the provider no longer knows (`gone`) is forgotten but for its
answered lines, so its other requests are submitted anew.
"""

from __future__ import annotations

import threading
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

from psychosis_tests.engine.cache import open_database


@dataclass(frozen=True)
class Submitted:
    submission: str
    batch_id: str | None
    """None while the batch's creation is not known to have happened."""
    created: float
    """When the submission was recorded (Unix seconds), just before its batch was created."""
    answer: str | None
    """The output line's response body (JSON) once the batch finished; None while it is pending."""


def store_path(cache_path: Path) -> Path:
    return cache_path.with_name(cache_path.name + ".batches.sqlite3")


class BatchStore:
    """Submissions and their requests in one SQLite file, committed as they change."""

    def __init__(self, path: Path):
        self.path = path
        self._lock = threading.Lock()
        self._db = open_database(path)
        self._db.execute(
            "CREATE TABLE IF NOT EXISTS submissions ("
            " id TEXT PRIMARY KEY, model TEXT NOT NULL, batch_id TEXT, created REAL NOT NULL)"
        )
        self._db.execute(
            "CREATE TABLE IF NOT EXISTS requests (key TEXT PRIMARY KEY, submission TEXT NOT NULL, answer TEXT)"
        )
        self._db.execute("CREATE INDEX IF NOT EXISTS requests_by_submission ON requests (submission)")

    def submitted(self, key: str) -> Submitted | None:
        with self._lock:
            row = self._db.execute(
                "SELECT s.id, s.batch_id, s.created, r.answer FROM requests r JOIN submissions s"
                " ON s.id = r.submission WHERE r.key = ?",
                (key,),
            ).fetchone()
        return Submitted(*row) if row else None

    def begin(self, model: str, keys: list[str]) -> str:
        """Record a submission of these requests, before its batch is created; return its id."""
        submission = uuid.uuid4().hex
        with self._lock:
            self._db.execute("BEGIN IMMEDIATE")
            try:
                self._db.execute("INSERT INTO submissions (id, model, batch_id, created) VALUES (?, ?, NULL, ?)",
                                 (submission, model, time.time()))  # fmt: skip
                self._db.executemany("INSERT OR REPLACE INTO requests (key, submission, answer) VALUES (?, ?, NULL)",
                                     [(key, submission) for key in keys])  # fmt: skip
                self._db.execute("COMMIT")
            except BaseException:
                self._db.execute("ROLLBACK")
                raise
        return submission

    def created(self, submission: str, batch_id: str) -> None:
        with self._lock:
            self._db.execute("UPDATE submissions SET batch_id = ? WHERE id = ?", (batch_id, submission))

    def answered(self, key: str, answer: str) -> None:
        with self._lock:
            self._db.execute("UPDATE requests SET answer = ? WHERE key = ?", (answer, key))

    def forget(self, keys: list[str]) -> None:
        """Forget these requests, and each submission left without any."""
        with self._lock:
            marks = ",".join("?" * len(keys))
            query = f"SELECT DISTINCT submission FROM requests WHERE key IN ({marks})"
            submissions = [(row[0],) for row in self._db.execute(query, keys)]
            self._db.executemany("DELETE FROM requests WHERE key = ?", [(key,) for key in keys])
            self._db.executemany("DELETE FROM submissions WHERE id = ?1"
                                 " AND NOT EXISTS (SELECT 1 FROM requests WHERE submission = ?1)", submissions)  # fmt: skip

    def abandon(self, submission: str) -> None:
        """Forget a submission whose batch was never created, and its requests."""
        with self._lock:
            self._db.execute("DELETE FROM requests WHERE submission = ?", (submission,))
            self._db.execute("DELETE FROM submissions WHERE id = ?", (submission,))

    def gone(self, submission: str) -> None:
        """Forget the requests of a submission whose batch the provider no longer knows, but those
        already answered (paid: kept for whoever asks), and the submission once none is left."""
        with self._lock:
            self._db.execute("DELETE FROM requests WHERE submission = ? AND answer IS NULL", (submission,))
            self._db.execute("DELETE FROM submissions WHERE id = ?1"
                             " AND NOT EXISTS (SELECT 1 FROM requests WHERE submission = ?1)", (submission,))  # fmt: skip

    def close(self) -> None:
        with self._lock:
            self._db.close()
