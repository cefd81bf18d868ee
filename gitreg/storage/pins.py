"""Moved-tag safety: the commit each (repository, tag) was first served at, kept across restarts.

The record is a JSON Lines file under `[storage] path`, one line per pin. Decisions are made in
memory, on the event loop; the file is written off it, by one writer task (records pinned
meanwhile go out together, with one fsync). Where the pin decides the answer (`ref =
"commit"`, archives, tarball templates) the answer waits until its record is on disk; with
`ref = "tag"` and `download = "git"` clients resolve the tag themselves, so the first commit
is recorded in the background, only to notice (and log) when the tag moves.

A crash can at worst leave a torn last line, which is ignored when the file is read back, so
every pin that was acknowledged survives and nothing half-written is ever believed. The file
is compacted (superseded and torn records dropped, written to a temporary file and renamed
into place) when it is loaded and whenever superseded records outnumber the live ones.

Each record carries the time its commit was first pinned (`at`, seconds since the epoch; 0 in
records from before it was kept): with Redis, the pins on disk are the truth, and when two
replicas pinned one tag at different commits the earlier pin wins on both (`adopt`; see
`replicas.redis`).
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import shutil
import time
from collections.abc import Callable
from concurrent.futures import Executor
from pathlib import Path
from typing import TypeVar

from gitreg.core.errors import DISK_FULL, DiskFull, GitregError, disk_full
from gitreg.core.events import Signal
from gitreg.core.urls import mask
from gitreg.storage.files import remove_leftovers, run_file_work, write_atomically

log = logging.getLogger(__name__)
T = TypeVar("T")

# Temp files of a compaction (`.tagpins-*.tmp`): one left by a crash is removed at the next start.
_TMP_PREFIX = ".tagpins-"
# Compact once the file holds this many superseded records and more of them than live ones.
COMPACT_MIN_SUPERSEDED = 256

Key = tuple[str, str]  # (repository, tag)
# How each record written starts: a last line that begins so (or is cut short before) was torn by a crash.
_RECORD_START = b'{"repository": '


def parse_record(line: bytes) -> tuple[str, str, str, float]:
    """(repository, tag, commit, when pinned) of one line of the file; ValueError, KeyError,
    TypeError or RecursionError when it is not a record."""
    record = json.loads(line)
    repository, tag, sha = record["repository"], record["tag"], record["sha"]
    at = record.get("at", 0.0)
    if not (isinstance(repository, str) and isinstance(tag, str) and isinstance(sha, str)):
        raise ValueError("bad types")
    if not isinstance(at, int | float) or isinstance(at, bool):
        raise ValueError("bad types")
    return repository, tag, sha, float(at)


def read_pins(path: Path) -> dict[Key, str]:
    """The pins in a file, read-only (`gitreg check --probe`; a running gitreg owns the file): the
    last record of each tag wins, what is not a record is skipped. Blocking."""
    pins: dict[Key, str] = {}
    try:
        data = path.read_bytes()
    except OSError:
        return pins
    for line in data.splitlines():
        try:
            repository, tag, sha, _ = parse_record(line)
        except (ValueError, KeyError, TypeError, RecursionError):
            continue
        pins[(repository, tag)] = sha
    return pins


class PinNotRecorded(GitregError):
    """The first-served commit of a tag could not be written to disk (full, read-only)."""

    status = 503


class TagPins:
    """(repository, tag) -> the commit first served for it."""

    def __init__(self, path: Path, executor: Executor | None = None) -> None:
        self.path = path
        self.executor = executor
        self._repos: dict[str, dict[str, str]] = {}  # repository -> tag -> pinned commit
        self._at: dict[Key, float] = {}  # when each pin was first made (0: before this was kept)
        self._count = 0
        self._records = 0  # lines in the file, live or superseded
        self._warned: set[tuple[str, str, str]] = set()
        self._pending: list[tuple[Key, str]] = []  # records not handed to the writer yet
        self._batch: asyncio.Future[None] | None = None  # done when the pending records are on disk
        self._unwritten: dict[Key, asyncio.Future[None]] = {}  # key -> the write its latest record is in
        self._writer: asyncio.Task[None] | None = None
        self.moved_total = 0
        # (repository, tag, first commit, commit it names now): a download found the tag moved.
        self.on_moved: Signal[[str, str, str, str]] = Signal()
        self._load()

    def _load(self) -> None:
        """Read the file (blocking: construct TagPins off the event loop); rewrite it compacted if needed."""
        remove_leftovers(self.path, _TMP_PREFIX)
        try:
            data = self.path.read_bytes()
        except FileNotFoundError:
            return
        except OSError as e:  # a directory, unreadable: set aside, pins start again from nothing
            self._set_aside(type(e).__name__, move=True)
            return
        torn = damaged = False
        lines = data.splitlines(keepends=True)
        for number, line in enumerate(lines, 1):
            try:
                repository, tag, sha, at = parse_record(line)
            except (ValueError, KeyError, TypeError, RecursionError):  # RecursionError: `[[[[...` nested deeply
                if number == len(lines) and not line.endswith(b"\n") and _RECORD_START.startswith(line[:15]):
                    torn = True  # a line cut short by a crash: it was never acknowledged
                else:
                    damaged = True  # not what gitreg writes: the file was damaged, not torn
                continue
            torn = torn or not line.endswith(b"\n")
            self._set((repository, tag), sha, float(at))  # the last record wins: allow_moved_tags re-pins
        self._records = len(lines)
        if damaged:
            self._set_aside("records that are not pins", move=False)
        elif torn:
            log.warning("ignored an incomplete record in %s (left by a crash)", self.path)
        if torn or damaged or self._records > self._count:
            self._rewrite(self._snapshot())
            self._records = self._count

    def _set_aside(self, why: str, move: bool) -> None:
        """Keep a copy of a damaged file as `<name>.damaged` (the pins it still holds are kept), one log line."""
        aside = self.path.with_name(self.path.name + ".damaged")
        log.warning("%s could not be read whole (%s); the old file is %s", self.path, why, aside.name)
        try:
            if move:
                os.replace(self.path, aside)
            else:
                shutil.copyfile(self.path, aside)
        except OSError as e:
            log.warning("could not set %s aside: %s", self.path, e)

    def __len__(self) -> int:
        return self._count

    def _set(self, key: Key, sha: str, at: float) -> None:
        tags = self._repos.setdefault(key[0], {})
        if key[1] not in tags:
            self._count += 1
        tags[key[1]] = sha
        self._at[key] = at

    def entries(self) -> list[tuple[str, str, str, float]]:
        """Every pin: (repository, tag, commit, when first pinned), for Redis to learn them again."""
        return [(r, t, sha, self._at.get((r, t), 0.0)) for r, tags in self._repos.items() for t, sha in tags.items()]

    def adopt(self, repository: str, tag: str, sha: str, at: float) -> bool:
        """Another replica pinned `tag` at `sha` at time `at`: take it when it is the earlier pin.

        The earlier pin (then the smaller commit id, for a tie) wins, so replicas that pinned one
        tag at two commits (Redis lost its record meanwhile) end on the same one. A tag this
        replica never served is left alone: its first request asks Redis. True when it changed.
        """
        key = (repository, tag)
        mine = self.pinned(repository, tag)
        if mine is None or mine == sha or (self._at.get(key, 0.0), mine) <= (at, sha):
            return False
        log.warning(
            "tag %r of %s: another replica pinned it earlier at commit %s; serving that instead of %s",
            tag,
            mask(repository),
            sha[:12],
            mine[:12],
        )
        self._set(key, sha, at)
        self._write(key, sha)
        return True

    def pinned(self, repository: str, tag: str) -> str | None:
        """The commit `tag` is pinned at here, or None when this process has no record of it."""
        return self._repos.get(repository, {}).get(tag)

    def commits(self, repository: str) -> set[str]:
        """Every commit pinned for a tag of `repository` (the mirror keeps a ref to each)."""
        return set(self._repos.get(repository, {}).values())

    def _snapshot(self) -> list[tuple[str, dict[str, str]]]:
        return [(repository, dict(tags)) for repository, tags in self._repos.items()]

    async def pin(
        self, repository: str, tag: str, sha: str, *, allow_moved: bool, follows_tag: bool, at: float | None = None
    ) -> str:
        """The commit to serve for `tag`, which points at `sha` now; pins it if new and reports a move.

        A tag seen for the first time is pinned at `sha`. When it later points elsewhere, the
        first commit keeps being served, unless `allow_moved` (the new commit is served and
        becomes the pin). `follows_tag` (`ref = "tag"` with `download = "git"`): clients resolve
        the tag themselves, so the pin only serves to notice the move; the answer does not wait
        for the record to reach the disk. `at`: when the pin was first made (another replica's
        time, through Redis), now by default.
        """
        key = (repository, tag)
        first = self._repos.get(repository, {}).get(tag)
        if first is None:
            self._set(key, sha, time.time() if at is None else at)
            self._write(key, sha)
            if not follows_tag:
                await self._durable(key)
            return sha
        if first != sha:
            if (repository, tag, sha) not in self._warned:
                self._warned.add((repository, tag, sha))
                self.moved_total += 1
                self.on_moved.emit(repository, tag, first, sha)
                if follows_tag:  # whatever allow_moved_tags says: git downloads the tag as it is now
                    outcome = (
                        f'clients follow the tag (ref = "tag" with download = "git": they resolve it '
                        f"themselves), so they now get commit {sha[:12]}"
                    )
                elif allow_moved:
                    outcome = "serving the new commit ([git] allow_moved_tags = true)"
                else:
                    outcome = "still serving the first commit (set [git] allow_moved_tags = true to follow the tag)"
                log.warning(
                    "tag %r of %s moved from commit %s to %s; %s",
                    tag,
                    mask(repository),
                    first[:12],
                    sha[:12],
                    outcome,
                )
            if allow_moved:
                self._set(key, sha, time.time())
                self._write(key, sha)
                if not follows_tag:
                    await self._durable(key)
                return sha
            if follows_tag:
                return sha
        if not follows_tag:
            await self._durable(key)  # recorded in the background by a `ref = "tag"` rule: wait for it
        return first

    def _write(self, key: Key, sha: str) -> None:
        """Queue a record for the writer."""
        line = self._record(key[0], key[1], sha)
        self._pending.append((key, line))
        if self._batch is None:
            self._batch = asyncio.get_running_loop().create_future()
        self._unwritten[key] = self._batch
        self._kick()

    def _kick(self) -> None:
        if self._pending and (self._writer is None or self._writer.done()):
            self._writer = asyncio.get_running_loop().create_task(self._flush())

    async def _durable(self, key: Key) -> None:
        """Return once the latest record of `key` is on disk; PinNotRecorded when it cannot be written."""
        written = self._unwritten.get(key)
        if written is not None:
            self._kick()  # a record left over by a failed write is tried again now
            try:
                await asyncio.shield(written)
            except (PinNotRecorded, DiskFull) as e:
                raise type(e)(e.message) from None  # one instance per waiter

    async def _flush(self) -> None:
        """The one writer: appends pending records in order, one fsync per batch; compacts when due."""
        while self._pending:
            batch, self._pending = self._pending, []
            done, self._batch = self._batch, None
            assert done is not None
            try:
                await self._call(self._append, "".join(line for _, line in batch))
            except OSError as e:
                log.error("could not record pinned commits in %s: %s", self.path, e)
                # Kept for the next write, so what a durable answer waits for reaches the disk eventually.
                self._pending[:0] = batch
                if self._batch is None:
                    self._batch = asyncio.get_running_loop().create_future()
                for key, _ in batch:
                    if self._unwritten.get(key) is done:
                        self._unwritten[key] = self._batch
                done.set_exception(
                    disk_full(self.path.parent, "the commit of this version")
                    if e.errno in DISK_FULL
                    else PinNotRecorded(
                        f"gitreg could not record the commit of this version in its storage ({e.strerror or e}); "
                        "check [storage] path on the registry server"
                    )
                )
                done.exception()  # retrieved here: every waiter may have gone away
                return  # no retry loop against a full disk: the next pin (or durable answer) tries again
            for key, _ in batch:
                if self._unwritten.get(key) is done:
                    del self._unwritten[key]
            done.set_result(None)
            self._records += len(batch)
            superseded = self._records - self._count
            if superseded >= COMPACT_MIN_SUPERSEDED and superseded > self._count:
                try:
                    await self._call(self._rewrite, self._snapshot())
                    self._records = self._count
                except OSError as e:
                    log.warning("could not compact %s: %s", self.path, e)

    async def _call(self, fn: Callable[..., T], *args: object) -> T:
        return await run_file_work(self.executor, fn, *args)

    def _append(self, text: str) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        try:
            os.write(fd, text.encode("utf-8", "surrogateescape"))
            os.fsync(fd)
        finally:
            os.close(fd)

    def _rewrite(self, pins: list[tuple[str, dict[str, str]]]) -> None:
        """Replace the record with its live records, atomically and durably."""
        text = "".join(self._record(repository, tag, sha) for repository, tags in pins for tag, sha in tags.items())
        write_atomically(self.path, text.encode("utf-8", "surrogateescape"), _TMP_PREFIX)

    def _record(self, repository: str, tag: str, sha: str) -> str:
        """One line of the file (its keys in this order: a torn line is recognised by its start)."""
        at = self._at.get((repository, tag), 0.0)
        return json.dumps({"repository": repository, "tag": tag, "sha": sha, "at": at}, ensure_ascii=False) + "\n"

    async def close(self) -> None:
        """Write what is pending (shutdown)."""
        if self._writer is not None:
            await asyncio.gather(self._writer, return_exceptions=True)
