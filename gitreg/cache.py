"""The one cache of repository tag lists, with the semantics of a good caching proxy.

Per repository (many modules may share a monorepo): entries are fresh for `ttl_seconds`;
concurrent misses coalesce into ONE upstream call (nginx `proxy_cache_lock`); a failed
refresh serves the last good list for `stale_seconds` (RFC 5861 stale-if-error); with
`refresh_ahead` an expired entry is served at once while one background refresh runs
(stale-while-revalidate); "repository not found" is cached for `negative_ttl_seconds`.

cachetools classes are not thread-safe: this is touched from the event loop only.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

from cachetools import LRUCache

from .config import CacheConfig
from .errors import GitregError, ModuleNotFound
from .git_adapter import TagList, mask_url

log = logging.getLogger(__name__)

Loader = Callable[[str], Awaitable[TagList]]


@dataclass
class CacheStats:
    """Counters read by /metrics and the tests."""

    hits: int = 0
    misses: int = 0
    coalesced: int = 0
    stale_served: int = 0
    negative_hits: int = 0
    refreshes: int = 0
    refresh_failures: int = 0
    invalidations: int = 0


@dataclass
class _Entry:
    tags: TagList | None  # None for a cached "not found"
    error: GitregError | None
    expires: float  # monotonic
    stored: float = field(default_factory=time.monotonic)


class TagCache:
    """TTL + in-flight de-duplication + stale-if-error + negative caching + invalidation."""

    def __init__(self, config: CacheConfig, loader: Loader, clock: Callable[[], float] = time.monotonic) -> None:
        self.config = config
        self._load = loader
        self._clock = clock
        self._entries: LRUCache[str, _Entry] = LRUCache(maxsize=config.max_repositories)
        self._inflight: dict[str, asyncio.Future[TagList]] = {}
        self._generation: dict[str, int] = {}
        self._background: set[asyncio.Task[None]] = set()
        self.stats = CacheStats()

    async def get(self, key: str) -> TagList:
        """The tag list of repository `key`, from cache or one coalesced upstream call."""
        now = self._clock()
        entry = self._entries.get(key)
        if entry is not None and now < entry.expires:
            if entry.error is not None:
                self.stats.negative_hits += 1
                raise entry.error
            self.stats.hits += 1
            assert entry.tags is not None
            return entry.tags
        if (
            entry is not None
            and entry.tags is not None
            and self.config.refresh_ahead
            and now - entry.expires <= self.config.stale_seconds
        ):
            self.stats.stale_served += 1
            self.refresh_in_background(key)
            return entry.tags
        self.stats.misses += 1
        try:
            return await self._refresh(key)
        except ModuleNotFound:
            raise
        except GitregError as e:
            entry = self._entries.get(key)
            if entry is not None and entry.tags is not None and self._clock() - entry.expires <= self.config.stale_seconds:
                self.stats.stale_served += 1
                log.warning("serving stale tags of %s: %s", mask_url(key), e.message)
                return entry.tags
            raise

    def _refresh(self, key: str) -> Awaitable[TagList]:
        """Start (or join) the one upstream call for `key`."""
        fut = self._inflight.get(key)
        if fut is not None:
            self.stats.coalesced += 1
            # shield: one waiter being cancelled must not cancel the call the others await.
            return asyncio.shield(fut)
        fut = asyncio.ensure_future(self._fetch(key))
        self._inflight[key] = fut
        fut.add_done_callback(lambda f: self._done(key, f))
        return asyncio.shield(fut)

    def _done(self, key: str, fut: asyncio.Future[TagList]) -> None:
        if self._inflight.get(key) is fut:
            del self._inflight[key]
        if not fut.cancelled():
            fut.exception()  # retrieved here: every waiter may have gone away

    async def _fetch(self, key: str) -> TagList:
        generation = self._generation.get(key, 0)
        self.stats.refreshes += 1
        try:
            tags = await self._load(key)
        except ModuleNotFound as e:
            self._entries[key] = _Entry(None, e, self._clock() + self.config.negative_ttl_seconds)
            raise
        except GitregError:
            self.stats.refresh_failures += 1
            raise
        # A webhook that arrived while this call ran may describe a tag the call missed.
        stale = self._generation.get(key, 0) != generation
        expires = self._clock() + (0 if stale else self.config.ttl_seconds)
        self._entries[key] = _Entry(tags, None, expires)
        if stale:
            self.refresh_in_background(key)
        return tags

    def refresh_in_background(self, key: str) -> None:
        """Refresh `key` without anyone waiting; failures are logged, never raised."""
        if key in self._inflight:
            return

        async def run() -> None:
            try:
                await self._refresh(key)
            except GitregError as e:
                log.warning("background refresh of %s failed: %s", mask_url(key), e.message)

        task = asyncio.ensure_future(run())
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    def invalidate(self, key: str) -> bool:
        """Mark `key` expired (its tags stay for stale-if-error); True when it was cached."""
        self._generation[key] = self._generation.get(key, 0) + 1
        self.stats.invalidations += 1
        entry = self._entries.get(key)
        if entry is None:
            return False
        if entry.error is not None:
            del self._entries[key]
        else:
            entry.expires = self._clock()
        return True

    def peek(self, key: str) -> TagList | None:
        """The cached tags of `key`, fresh or not, without any upstream call."""
        entry = self._entries.get(key)
        return entry.tags if entry is not None else None

    def oldest_age(self) -> float:
        """Seconds since the oldest cached tag list was fetched (0 when empty)."""
        now = self._clock()
        ages = [now - e.stored for e in self._entries.values() if e.tags is not None]
        return max(ages, default=0.0)

    def __len__(self) -> int:
        return len(self._entries)

    async def close(self) -> None:
        """Cancel background refreshes and in-flight calls (shutdown)."""
        tasks = [*self._background, *self._inflight.values()]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
