"""Tag lists in Redis: one `git ls-remote` per repository per TTL, however many replicas ask.

A replica that misses asks Redis first; when Redis has none, ONE replica takes a short lock
(`SET NX PX`) and runs git, stores the list (or the error, for its retry time) and publishes
that it did; the others wait for that message (pub/sub), then read the list. An invalidation
(a webhook to any replica) deletes the shared list and its lock and publishes the repositories:
every replica expires its own entry (`on_invalidate`) and refreshes it through the lock.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import secrets
from typing import Any

from gitreg.config.model import CacheConfig
from gitreg.core.errors import GitregError, failure_kind
from gitreg.core.events import Signal
from gitreg.git.remote import TagList
from gitreg.replicas.base import Loader
from gitreg.replicas.connection import OP_TIMEOUT_SECONDS, RedisDown
from gitreg.replicas.values import tag_list
from gitreg.replicas.wire import Wire

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


class SharedTags:
    """The shared tag lists and their locks, for `RedisShared` (which owns the connection)."""

    def __init__(self, wire: Wire, config: CacheConfig, lock_seconds: float) -> None:
        self.wire = wire
        self.config = config
        # Long enough for one git call (a lock outliving its holder just delays the next one).
        self.lock_ms = max(1000, int((lock_seconds + 5) * 1000))
        self._store_script = wire.client.register_script(_STORE)
        self._release_script = wire.client.register_script(_RELEASE)
        self.on_invalidate: Signal[[str]] = Signal()  # another replica invalidated this repository
        # Tag-list locks this replica holds (lock key -> token, wake-up message): released at
        # shutdown too, so the other replicas do not wait for a stopped replica's lock to expire.
        self._held: dict[str, tuple[str, str]] = {}
        self._waiters: dict[str, set[asyncio.Future[None]]] = {}
        self.bad_values = 0  # stored lists gitreg never writes, ignored
        self.loads = {"shared": 0, "led": 0, "waited": 0, "local": 0}

    def wake(self, key: str) -> None:
        """The list of `key` was stored (or the wait is over): the waiters look again."""
        for waiter in self._waiters.pop(key, ()):
            if not waiter.done():
                waiter.set_result(None)

    def wake_all(self) -> None:
        """Redis is down: nobody waits for another replica's answer, each goes on alone."""
        for key in list(self._waiters):
            self.wake(key)

    def invalidated(self, keys: list[Any], sender: str) -> None:
        """An `inv` message: wake the waiters; when another replica sent it, tell this one's cache."""
        for key in keys:
            self.wake(str(key))
            if sender != self.wire.replica:
                self.on_invalidate.emit(str(key))

    async def load(self, key: str, loader: Loader) -> TagList:
        """The shared list if fresh; else one replica's git call (the lock), awaited by the others."""
        waited = False
        while True:
            if not self.wire.up():
                self.loads["local"] += 1
                return await loader(key)
            waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
            # Registered before looking, so a "stored" message after the look is not missed.
            self._waiters.setdefault(key, set()).add(waiter)
            try:
                found = await self._read(key)
                if found is not None:
                    self.loads["waited" if waited else "shared"] += 1
                    return found
                token = secrets.token_hex(8)
                lock = self.wire.repo_key("lock", key)
                if await self.wire.call(self.wire.client.set(lock, token, nx=True, px=self.lock_ms)):
                    self.loads["led"] += 1
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

    async def _read(self, key: str) -> TagList | None:
        """The stored list (raising the stored error), or None when there is none."""
        pipe = self.wire.client.pipeline(transaction=False)
        pipe.get(self.wire.repo_key("tags", key))
        pipe.pttl(self.wire.repo_key("tags", key))
        raw, pttl = await self.wire.call(pipe.execute())
        if raw is None:
            return None
        stored = tag_list(raw)
        if stored is None:
            self.bad_values += 1
            return None  # not ours, or damaged: fetch again
        px, tags, head = stored
        age = max(0.0, (px - pttl) / 1000) if pttl > 0 else 0.0
        return TagList(tags, head=head, age=age)

    async def _lead(self, key: str, loader: Loader, token: str) -> TagList:
        """This replica holds the lock: fetch, share the answer (or the error), tell the waiters."""
        lock, stored = self.wire.repo_key("lock", key), self.wire.repo_key("tags", key)
        channel, message = self.wire.channel, self.wire.message("tags", key=key)
        self._held[lock] = (token, message)
        try:
            tags = await loader(key)
        except GitregError as e:
            kind = failure_kind(e)
            seconds = self.config.negative_ttl_seconds if kind == "not_found" else self.config.error_retry_seconds
            if seconds > 0:
                value = json.dumps({"px": int(seconds * 1000), "error": kind, "message": e.message})
                px = max(1, int(seconds * 1000))
                self._settle(lock, self._store_script(keys=[lock, stored], args=[token, value, px, channel, message]))
            else:
                self._settle(lock, self._release_script(keys=[lock], args=[token, channel, message]))
            raise
        except BaseException:
            self._settle(lock, self._release_script(keys=[lock], args=[token, channel, message]))
            raise
        # Kept at least a second, so the waiters woken now still find it (ttl_seconds may be 0).
        px = max(1000, int(self.config.ttl_seconds * 1000))
        value = json.dumps({"px": px, "tags": dict(tags.tags), "head": tags.head})
        with contextlib.suppress(RedisDown):  # the answer is good here; the others go on alone
            await self.wire.call(self._store_script(keys=[lock, stored], args=[token, value, px, channel, message]))
        self._held.pop(lock, None)
        return tags

    def _settle(self, lock: str, command: Any) -> None:
        """Give up a held lock in the background (store the answer, or release it); forgotten once Redis has it."""

        async def settle() -> None:
            with contextlib.suppress(RedisDown):
                await self.wire.call(command)
            self._held.pop(lock, None)

        self.wire.spawn(settle())

    async def invalidate(self, keys: list[str]) -> None:
        """Delete the shared lists (and locks: a call in flight must not share its older answer), tell everyone."""
        if not self.wire.up() or not keys:
            return
        pipe = self.wire.client.pipeline(transaction=True)
        for key in keys:
            pipe.delete(self.wire.repo_key("tags", key), self.wire.repo_key("lock", key))
        pipe.publish(self.wire.channel, self.wire.message("inv", keys=keys))
        with contextlib.suppress(RedisDown):
            await self.wire.call(pipe.execute())

    async def release_held(self) -> None:
        """At shutdown: release the locks of calls cut short (their release task was just cancelled),
        or every other replica would wait for them to expire. Raises on a Redis failure."""
        for lock, (token, message) in list(self._held.items()):
            await asyncio.wait_for(
                self._release_script(keys=[lock], args=[token, self.wire.channel, message]), OP_TIMEOUT_SECONDS
            )
            self._held.pop(lock, None)
