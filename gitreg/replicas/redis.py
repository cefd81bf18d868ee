"""State several replicas share through Redis: an optimisation of local truth, never a dependency.

With `[cache] backend = "redis"` every replica (and every `--workers` process) keeps its own
tag cache, catalog, moved-tag records and index, answers warm requests from them without a
Redis round trip, and uses Redis only where replicas must agree:

- tag lists: a replica that misses asks Redis first; when Redis has none, ONE replica takes a
  short lock (`SET NX PX`) and runs `git ls-remote`, stores the list (for the rest of the TTL)
  and publishes that it did; the others wait for that message (pub/sub), then read the list.
  So a repository costs one upstream call per `[cache] ttl_seconds` however many replicas ask;
- invalidations: a webhook to any replica deletes the shared list and publishes the repositories;
  every replica expires its own entry and refreshes it (through the lock: one upstream call) within a second;
- download counts: counted in memory per request, added to a Redis hash (`HINCRBY`) every
  second, read back every few seconds;
- moved-tag records: the first commit a tag was served at, and when; the earliest pin wins,
  so every replica pins the same commit, and each replica's pins on disk are published again
  at every (re)connect (see `pinning`); org module owners the same way (see `owning`);
- the index: one replica holds a lease (`SET NX PX`, renewed) and indexes; it publishes the
  index it wrote, the others load it instead of indexing themselves.

When Redis is down or unreachable each replica carries on alone from its own memory (exactly
as with `backend = "memory"`), reports it (`/readyz`, `gitreg_redis_up`), reconnects with
backoff, and on return re-subscribes, flushes the download counts it kept, and refreshes its
cached tag lists through the shared store (it may have missed invalidations meanwhile).

Everything here runs on the event loop; no call blocks longer than OP_TIMEOUT_SECONDS.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import logging
import secrets
import time
from collections.abc import Awaitable, Callable
from typing import Any

from gitreg.config.model import CacheConfig
from gitreg.core import urls
from gitreg.core.errors import GitregError, failure_kind
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
from gitreg.replicas.logins import SharedLogins
from gitreg.replicas.owning import OwnerEntries, SharedOwners
from gitreg.replicas.pinning import Entries, SharedPins
from gitreg.replicas.values import download_totals, tag_list

log = logging.getLogger(__name__)

# Reconnect attempts: from MIN to MAX seconds apart, doubling.
MIN_BACKOFF_SECONDS, MAX_BACKOFF_SECONDS = 0.1, 2.0
# The background tick: ping, flush download counts, renew the index lease.
TICK_SECONDS = 1.0
DOWNLOADS_READ_SECONDS = 2.0
LEASE_SECONDS, LEASE_RENEW_SECONDS = 10.0, 3.0
# A waiter whose pub/sub message got lost (a reconnect) looks again after this long.
WAIT_CHECK_SECONDS = 1.0

# Store a fetched list (or error) only if this replica still holds the lock: an invalidation
# that arrived meanwhile deleted the lock, and its (older) answer must not be shared.
_STORE = """
if redis.call('GET', KEYS[1]) == ARGV[1] then
  redis.call('SET', KEYS[2], ARGV[2], 'PX', ARGV[3])
  redis.call('DEL', KEYS[1])
  redis.call('PUBLISH', ARGV[4], ARGV[5])
  return 1
end
return 0
"""
_RELEASE = """
if redis.call('GET', KEYS[1]) == ARGV[1] then
  redis.call('DEL', KEYS[1])
  redis.call('PUBLISH', ARGV[2], ARGV[3])
  return 1
