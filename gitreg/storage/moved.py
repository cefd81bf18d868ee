"""Moved tags: a tag that now names another commit than the one first served, and when it was noticed.

`TagPins` decides what is served and logs a move; this keeps what the version's page, its details
API and `gitreg check --probe` show about it: the first commit served, the commit the tag names
now, and when this replica noticed (a download that found the tag moved, or a page or details
answer that found the tag's commit differing from its pin). Kept in `moved-tags.json` under
`[storage] path` (a `StateFile`: written whole, off the event loop, a few seconds after a
change and at shutdown), so "noticed" survives a restart. Moves are rare: the file stays small.
"""

from __future__ import annotations

import datetime
import json
import time
from concurrent.futures import Executor
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gitreg.storage.state import StateFile

MOVED_FILE = "moved-tags.json"
_FORMAT = 1
_TMP_PREFIX = ".moved-tags-"
FLUSH_SECONDS = 2.0
# A runaway (a repository whose every tag is force-moved in a loop) cannot grow the file without bound.
MAX_RECORDS = 100_000


@dataclass(frozen=True)
class MovedTag:
    """One moved tag: the commit first served, the one the tag names now, when that was noticed."""

    first_commit: str
    current_commit: str
    noticed: float  # seconds since the epoch

    def to_json(self) -> dict[str, str]:
        """As the version details API shows it: `noticed` in RFC 3339 UTC."""
        return {"first_commit": self.first_commit, "current_commit": self.current_commit, "noticed": utc(self.noticed)}


def utc(seconds: float) -> str:
    """`2026-11-28T12:00:00Z`."""
    return datetime.datetime.fromtimestamp(seconds, datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


class MovedTags:
    """(repository, tag) -> MovedTag, in memory (touched on the event loop) and in moved-tags.json."""

    def __init__(self, path: Path, executor: Executor | None = None) -> None:
        self._moved: dict[tuple[str, str], MovedTag] = {}
        self._file = StateFile(
            path, _FORMAT, _TMP_PREFIX, self._snapshot, unreadable="moved tags are noticed again", executor=executor
        )

    async def load(self) -> None:
        """Read the file (off the event loop)."""
        self._moved.update(parse_moved(await self._file.load()))

    def flushing(self) -> AbstractAsyncContextManager[None]:
        """The writer, as an async context manager (the composition root's cleanup context)."""
        return self._file.flushing(FLUSH_SECONDS)

    def get(self, repository: str, tag: str) -> MovedTag | None:
        """What is known of `tag` having moved, or None."""
        return self._moved.get((repository, tag))

    def notice(self, repository: str, tag: str, first: str, current: str) -> MovedTag:
        """`tag` was first served at `first` and names `current` now: recorded (now) unless already known so."""
        key = (repository, tag)
        known = self._moved.get(key)
        if known is not None and known.first_commit == first and known.current_commit == current:
            return known
        moved = MovedTag(first, current, time.time())
        if known is None and len(self._moved) >= MAX_RECORDS:
            return moved  # shown, not kept
        self._moved[key] = moved
        self._file.mark_dirty()
        return moved

    def entries(self) -> list[tuple[str, str, MovedTag]]:
        """Every record: (repository, tag, moved)."""
        return [(r, t, m) for (r, t), m in self._moved.items()]

    def _snapshot(self) -> Any:
        records = [
            {"repository": r, "tag": t, "first": m.first_commit, "current": m.current_commit, "noticed": m.noticed}
            for (r, t), m in self._moved.items()
        ]
        return lambda: json.dumps({"format": _FORMAT, "moved": records}, ensure_ascii=False)

    async def flush(self) -> None:
        """Write now when something changed (tests, shutdown)."""
        await self._file.flush()


def parse_moved(document: dict[str, Any] | None) -> dict[tuple[str, str], MovedTag]:
    """The records of a moved-tags.json document; what is not a record is skipped."""
    found: dict[tuple[str, str], MovedTag] = {}
    records = document.get("moved") if document else None
    for record in records if isinstance(records, list) else ():
        try:
            repository, tag = record["repository"], record["tag"]
            first, current, noticed = record["first"], record["current"], float(record["noticed"])
        except (KeyError, TypeError, ValueError):
            continue
        if all(isinstance(v, str) for v in (repository, tag, first, current)):
            found[(repository, tag)] = MovedTag(first, current, noticed)
    return found


def read_moved(path: Path) -> dict[tuple[str, str], MovedTag]:
    """The records in a moved-tags.json, read-only (for `gitreg check --probe`; blocking)."""
    try:
        return parse_moved(json.loads(path.read_text(encoding="utf-8")))
    except (OSError, ValueError, RecursionError, AttributeError):
        return {}
