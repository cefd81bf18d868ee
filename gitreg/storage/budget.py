"""`[storage] max_bytes`: one bound over what gitreg keeps on disk (bare mirrors and archives).

The budget knows every mirror and archive with its size, in least-recently-used order, and
which of them are in use (a fetch or an archive build reading a mirror, an archive whose
response is being sent). When the total is over the bound, it removes the least recently used
entries that are not in use, never the newest one (just built for a request that has yet to
send it); an entry in use is removed once it is released, if the total is still over. So the
total passes the bound only by entries in use and the newest one, and only while they are.
The budget itself never touches the disk: each store gives it a coroutine that removes one of
its entries off the event loop.

Everything here runs on the event loop (no locks); sizes are measured by the stores, in their
executor, with `files.tree_bytes`.
"""

from __future__ import annotations

import asyncio
import logging
import math
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass

log = logging.getLogger(__name__)

Remover = Callable[[str], Awaitable[None]]


@dataclass
class _Entry:
    size: int
    kind: str  # "mirror" or "archive": for the metrics and the log
    remove: Remover
    # Last use as found on disk at start (a seeded entry), for merging later seeds; inf once
    # added or used since start (more recent than anything on disk).
    used: float = math.inf


def mib(size: int) -> str:
    """A byte count for messages: `1.5 MiB`."""
    return f"{size / 2**20:.1f} MiB"


class StorageBudget:
    """Sizes, in-use marks and least-recently-used eviction of mirrors and archives under one bound."""

    def __init__(self, max_bytes: int) -> None:
        self.max_bytes = max_bytes
        self._entries: OrderedDict[str, _Entry] = OrderedDict()  # path -> entry, least recently used first
        self._users: dict[str, int] = {}  # path -> how many hold it now (absent: nobody)
        self._removing: dict[str, asyncio.Future[None]] = {}  # path -> its removal, while it runs
        self._evicting: asyncio.Task[None] | None = None
        self._background: set[asyncio.Task[None]] = set()
        self.total = 0
        self.evictions = 0

    def usage(self, kind: str) -> tuple[int, int]:
        """(entries, bytes) of one kind, for the metrics."""
        count = size = 0
        for entry in self._entries.values():
            if entry.kind == kind:
                count += 1
                size += entry.size
        return count, size

    def seed(self, found: Iterable[tuple[str, int, float, str, Remover]]) -> None:
        """Add what is on disk at start: (path, size, last used, kind, remover); merged by last use.

        The scan of a large storage runs while gitreg serves: a path the budget already knows
        (made, fetched or used since start, measured then) keeps its entry and is counted once.
        """
        known = [(e.used, i, path, e) for i, (path, e) in enumerate(self._entries.items())]
        new = [
            (used, len(known) + i, path, _Entry(size, kind, remove, used))
            for i, (path, size, used, kind, remove) in enumerate(found)
            if path not in self._entries
        ]
        self._entries.clear()
        self.total = 0
        for _, _, path, entry in sorted(known + new, key=lambda t: (t[0], t[1])):
            self._entries[path] = entry
            self.total += entry.size

    def add(self, path: str, size: int, kind: str, remove: Remover) -> None:
        """Record `path` (new, or measured again after a fetch) as the most recently used entry."""
        old = self._entries.pop(path, None)
        if old is not None:
            self.total -= old.size
        self._entries[path] = _Entry(size, kind, remove)
        self.total += size

    def touch(self, path: str) -> bool:
        """Mark `path` recently used; False when the budget does not know it (never added, or evicted)."""
        entry = self._entries.get(path)
        if entry is None:
            return False
        entry.used = math.inf
        self._entries.move_to_end(path)
        return True

    def forget(self, path: str) -> None:
        """Drop an entry that disappeared behind gitreg's back."""
        entry = self._entries.pop(path, None)
        if entry is not None:
            self.total -= entry.size

    def hold(self, path: str) -> None:
        """Mark `path` in use: eviction skips it until the matching release()."""
        self._users[path] = self._users.get(path, 0) + 1

    def release(self, path: str) -> None:
        """End one hold(); when storage is over its bound, eviction starts in the background."""
        self.release_all([path])

    def release_all(self, paths: Iterable[str]) -> None:
        """End one hold() of each path; then, when storage is over its bound, one eviction in the background."""
        freed = False
        for path in paths:
            users = self._users.get(path, 0) - 1
            if users > 0:
                self._users[path] = users
            else:
                self._users.pop(path, None)
                freed = True
        if freed and self.total > self.max_bytes and self._victim() is not None:
            try:
                loop = asyncio.get_running_loop()
            except RuntimeError:
                return  # the loop is gone (interpreter exit): the next start trims storage
            task = loop.create_task(self.evict())
            self._background.add(task)
            task.add_done_callback(self._background.discard)

    async def settled(self, path: str) -> None:
        """Wait until a removal of `path` that is under way has finished (before creating it again)."""
        removal = self._removing.get(path)
        if removal is not None:
            await asyncio.shield(removal)

    def _victim(self) -> str | None:
        # An entry larger than the whole bound can never fit: it goes first, once released.
        for path, entry in self._entries.items():
            if entry.size > self.max_bytes and path not in self._users:
                return path
        # Never the newest one: it was just built or fetched for a request that has yet to
        # pick it up (and hold it). When older entries in use keep the total over the bound,
        # they go when released.
        newest = next(reversed(self._entries), None)
        for path in self._entries:
            if path not in self._users and path != newest:
                return path
        return None

    async def evict(self) -> None:
        """Remove least recently used entries not in use until the total fits `max_bytes` (or none is left)."""
        while self.total > self.max_bytes and self._victim() is not None:
            if self._evicting is None or self._evicting.done():
                self._evicting = asyncio.get_running_loop().create_task(self._evict())
            # shield: a request that gives up must not stop a removal half-way.
            await asyncio.shield(self._evicting)

    async def _evict(self) -> None:
        while self.total > self.max_bytes:
            path = self._victim()
            if path is None:
                return
            entry = self._entries.pop(path)
            self.total -= entry.size
            self.evictions += 1
            done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
            self._removing[path] = done
            try:
                await entry.remove(path)
                log.info("removed %s %s (%s) to stay under [storage] max_bytes", entry.kind, path, mib(entry.size))
            except Exception as e:  # noqa: BLE001 - one undeletable entry must not stop eviction
                log.warning("could not remove %s %s to stay under [storage] max_bytes: %s", entry.kind, path, e)
            finally:
                del self._removing[path]
                done.set_result(None)

    async def close(self) -> None:
        """Stop evicting (shutdown): a removal cut short leaves a `tmp-*` entry, removed at the next start."""
        tasks = [t for t in (*self._background, self._evicting) if t is not None and not t.done()]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