end
return 0
"""
_RENEW = """
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('PEXPIRE', KEYS[1], ARGV[2])
end
return 0
"""
_GIVE_UP = "if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end return 0"


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
        # The application connects what a message from another replica does here.
        self.on_invalidate: Signal[[str]] = Signal()
        self.on_reconnect: Signal[[]] = Signal()
        self.on_downloads: Signal[[]] = Signal()
        self.on_index: Signal[[str]] = Signal()  # the leader published an index (once follow_index() was called)
        self.config = config
        self.shown_url = urls.mask(config.redis_url)  # the only form of the URL that is ever logged
        self.replica = replica or replica_name()
        self.prefix = config.redis_prefix
        self.channel = f"{self.prefix}events"
        # Long enough for one git call (a lock outliving its holder just delays the next one).
        self.lock_ms = max(1000, int((lock_seconds + 5) * 1000))
        self._clock = clock
        self.client = connect(config.redis_url)
        self._store_script = self.client.register_script(_STORE)
        self._release_script = self.client.register_script(_RELEASE)
        self._renew_script = self.client.register_script(_RENEW)
        self.pins = SharedPins(self.client, self._key("pins"), self.channel, self._message)
        self.on_pin = self.pins.on_pin  # an earlier pin than this replica's
        self.owners = SharedOwners(self.client, self._key("owners"), self.channel, self._message)
        self.on_owner = self.owners.on_owner  # an owner recorded in Redis
        shared_access = SharedAccess(self.client, self._key("access:"), self._call, lambda: self._up, self._spawn)
        self.access, self.remember_access = shared_access.access, shared_access.remember_access  # Git hosts' answers
        self.logins: SharedLogins | None = SharedLogins(self.client, self.prefix, self._call, lambda: self._up)
        self._up = False
        self._ever_up = False
        self._since = clock()
        self.last_error = "not connected yet"
        self._broken = asyncio.Event()
        self._pubsub: Any = None
        self._task: asyncio.Task[None] | None = None
        self._background: set[asyncio.Task[Any]] = set()
        # Tag-list locks this replica holds (lock key -> token, wake-up message): released at
        # shutdown too, so the other replicas do not wait for a stopped replica's lock to expire.
        self._held: dict[str, tuple[str, str]] = {}
        self._waiters: dict[str, set[asyncio.Future[None]]] = {}
        self._leading = False
        self._pending: dict[str, int] = {}
        self._totals: dict[str, int] | None = None
        self._totals_stale, self._next_totals, self._next_lease = True, 0.0, 0.0
        # An index.json written while Redis was unreachable: published once leading and connected.
        self._unpublished: str | None = None
        # The leader's index read before the application was ready for it (follow_index).
        self._following = False
        self._received_index: str | None = None
        # Counters for /metrics and the benchmarks.
        self.errors = 0
        self.bad_values = 0  # values read from Redis that gitreg never writes (tag lists, counts), ignored
        self._bad_logged = False
        self.tag_loads = {"shared": 0, "led": 0, "waited": 0, "local": 0}

    # --- state ------------------------------------------------------------------------------------

    @property
    def up(self) -> bool:
        """True while Redis answers."""
        return self._up

    def _mark_up(self) -> None:
        if self._up:
            return
        self._up, self._since = True, self._clock()
        if self._ever_up:
            log.info("redis at %s reachable again: sharing state with the other replicas", self.shown_url)
            self._totals_stale = True
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
        self._totals = None
        message = "redis at %s unreachable (%s): answering from this replica's own memory until it returns"
        log.warning(message, self.shown_url, self.last_error)
        for key in list(self._waiters):
            self._wake(key)  # waiting for another replica's answer: go on alone

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
        return self._leading or not self._up

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
                # Locks of calls cut short by the shutdown: release them now (their release task
                # was just cancelled), or every other replica would wait for them to expire.
                for lock, (token, message) in list(self._held.items()):
                    await asyncio.wait_for(
                        self._release_script(keys=[lock], args=[token, self.channel, message]), OP_TIMEOUT_SECONDS
                    )
                    self._held.pop(lock, None)
                await asyncio.wait_for(self._flush_downloads(), OP_TIMEOUT_SECONDS)
                if self._leading:
                    lease = self.client.eval(_GIVE_UP, 1, self._key("index-lease"), self.replica)
                    await asyncio.wait_for(lease, OP_TIMEOUT_SECONDS)
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
        await pubsub.subscribe(self.channel)
        await self.client.ping()
        await self._lease()
        self._mark_up()
        await self.pins.republish()
        await self.owners.republish()
        if self._leading:
            await self._publish_index()
        else:
            await self._read_index()

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
        await self._flush_downloads()
        now = self._clock()
        if now >= self._next_lease:
            await self._lease()
        if self._totals_stale or now >= self._next_totals:
            await self._read_totals()

    def _spawn(self, coro: Awaitable[Any]) -> None:
        task = asyncio.ensure_future(coro)
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    def _key(self, *parts: str) -> str:
        return self.prefix + ":".join(parts)

    def _repo_key(self, kind: str, repository: str) -> str:
        return self._key(kind, hashlib.sha256(repository.encode("utf-8", "surrogateescape")).hexdigest()[:40])

    def _message(self, kind: str, **fields: Any) -> str:
        return json.dumps({"kind": kind, "from": self.replica, **fields})

    def _handle(self, data: bytes) -> None:
        """A message from a replica (this one included)."""
        try:
            message = json.loads(data)
            kind, sender = message["kind"], message["from"]
        except (ValueError, KeyError, TypeError):
            return
        if kind == "tags":
            self._wake(str(message.get("key")))
        elif kind == "inv":
            for key in message.get("keys", []):
                self._wake(str(key))
                if sender != self.replica:
                    self.on_invalidate.emit(str(key))
        elif kind == "index" and sender != self.replica and not self._leading:
            self._spawn(self._read_index())
        elif kind == "downloads" and sender != self.replica:
            self._totals_stale = True
        elif kind == "pin":
            self.pins.adopt(message.get("value"), message.get("repository"), message.get("tag"))
        elif kind == "owner":
            self.owners.adopt(message.get("address"), message.get("value"))

    # --- tag lists ----------------------------------------------------------------------------------

    def _wake(self, key: str) -> None:
        for waiter in self._waiters.pop(key, ()):
            if not waiter.done():
                waiter.set_result(None)

    async def load_tags(self, key: str, loader: Loader) -> TagList:
        """The shared list if fresh; else one replica's git call (the lock), awaited by the others."""
        waited = False
        while True:
            if not self._up:
                self.tag_loads["local"] += 1
                return await loader(key)
            waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
            # Registered before looking, so a "stored" message after the look is not missed.
            self._waiters.setdefault(key, set()).add(waiter)
            try:
                found = await self._read_tags(key)
                if found is not None:
                    self.tag_loads["waited" if waited else "shared"] += 1
                    return found
                token = secrets.token_hex(8)
                if await self._call(self.client.set(self._repo_key("lock", key), token, nx=True, px=self.lock_ms)):
                    self.tag_loads["led"] += 1
                    return await self._lead(key, loader, token)
                waited = True
                # On a timeout, look again (a lost message; or the holder died: its lock expires).
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(waiter, WAIT_CHECK_SECONDS)
            except RedisDown:
                continue  # now not up: the loop answers locally
            finally:
                waiters = self._waiters.get(key)
                if waiters is not None:
                    waiters.discard(waiter)
                    if not waiters:
                        del self._waiters[key]

    async def _read_tags(self, key: str) -> TagList | None:
        """The stored list (raising the stored error), or None when there is none."""
        pipe = self.client.pipeline(transaction=False)
        pipe.get(self._repo_key("tags", key))
        pipe.pttl(self._repo_key("tags", key))
        raw, pttl = await self._call(pipe.execute())
        if raw is None:
            return None
        stored = tag_list(raw)
        if stored is None:
            self.bad_values += 1
            return None  # not ours, or damaged: fetch again
        px, tags = stored
        age = max(0.0, (px - pttl) / 1000) if pttl > 0 else 0.0
        return TagList(tags, age=age)

    async def _lead(self, key: str, loader: Loader, token: str) -> TagList:
        """This replica holds the lock: fetch, share the answer (or the error), tell the waiters."""
        lock, stored = self._repo_key("lock", key), self._repo_key("tags", key)
        message = self._message("tags", key=key)
        self._held[lock] = (token, message)
        try:
            tags = await loader(key)
        except GitregError as e:
            kind = failure_kind(e)
            seconds = self.config.negative_ttl_seconds if kind == "not_found" else self.config.error_retry_seconds
            if seconds > 0:
                value = json.dumps({"px": int(seconds * 1000), "error": kind, "message": e.message})
                self._spawn(
                    self._settle(
                        lock,
                        self._store_script(
                            keys=[lock, stored], args=[token, value, max(1, int(seconds * 1000)), self.channel, message]
                        ),
                    )
                )
            else:
                self._spawn(self._settle(lock, self._release_script(keys=[lock], args=[token, self.channel, message])))
            raise
        except BaseException:
            self._spawn(self._settle(lock, self._release_script(keys=[lock], args=[token, self.channel, message])))
            raise
        # Kept at least a second, so the waiters woken now still find it (ttl_seconds may be 0).
        px = max(1000, int(self.config.ttl_seconds * 1000))
        value = json.dumps({"px": px, "tags": dict(tags.tags)})
        with contextlib.suppress(RedisDown):  # the answer is good here; the others go on alone
            await self._call(self._store_script(keys=[lock, stored], args=[token, value, px, self.channel, message]))
        self._held.pop(lock, None)
        return tags

    async def invalidate(self, keys: list[str]) -> None:
        """Delete the shared lists (and locks: a call in flight must not share its older answer), tell everyone."""
        if not self._up or not keys:
            return
        pipe = self.client.pipeline(transaction=True)
        for key in keys:
            pipe.delete(self._repo_key("tags", key), self._repo_key("lock", key))
        pipe.publish(self.channel, self._message("inv", keys=keys))
        with contextlib.suppress(RedisDown):
            await self._call(pipe.execute())

    # --- moved-tag records --------------------------------------------------------------------------

    async def pin(self, repository: str, tag: str, sha: str, allow_moved: bool, at: float) -> tuple[str, float]:
        """The commit every replica pins `tag` at, and when (see `pinning`)."""
        return await self.pins.pin(self._call if self._up else None, repository, tag, sha, allow_moved, at)

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

    # --- the index ----------------------------------------------------------------------------------

    async def _lease(self) -> None:
        """Hold or renew the index lease; take it when free."""
        self._next_lease = self._clock() + LEASE_RENEW_SECONDS
        key, ms = self._key("index-lease"), int(LEASE_SECONDS * 1000)
        was = self._leading
        if self._leading:
            self._leading = bool(await self._renew_script(keys=[key], args=[self.replica, ms]))
        if not self._leading:
            self._leading = bool(await self.client.set(key, self.replica, nx=True, px=ms))
        if self._leading != was:
            log.info(
                "index: this replica %s",
                "builds the index (lease taken)" if self._leading else "loads the index another replica builds",
            )
            if self._leading and self._up:
                await self._publish_index()

    async def publish_index(self, text: str) -> None:
        """The leader's index.json text, for the followers to load (kept until it can be published)."""
        self._unpublished = text
        await self._publish_index()

    async def _publish_index(self) -> None:
        text = self._unpublished
        if text is None or not (self._up and self._leading):
            return
        self._unpublished = None
        pipe = self.client.pipeline(transaction=True)
        pipe.set(self._key("index"), text)
        pipe.publish(self.channel, self._message("index"))
        try:
            await self._call(pipe.execute())
        except RedisDown:
            if self._unpublished is None:
                self._unpublished = text  # published once connected again (unless a newer one is)

    async def _read_index(self) -> None:
        try:
            raw = await self._call(self.client.get(self._key("index")))
        except RedisDown:
            return
        if raw is not None and not self._leading:
            text = raw.decode("utf-8", "replace")
            if self._following:
                self.on_index.emit(text)
            else:
                self._received_index = text  # for follow_index: it may not be published again

    def follow_index(self) -> None:
        """Emit on_index for each index the leader publishes; at once for the one read before this was called."""
        self._following = True
        text, self._received_index = self._received_index, None
        if text is not None and not self._leading:
            self.on_index.emit(text)

    # --- download counts ----------------------------------------------------------------------------

    def count_download(self, address: str) -> None:
        """Counted in memory (no round trip); added to Redis within a second."""
        self._pending[address] = self._pending.get(address, 0) + 1

    def downloads(self, address: str) -> int | None:
        """All replicas' count (as last read, plus this replica's not yet sent), or None while Redis is down."""
        if self._totals is None:
            return None
        return self._totals.get(address, 0) + self._pending.get(address, 0)

    async def _flush_downloads(self) -> None:
        if not self._pending:
            return
        pending, self._pending = self._pending, {}
        pipe = self.client.pipeline(transaction=True)
        for address, count in pending.items():
            pipe.hincrby(self._key("downloads"), address, count)
        pipe.publish(self.channel, self._message("downloads"))
        try:
            results = await pipe.execute()
        except BaseException:
            for address, count in pending.items():  # not sent: send them next time
                self._pending[address] = self._pending.get(address, 0) + count
            raise
        if self._totals is not None:
            # `results` ends with the PUBLISH count, one more than the increments.
            for address, total in zip(pending, results, strict=False):
                self._totals[address] = int(total)
            self.on_downloads.emit()

    async def _read_totals(self) -> None:
        self._totals_stale = False
        self._next_totals = self._clock() + DOWNLOADS_READ_SECONDS
        raw = await self.client.hgetall(self._key("downloads"))
        totals, bad = download_totals(raw)
        if bad:  # not what gitreg writes: ignored, never "Redis is down"
            self.bad_values += bad
            if not self._bad_logged:
                self._bad_logged = True
                log.warning("redis at %s: ignored %d download counts that are not counts", self.shown_url, bad)
        if totals != self._totals:
            self._totals = totals
            self.on_downloads.emit()

    # --- plumbing -----------------------------------------------------------------------------------

    async def _call(self, awaitable: Awaitable[Any]) -> Any:
        """Await a Redis command; any failure marks Redis down and raises RedisDown."""
        try:
            return await asyncio.wait_for(awaitable, OP_TIMEOUT_SECONDS * 2)
        except asyncio.CancelledError:
            raise
        except Exception as e:  # noqa: BLE001 - redis-py raises many kinds; all mean "not now"
            self._mark_down(e)
            raise RedisDown(self.last_error) from None

    async def _settle(self, lock: str, awaitable: Awaitable[Any]) -> None:
        """Give up a held lock (store the answer, or release it); forgotten once Redis has it."""
        await self._quiet_call(awaitable)
        self._held.pop(lock, None)

    async def _quiet_call(self, awaitable: Awaitable[Any]) -> None:
        with contextlib.suppress(RedisDown):
            await self._call(awaitable)
