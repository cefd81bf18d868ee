"""State several replicas share through Redis: an optimisation of local truth, never a dependency.

With `[cache] backend = "redis"` every replica (and every `--workers` process) keeps its own
tag cache, catalog, moved-tag records and index, answers warm requests from them without a
Redis round trip, and uses Redis only where replicas must agree:

- tag lists (`tags`): a replica that misses asks Redis first; when Redis has none, ONE replica
  takes a short lock and runs `git ls-remote`, the others wait for its answer. So a repository
  costs one upstream call per `[cache] ttl_seconds` however many replicas ask;
- invalidations (`tags`): a webhook to any replica deletes the shared list and publishes the
  repositories; every replica expires its own entry and refreshes it within a second;
- download counts (`counts`): counted in memory per request, added to a Redis hash every
  second, read back every few seconds;
- moved-tag records (`pinning`): the earliest pin wins, so every replica pins the same commit;
  org module owners the same way (`owning`); Git hosts' "can read" answers (`access`);
  issued login tokens (`logins`);
- the index (`lease`): one replica holds a lease and indexes; it publishes the index it wrote,
  the others load it instead of indexing themselves.

This module owns the one connection: its up/down state, the reconnect loop, the background
tick and the pub/sub messages, each handed to the part it concerns (through a `wire.Wire`).

When Redis is down or unreachable each replica carries on alone from its own memory (exactly
as with `backend = "memory"`), reports it (`/readyz`, `gitreg_redis_up`), reconnects with
backoff, and on return re-subscribes, flushes the download counts it kept, and refreshes its
cached tag lists through the shared store (it may have missed invalidations meanwhile).

Everything here runs on the event loop; no call blocks longer than OP_TIMEOUT_SECONDS.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any

from gitreg.config.model import CacheConfig
from gitreg.core import urls
from gitreg.core.events import Signal
from gitreg.git.remote import TagList
from gitreg.replicas.access import SharedAccess
from gitreg.replicas.base import Loader
from gitreg.replicas.connection import (
    CONNECT_TIMEOUT_SECONDS,
    OP_TIMEOUT_SECONDS,
    RedisDown,
    connect,
    describe,
    quietly,
    replica_name,
)
from gitreg.replicas.counts import SharedDownloads
from gitreg.replicas.installs import SharedInstalls
from gitreg.replicas.lease import SharedIndex
from gitreg.replicas.logins import SharedLogins
from gitreg.replicas.owning import OwnerEntries, SharedOwners
from gitreg.replicas.pinning import Entries, SharedPins
from gitreg.replicas.tags import SharedTags
from gitreg.replicas.verdicts import SharedVerdicts
from gitreg.replicas.wire import Wire

log = logging.getLogger(__name__)

# Reconnect attempts: from MIN to MAX seconds apart, doubling.
MIN_BACKOFF_SECONDS, MAX_BACKOFF_SECONDS = 0.1, 2.0
# The background tick: ping, flush download counts, renew the index lease.
TICK_SECONDS = 1.0


class RedisShared:
    """Implements `SharedState` through Redis (see the module docstring); any Redis failure answers locally."""

    is_shared = True

    def __init__(
        self,
        config: CacheConfig,
        lock_seconds: float,
        replica: str | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        assert config.redis_url is not None  # config.py requires it with backend = "redis"
        self.on_reconnect: Signal[[]] = Signal()  # invalidations may have been missed meanwhile
        self.config = config
        self.shown_url = urls.mask(config.redis_url)  # the only form of the URL that is ever logged
        self.replica = replica or replica_name()
        self._clock = clock
        self.client = connect(config.redis_url)
        self.wire = wire = Wire(
            self.client, config.redis_prefix, self.replica, self._call, lambda: self._up, self._spawn, clock
        )
        # One part per concern; the application connects what a message from another replica does there.
        self.tags = SharedTags(wire, config, lock_seconds)
        self.on_invalidate = self.tags.on_invalidate  # another replica invalidated a repository
        self.counts = SharedDownloads(wire, self.shown_url)
        self.on_downloads = self.counts.on_downloads
        self.index = SharedIndex(wire)
        self.on_index = self.index.on_index  # the leader published an index (once follow_index() was called)
        self.pins = SharedPins(self.client, wire.key("pins"), wire.channel, wire.message)
        self.on_pin = self.pins.on_pin  # an earlier pin than this replica's
        self.owners = SharedOwners(self.client, wire.key("owners"), wire.channel, wire.message)
        self.on_owner = self.owners.on_owner  # an owner recorded in Redis
        shared_access = SharedAccess(wire)
        self.access, self.remember_access = shared_access.access, shared_access.remember_access  # Git hosts' answers
        self.logins: SharedLogins | None = SharedLogins(self.client, wire.prefix, self._call, lambda: self._up)
        self.installs: SharedInstalls | None = SharedInstalls(wire)  # observed CI installs (usage/installs.py)
        # Signature verdicts, each with an HMAC of registry.signatures' (see replicas/verdicts.py).
        self.verdicts: SharedVerdicts | None = SharedVerdicts(self.client, wire.prefix, self._call, lambda: self._up)
        self._up = False
        self._ever_up = False
        self._since = clock()
        self.last_error = "not connected yet"
        self._broken = asyncio.Event()
        self._pubsub: Any = None
        self._task: asyncio.Task[None] | None = None
        self._background: set[asyncio.Task[Any]] = set()
        self.errors = 0  # for /metrics

    # --- state ------------------------------------------------------------------------------------

    @property
    def up(self) -> bool:
        """True while Redis answers."""
        return self._up

    @property
    def bad_values(self) -> int:
        """Values read from Redis that gitreg never writes (tag lists, counts, installs), ignored."""
        installs = self.installs.bad_values if self.installs is not None else 0
        return self.tags.bad_values + self.counts.bad_values + installs

    @property
    def tag_loads(self) -> dict[str, int]:
        """Tag cache misses by how they were answered (for /metrics and the benchmarks)."""
        return self.tags.loads

    def _mark_up(self) -> None:
        if self._up:
            return
        self._up, self._since = True, self._clock()
        if self._ever_up:
            log.info("redis at %s reachable again: sharing state with the other replicas", self.shown_url)
            self.counts.stale = True
            self.on_reconnect.emit()  # invalidations may have been missed meanwhile
        else:
            log.info("sharing state with other replicas through redis at %s (replica %s)", self.shown_url, self.replica)
        self._ever_up = True

    def _mark_down(self, error: BaseException) -> None:
        self.last_error = describe(error, self.config.redis_url)
        self.errors += 1
        self._broken.set()
        if not self._up:
            return
        self._up, self._since = False, self._clock()
        self.counts.forget()
        message = "redis at %s unreachable (%s): answering from this replica's own memory until it returns"
        log.warning(message, self.shown_url, self.last_error)
        self.tags.wake_all()  # waiting for another replica's answer: go on alone

    def status(self) -> dict[str, Any]:
        """For /readyz (never the URL: it may name internal hosts)."""
        state: dict[str, Any] = {
            "backend": "redis",
            "redis": "up" if self._up else "down",
            "for_seconds": round(self._clock() - self._since, 1),
            "index": "leader" if self.leading() else "follower",
        }
        if not self._up:
            state["error"] = self.last_error
        return state

    def leading(self) -> bool:
        """True when this replica builds the index: it holds the lease, or Redis is down (alone again)."""
        return self.index.leading or not self._up

    # --- lifecycle --------------------------------------------------------------------------------

    async def start(self) -> None:
        """Connect once (briefly); on failure start alone and keep trying in the background."""
        try:
            await asyncio.wait_for(self._open(), CONNECT_TIMEOUT_SECONDS * 3)
        except Exception as e:  # noqa: BLE001 - any failure to reach Redis means "alone for now"
            self._close_pubsub()
            self._mark_down(e)
            log.warning(
                "redis at %s unreachable at start (%s): serving from memory, retrying in the background",
                self.shown_url,
                self.last_error,
            )
        self._task = asyncio.ensure_future(self._run())

    async def close(self) -> None:
        """Stop the background loop, flush download counts, give up the lease, disconnect."""
        tasks = [t for t in (self._task, *self._background) if t is not None]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        if self._up:
            try:
                await self.tags.release_held()
                await asyncio.wait_for(self.counts.flush(), OP_TIMEOUT_SECONDS)
                await self.index.give_up()
            except Exception as e:  # noqa: BLE001 - shutting down: the lease expires by itself
                log.info("redis at shutdown: %s", describe(e, self.config.redis_url))
        self._close_pubsub()
        with contextlib.suppress(Exception):  # shutting down: a broken connection is dropped anyway
            await self.client.aclose()

    def _close_pubsub(self) -> None:
        pubsub, self._pubsub = self._pubsub, None
        if pubsub is not None:
            self._spawn(quietly(pubsub.aclose()))

    async def _open(self) -> None:
        """One connection: subscribe, ping, claim or follow the index lease."""
        self._broken.clear()
        pubsub = self.client.pubsub(ignore_subscribe_messages=True)
        self._pubsub = pubsub
        await pubsub.subscribe(self.wire.channel)
        await self.client.ping()
        await self.index.lease()
        self._mark_up()
        await self.pins.republish()
        await self.owners.republish()
        await self.index.connected()

    async def _run(self) -> None:
        """Listen while connected; reconnect with backoff when not."""
        backoff = MIN_BACKOFF_SECONDS
        while True:
            if self._pubsub is None or self._broken.is_set():
                self._close_pubsub()
                try:
                    await asyncio.wait_for(self._open(), CONNECT_TIMEOUT_SECONDS * 3)
                    backoff = MIN_BACKOFF_SECONDS
                except asyncio.CancelledError:
                    raise
                except Exception as e:  # noqa: BLE001
                    self._close_pubsub()
                    self._mark_down(e)
                    await asyncio.sleep(backoff)
                    backoff = min(MAX_BACKOFF_SECONDS, backoff * 2)
                    continue
            try:
                await self._listen()
            except asyncio.CancelledError:
                raise
            except Exception as e:  # noqa: BLE001
                self._mark_down(e)

    async def _listen(self) -> None:
        next_tick = 0.0
        while not self._broken.is_set():
            message = await self._pubsub.get_message(timeout=0.2)
            if message is not None and message.get("type") == "message":
                self._handle(message["data"])
            if self._clock() >= next_tick:
                await asyncio.wait_for(self._tick(), OP_TIMEOUT_SECONDS * 3)
                next_tick = self._clock() + TICK_SECONDS

    async def _tick(self) -> None:
        await self.client.ping()  # a silent network drop shows here, not only at the next request
        await self.counts.flush()
        now = self._clock()
        if now >= self.index.next_lease:
            await self.index.lease()
        if self.counts.due(now):
            await self.counts.read()

    def _spawn(self, coro: Awaitable[Any]) -> None:
        task = asyncio.ensure_future(coro)
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    def _handle(self, data: bytes) -> None:
        """A message from a replica (this one included), handed to the part it concerns."""
        try:
            message = json.loads(data)
            kind, sender = message["kind"], message["from"]
        except (ValueError, KeyError, TypeError):
            return
        if kind == "tags":
            self.tags.wake(str(message.get("key")))
        elif kind == "inv":
            self.tags.invalidated(message.get("keys", []), sender)
        elif kind == "index":
            self.index.published(sender)
        elif kind == "downloads" and sender != self.replica:
            self.counts.stale = True
        elif kind == "pin":
            self.pins.adopt(message.get("value"), message.get("repository"), message.get("tag"))
        elif kind == "owner":
            self.owners.adopt(message.get("address"), message.get("value"))

    async def _call(self, awaitable: Awaitable[Any]) -> Any:
        """Await a Redis command; any failure marks Redis down and raises RedisDown."""
        try:
            return await asyncio.wait_for(awaitable, OP_TIMEOUT_SECONDS * 2)
        except asyncio.CancelledError:
            raise
        except Exception as e:  # noqa: BLE001 - redis-py raises many kinds; all mean "not now"
            self._mark_down(e)
            raise RedisDown(self.last_error) from None

    # --- SharedState, answered by the parts ----------------------------------------------------------

    async def load_tags(self, key: str, loader: Loader) -> TagList:
        """The shared list if fresh; else one replica's git call (the lock), awaited by the others."""
        return await self.tags.load(key, loader)

    async def invalidate(self, keys: list[str]) -> None:
        """Delete the shared lists and locks, tell everyone (see `tags`)."""
        await self.tags.invalidate(keys)

    async def pin(self, repository: str, tag: str, sha: str, allow_moved: bool, at: float) -> tuple[str, float]:
        """The commit every replica pins `tag` at, and when (see `pinning`)."""
        return await self.pins.pin(self._call if self._up else None, repository, tag, sha, allow_moved, at)

    async def pinned(self, repository: str, tag: str) -> tuple[str, float] | None:
        """The pin Redis holds for `tag` (see `pinning`); None when none, or Redis is down."""
        return await self.pins.pinned(self._call if self._up else None, repository, tag)

    def share_pins(self, source: Entries, allow_moved: bool) -> None:
        """Publish `source`'s pins at every (re)connect; with allow_moved_tags pins follow the tags instead."""
        self.pins.share(source, allow_moved)
        if self._up:  # connected before the pins were read: publish them now
            self._spawn(self.pins.republish_quietly(lambda e: describe(e, self.config.redis_url)))

    def share_owners(self, source: OwnerEntries) -> None:
        """Publish `source`'s owners at every (re)connect, and learn those Redis holds (see `owning`)."""
        self.owners.share(source)
        if self._up:  # connected before the owners were read: publish them now
            self._spawn(self.owners.republish_quietly(lambda e: describe(e, self.config.redis_url)))

    def publish_owner(self, address: str, holder: str, since: float, replaces: str) -> None:
        """Record a new owner in the background, batched (Redis down: the next (re)connect publishes it)."""
        if self._up and self.owners.queue(address, holder, since, replaces):
            self._spawn(self.owners.drain(self._call))

    async def publish_index(self, text: str) -> None:
        """The leader's index.json text, for the followers to load (kept until it can be published)."""
        await self.index.publish(text)

    def follow_index(self) -> None:
        """Emit on_index for each index the leader publishes; at once for the one read before this was called."""
        self.index.follow()

    def count_download(self, address: str) -> None:
        """Counted in memory (no round trip); added to Redis within a second."""
        self.counts.count(address)

    def downloads(self, address: str) -> int | None:
        """All replicas' count, or None while Redis is down (see `counts`)."""
        return self.counts.downloads(address)
