"""Moved-tag safety: the commit each (repository, tag) was first served at, kept across restarts.

The record is an append-only JSON Lines file under `[storage] path`: one line per pin, written
with a single `write` and fsync'd. A crash can at worst leave a torn last line, which is
ignored when the file is read back (and the file is rewritten without it), so every pin that
was acknowledged survives and nothing half-written is ever believed.
"""

from __future__ import annotations

import json
import logging
import os
import threading
from dataclasses import dataclass
from pathlib import Path

from .git_adapter import mask_url

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Pinned:
    """What to serve for a tag: the commit `sha`."""

    sha: str


class TagPins:
    """(repository, tag) -> the commit first served for it."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._pins: dict[tuple[str, str], str] = {}
        self._warned: set[tuple[str, str, str]] = set()
        self._lock = threading.Lock()
        self.moved_total = 0
        self._load()

    def _load(self) -> None:
        if not self.path.exists():
            return
        good: list[bytes] = []
        torn = False
        for line in self.path.read_bytes().splitlines(keepends=True):
            try:
                record = json.loads(line)
                key, sha = (record["repository"], record["tag"]), record["sha"]
                if not (isinstance(key[0], str) and isinstance(key[1], str) and isinstance(sha, str)):
                    raise ValueError("bad types")
            except (ValueError, KeyError, TypeError):
                torn = True  # a line cut short by a crash: it was never acknowledged
                continue
            if not line.endswith(b"\n"):
                torn = True
                line += b"\n"
            self._pins[key] = sha  # the last record wins: allow_moved_tags re-pins
            good.append(line)
        if torn:
            log.warning("ignored an incomplete record in %s (left by a crash)", self.path)
            tmp = self.path.with_name(self.path.name + ".tmp")
            tmp.write_bytes(b"".join(good))
            os.replace(tmp, self.path)

    def __len__(self) -> int:
        return len(self._pins)

    def pinned(self, repository: str, tag: str) -> str | None:
        """The commit `tag` is pinned at here, or None when this process has no record of it."""
        return self._pins.get((repository, tag))

    def check(self, repository: str, tag: str, sha: str, allow_moved: bool) -> Pinned:
        """Pin `tag` at `sha` if new; if it was pinned elsewhere, report the move.

        With `allow_moved`, the tag's new commit is served and becomes the pin; otherwise the
        first commit keeps being served.
        """
        key = (repository, tag)
        with self._lock:
            first = self._pins.get(key)
            if first is None:
                self._append(repository, tag, sha)
                self._pins[key] = sha
                return Pinned(sha)
            if first == sha:
                return Pinned(sha)
            if (repository, tag, sha) not in self._warned:
                self._warned.add((repository, tag, sha))
                self.moved_total += 1
                log.warning(
                    "tag %r of %s moved from commit %s to %s; %s", tag, mask_url(repository), first[:12], sha[:12],
                    "serving the new commit ([git] allow_moved_tags = true)" if allow_moved
                    else "still serving the first commit (set [git] allow_moved_tags = true to follow the tag)",
                )
            if allow_moved:
                self._append(repository, tag, sha)
                self._pins[key] = sha
                return Pinned(sha)
            return Pinned(first)

    def _append(self, repository: str, tag: str, sha: str) -> None:
        line = json.dumps({"repository": repository, "tag": tag, "sha": sha}, ensure_ascii=False) + "\n"
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        try:
            os.write(fd, line.encode("utf-8", "surrogateescape"))
            os.fsync(fd)
        finally:
            os.close(fd)
