"""The index in Redis: one replica holds a lease and indexes, the others load the index it publishes.

The lease is a key taken with `SET NX PX` and renewed every few seconds by its holder; with
Redis down every replica leads (alone again). The leader stores the index.json text it wrote
and publishes an `index` message; a follower reads it and emits `on_index` once the application
is ready for it (`follow`). An index written while Redis was unreachable is published once
this replica leads and is connected again.
"""

from __future__ import annotations

import asyncio
import logging

from gitreg.core.events import Signal
from gitreg.replicas.connection import OP_TIMEOUT_SECONDS, RedisDown
from gitreg.replicas.wire import Wire

log = logging.getLogger(__name__)

LEASE_SECONDS, LEASE_RENEW_SECONDS = 10.0, 3.0

_RENEW = """
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('PEXPIRE', KEYS[1], ARGV[2])
end
return 0
"""
_GIVE_UP = "if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end return 0"


class SharedIndex:
    """The index lease and the published index, for `RedisShared` (which owns the connection)."""

    def __init__(self, wire: Wire) -> None:
        self.wire = wire
        self._renew_script = wire.client.register_script(_RENEW)
        self.on_index: Signal[[str]] = Signal()  # the leader published an index (once follow() was called)
        self.leading = False  # this replica holds the lease
        self.next_lease = 0.0  # when to renew (or try to take) the lease
        # An index.json written while Redis was unreachable: published once leading and connected.
        self._unpublished: str | None = None
        # The leader's index read before the application was ready for it (follow).
        self._following = False
        self._received: str | None = None

    async def lease(self) -> None:
        """Hold or renew the index lease; take it when free."""
        self.next_lease = self.wire.clock() + LEASE_RENEW_SECONDS
        key, ms = self.wire.key("index-lease"), int(LEASE_SECONDS * 1000)
        was = self.leading
        if self.leading:
            self.leading = bool(await self._renew_script(keys=[key], args=[self.wire.replica, ms]))
        if not self.leading:
            self.leading = bool(await self.wire.client.set(key, self.wire.replica, nx=True, px=ms))
        if self.leading != was:
            log.info(
                "index: this replica %s",
                "builds the index (lease taken)" if self.leading else "loads the index another replica builds",
            )
            if self.leading and self.wire.up():
                await self.publish_pending()

    async def connected(self) -> None:
        """Just (re)connected, the lease claimed or not: publish this replica's index, or read the leader's."""
        if self.leading:
            await self.publish_pending()
        else:
            await self.read()

    async def publish(self, text: str) -> None:
        """The leader's index.json text, for the followers to load (kept until it can be published)."""
        self._unpublished = text
        await self.publish_pending()

    async def publish_pending(self) -> None:
        """Publish the index kept for it, when leading and connected."""
        text = self._unpublished
        if text is None or not (self.wire.up() and self.leading):
            return
        self._unpublished = None
        pipe = self.wire.client.pipeline(transaction=True)
        pipe.set(self.wire.key("index"), text)
        pipe.publish(self.wire.channel, self.wire.message("index"))
        try:
            await self.wire.call(pipe.execute())
        except RedisDown:
            if self._unpublished is None:
                self._unpublished = text  # published once connected again (unless a newer one is)

    def published(self, sender: str) -> None:
        """An `index` message: a follower reads the index another replica published."""
        if sender != self.wire.replica and not self.leading:
            self.wire.spawn(self.read())

    async def read(self) -> None:
        """Read the leader's index: emitted on on_index, or kept for follow()."""
        try:
            raw = await self.wire.call(self.wire.client.get(self.wire.key("index")))
        except RedisDown:
            return
        if raw is not None and not self.leading:
            text = raw.decode("utf-8", "replace")
            if self._following:
                self.on_index.emit(text)
            else:
                self._received = text  # for follow: it may not be published again

    def follow(self) -> None:
        """Emit on_index for each index the leader publishes; at once for the one read before this was called."""
        self._following = True
        text, self._received = self._received, None
        if text is not None and not self.leading:
            self.on_index.emit(text)

    async def give_up(self) -> None:
        """At shutdown: free the lease for another replica at once (raises on a Redis failure)."""
        if self.leading:
            lease = self.wire.client.eval(_GIVE_UP, 1, self.wire.key("index-lease"), self.wire.replica)
            await asyncio.wait_for(lease, OP_TIMEOUT_SECONDS)
