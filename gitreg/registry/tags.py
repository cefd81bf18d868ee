"""The one cache of repository tag lists, with the semantics of a good caching proxy.

Per repository (many modules may share a monorepo): entries are fresh for `ttl_seconds`;
concurrent misses coalesce into ONE upstream call (nginx `proxy_cache_lock`); a failed
refresh serves the last good list for `stale_seconds` after it expired (RFC 5861
stale-if-error) and waits `negative_ttl_seconds` before asking the Git host again; with
`refresh_ahead` an expired entry is served at once while one background refresh runs
(stale-while-revalidate); "repository not found" is cached for `negative_ttl_seconds`; a
failed call for a repository with nothing servable cached is remembered for
`error_retry_seconds`, so a failing host is asked at most once per that interval per
repository, however many clients retry.

The upstream call of a coalesced miss runs in the git pool at the best priority among the
requests waiting for it (a background refresh counts as a waiter, at BACKGROUND); when every
waiter has gone (clients hung up) before git started, the call is dropped.

Everything here is touched from the event loop only (no locks needed, none taken).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from gitreg.config.model import CacheConfig
from gitreg.core.errors import GitregError, ModuleNotFound, Overloaded
from gitreg.core.events import Signal
from gitreg.core.flight import InFlight, Remembered
from gitreg.core.urls import mask as mask_url
from gitreg.git.pool import Waiters, background_task
from gitreg.git.remote import TagList

log = logging.getLogger(__name__)

# (repository, the requests waiting for it) -> its tags, through the git pool
Loader = Callable[[str, Waiters], Awaitable[TagList]]


@dataclass
class CacheStats:
    """Counters read by /metrics, the benchmarks and the tests. Names are stable: add, never rename."""

    hits: int = 0  # served fresh from the cache
    misses: int = 0  # needed an upstream call (started one or joined one)
    coalesced: int = 0  # joined an upstream call another request had started
    stale_served: int = 0  # served an expired list (refresh failed, backing off, or refresh-ahead)
    negative_hits: int = 0  # answered "not found" from the cache
    refreshes: int = 0  # upstream calls started (git ls-remote)
    refresh_failures: int = 0  # upstream calls that failed (not counting "not found")
    invalidations: int = 0  # invalidate() calls (webhooks)
    evictions: int = 0  # tag lists dropped by the LRU bound
    errors_served: int = 0  # answered with a remembered upstream failure (error_retry_seconds)


@dataclass
class _Entry:
    tags: TagList
    stored: float  # clock time the tags were fetched
    expires: float  # clock time they stop being fresh
    retry_at: float = 0.0  # after a failed refresh: no new upstream call before this
    served_age: float = 0.0  # how old the tags were when last served


class TagCache:
    """TTL + in-flight de-duplication + stale-if-error + negative caching + invalidation."""

    def __init__(self, config: CacheConfig, loader: Loader, clock: Callable[[], float] = time.monotonic) -> None:
        self.config = config
        self._load = loader
        self._clock = clock
        # Own LRU (not cachetools): metrics and webhooks must read entries without
        # touching their recency, and cachetools' views go through __getitem__.
        self._entries: OrderedDict[str, _Entry] = OrderedDict()
        # "Not found" lives apart, so a flood of typos under a wildcard rule cannot evict good lists.
        self._negative: Remembered[str, GitregError] = Remembered(
            config.negative_ttl_seconds, config.max_repositories, clock
        )
        # Failed calls for repositories with no cached list, kept apart for the same reason.
        self._failures: Remembered[str, GitregError] = Remembered(
            config.error_retry_seconds, config.max_repositories, clock
        )
        self._inflight: InFlight[str, TagList] = InFlight(self._done)
        self._waiters: dict[asyncio.Future[TagList], Waiters] = {}  # who waits for each call in flight
        self._dirty: set[str] = set()  # invalidated while their upstream call ran
        self._background: set[asyncio.Task[None]] = set()
        self.stats = CacheStats()
        # Told of each repository whose fetched tags differ from what was cached (the index listens).
        self.on_fetched: Signal[[str]] = Signal()

    def fresh(self, key: str) -> TagList | None:
        """The tag list of repository `key` when the cache holds it fresh (a hit), else None
        (then `get` decides: a stale list, a refresh, a remembered failure). No coroutine."""
        entry = self._entries.get(key)
        if entry is None:
            return None
        now = self._clock()
        if now >= entry.expires or self._negative.recall(key, now) is not None:
            return None
        self._entries.move_to_end(key)
        self.stats.hits += 1
        return self._serve(entry, now)

    async def get(self, key: str) -> TagList:
        """The tag list of repository `key`, from cache or one coalesced upstream call."""
        found = self.fresh(key)
        if found is not None:
            return found
        now = self._clock()
        negative = self._negative.recall(key, now)
        if negative is not None:
            self.stats.negative_hits += 1
            raise negative
        entry = self._entries.get(key)
        if entry is not None:
            self._entries.move_to_end(key)
            if self._servable_stale(entry, now):
                if now < entry.retry_at:
                    # The last refresh failed moments ago: do not hammer a host that is down.
                    self.stats.stale_served += 1
                    return self._serve(entry, now)
                if self.config.refresh_ahead:
                    self.stats.stale_served += 1
                    self.refresh_in_background(key)
                    return self._serve(entry, now)
        if key in self._inflight:
            self._failures.forget(key)
        elif (failure := self._failures.recall(key, now)) is not None:
            # The host failed moments ago and there is nothing to serve instead: the same
            # answer, without another git call (CI fleets retry; a struggling host needs quiet).
            self.stats.errors_served += 1
            raise failure
        self.stats.misses += 1
        try:
            return await self._refresh(key)
        except GitregError as e:
            entry = self._entries.get(key)
            now = self._clock()
            if entry is not None and self._servable_stale(entry, now):
                self.stats.stale_served += 1
                return self._serve(entry, now)
            if isinstance(e, ModuleNotFound):
                raise ModuleNotFound(e.message) from None
            raise

    def _servable_stale(self, entry: _Entry, now: float) -> bool:
        return now - entry.expires <= self.config.stale_seconds

    def _serve(self, entry: _Entry, now: float) -> TagList:
        entry.served_age = now - entry.stored
        return entry.tags

    def _refresh(self, key: str) -> Awaitable[TagList]:
        """Start (or join) the one upstream call for `key`."""
        future = self._inflight.get(key)
        if future is not None:
            self.stats.coalesced += 1
            waiters = self._waiters[future]
        else:
            waiters = Waiters()
            future = self._inflight.start(key, self._fetch(key, waiters))
            self._waiters[future] = waiters
        return self._wait(key, future, waiters)

    async def _wait(self, key: str, future: asyncio.Future[TagList], waiters: Waiters) -> TagList:
        """Wait for the call as one of its `waiters` (at the current context's git priority)."""
        priority = waiters.join()
        try:
            # Shielded: one waiter being cancelled must not cancel the call the others await.
            return await self._inflight.wait(future)
        finally:
            if waiters.leave(priority):
                # Every waiter hung up before git started: drop the call, nobody needs its answer.
                self._inflight.abandon(key, future)

    def _done(self, key: str, fut: asyncio.Future[TagList]) -> None:
        """After a call ended (its key released, its exception retrieved by InFlight)."""
        self._waiters.pop(fut, None)
        if key in self._dirty:
            # A webhook arrived while the call ran, so its answer may miss the new tag:
            # ask again now that the call is no longer in flight.
            self._dirty.discard(key)
            if not fut.cancelled():
                self.refresh_in_background(key)

    async def _fetch(self, key: str, waiters: Waiters) -> TagList:
        self.stats.refreshes += 1
        try:
            tags = await self._load(key, waiters)
        except Overloaded:
            raise  # the git queue is full: nothing is known about the repository, remember nothing
        except ModuleNotFound as e:
            entry = self._entries.get(key)
            if entry is not None and self._servable_stale(entry, self._clock()):
                # It was there a moment ago: more likely revoked credentials or a flaky
                # host than a deleted repository, so this is a failed refresh (stale-if-error).
                self._failed(key, entry, e)
            else:
                self._entries.pop(key, None)
                self._negative.remember(key, e)
            raise
        except GitregError as e:
            entry = self._entries.get(key)
            if entry is not None:
                self._failed(key, entry, e)
            else:
                self.stats.refresh_failures += 1
            if entry is None or not self._servable_stale(entry, self._clock()):
                self._failures.remember(key, e)  # nothing to serve instead: remember the answer
            raise
        # An invalidated call's answer is kept (it is newer than what we had) but not fresh.
        self.accept(key, tags, fresh=key not in self._dirty)
        return tags

    def accept(self, key: str, tags: TagList, fresh: bool = True) -> None:
        """Store a tag list fetched for `key` (here, or by the serving process for the index process's cache)."""
        now = self._clock()
        previous = self._entries.get(key)
        # A list another replica fetched (shared store) is as old as it is there, not new here.
        stored = now - min(tags.age, self.config.ttl_seconds)
        self._store(key, _Entry(tags, stored, stored + self.config.ttl_seconds if fresh else now))
        self._negative.forget(key)
        self._failures.forget(key)
        if previous is None or previous.tags.tags != tags.tags:
            self.on_fetched.emit(key)

    def peek(self, key: str) -> TagList | None:
        """The cached tag list of `key`, fresh or not, without fetching or counting a use."""
        entry = self._entries.get(key)
        return entry.tags if entry is not None else None

    def _failed(self, key: str, entry: _Entry, e: GitregError) -> None:
        self.stats.refresh_failures += 1
        entry.retry_at = self._clock() + self.config.negative_ttl_seconds
        if self._servable_stale(entry, self._clock()):
            # Logged once per failed call, not once per request served stale.
            log.warning(
                "refresh of %s failed, serving tags fetched %.0fs ago: %s",
                mask_url(key),
                self._clock() - entry.stored,
                e.message,
            )

    def _store(self, key: str, entry: _Entry) -> None:
        self._entries[key] = entry
        self._entries.move_to_end(key)
        while len(self._entries) > self.config.max_repositories:
            self._entries.popitem(last=False)
            self.stats.evictions += 1

    def refresh_in_background(self, key: str) -> None:
        """Refresh `key` without anyone waiting; failures are logged, never raised."""
        if key in self._inflight:
            return

        async def run() -> None:
            try:
                await self._refresh(key)
            except GitregError as e:
                log.warning("background refresh of %s failed: %s", mask_url(key), e.message)
            except Exception:
                log.exception("background refresh of %s failed", mask_url(key))

        # BACKGROUND, not the priority of the request or webhook that asked for it.
        task = background_task(run())
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    def invalidate(self, key: str) -> bool:
        """Mark `key` expired (its tags stay for stale-if-error); True when it was cached or in flight."""
        self.stats.invalidations += 1
        known = False
        if key in self._inflight:
            self._dirty.add(key)
            known = True
        if self._negative.forget(key):
            known = True
        if self._failures.forget(key):
            known = True
        entry = self._entries.get(key)
        if entry is not None:
            # min(): invalidating must never extend how long a list may be served stale.
            entry.expires = min(entry.expires, self._clock())
            entry.retry_at = 0.0  # the host just told us something changed: ask it now
            known = True
        return known

    def keys(self) -> list[str]:
        """Every repository with a cached tag list or an upstream call in flight."""
        return list(dict.fromkeys([*self._entries, *self._inflight]))

    def oldest_age(self) -> float:
        """Seconds since the oldest cached tag list was fetched (0 when empty)."""
        now = self._clock()
        return max((now - e.stored for e in self._entries.values()), default=0.0)

    def oldest_served_age(self) -> float:
        """The largest age a cached tag list had when it was last served (stale serving shows here)."""
        return max((e.served_age for e in self._entries.values()), default=0.0)

    def __len__(self) -> int:
        return len(self._entries)

    async def close(self) -> None:
        """Cancel background refreshes and in-flight calls (shutdown)."""
        tasks: list[asyncio.Future[None] | asyncio.Future[TagList]] = [
            *self._background,
            *self._inflight.futures(),
        ]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
