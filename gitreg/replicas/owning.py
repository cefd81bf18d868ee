"""Org module owners in Redis: every replica serves an address from the repository that held it first.

Each replica settles owners from its own listings and keeps them on its disk (orgs.json); Redis
only lets replicas agree. An owner is stored as "<seconds since the epoch it was first held>
<holder>" in one hash keyed by address, the holder being opaque here (the orgs package's JSON of
org key and full name). The earliest holder wins (`_OWN`; a tie goes to the smaller holder text,
a damaged value is replaced); where a replica's holder is replaced, an `owner` message makes every
replica adopt the earlier one. A replica that found its holder gone (the API no longer lists it)
names it as `replaces`, so its new holder overwrites exactly that record. At every (re)connect a
replica publishes its own owners again (Redis may have restarted empty) and reads every owner
Redis holds, so a replica started after a newcomer appeared learns the first holder.
"""

from __future__ import annotations

import asyncio
import logging
import math
from collections import deque
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from gitreg.core.events import Signal
from gitreg.replicas.connection import OP_TIMEOUT_SECONDS
from gitreg.replicas.pinning import REPUBLISH_BATCH
from gitreg.replicas.wire import Call

if TYPE_CHECKING:
    from redis.asyncio import Redis

log = logging.getLogger(__name__)

# Record an owner unless an earlier one is recorded (other than the one it replaces); tell every
# replica when one was replaced. KEYS: the hash. ARGV: address, holder, time, channel, replaces,
# message. The answer: the winning value.
_OWN = """
local cur = redis.call('HGET', KEYS[1], ARGV[1])
if cur then
  local at, who = string.match(cur, '^(%S+) (.+)$')
  local theirs, mine = tonumber(at), tonumber(ARGV[3])
  if theirs and who ~= ARGV[5] and (theirs < mine or (theirs == mine and who <= ARGV[2])) then return cur end
end
local value = ARGV[3] .. ' ' .. ARGV[2]
redis.call('HSET', KEYS[1], ARGV[1], value)
if cur and cur ~= value then redis.call('PUBLISH', ARGV[4], ARGV[6]) end
return value
"""
# The longest holder text taken from Redis (an org key and a full name are far shorter).
MAX_HOLDER = 4096

OwnerEntries = Callable[[], list[tuple[str, str, float]]]  # (address, holder, first held)


class SharedOwners:
    """The owners hash of one Redis, for `RedisShared` (which owns the connection and the messages)."""

    def __init__(self, client: Redis, key: str, channel: str, message: Callable[..., str]) -> None:
        self.client = client
        self.key = key
        self.channel = channel
        self._message = message
        self._script = client.register_script(_OWN)
        self._source: OwnerEntries = list
        self._queued: deque[tuple[str, str, float, str]] = deque()  # new owners to record (`drain`)
        self._draining = False
        self.on_owner: Signal[[str, str, float]] = Signal()  # (address, holder, since) recorded in Redis

    def share(self, source: OwnerEntries) -> None:
        """Where this replica's owners are read, to publish them again at every (re)connect."""
        self._source = source

    def queue(self, address: str, holder: str, since: float, replaces: str) -> bool:
        """Queue this replica's new owner of `address` for `drain`; True when no drain runs (start one)."""
        self._queued.append((address, holder, since, replaces))
        if self._draining:
            return False
        self._draining = True
        return True

    async def drain(self, call: Call) -> None:
        """Record the queued owners, REPUBLISH_BATCH to a pipeline through `call` (30,000 new owners after
        a first listing: 60 round trips, the loop free between them, not 30,000 tasks, #22), adopting
        each earlier one Redis holds. A failure (`call` marks Redis down) drops the queue: the next
        (re)connect publishes every owner again."""
        try:
            while self._queued:
                batch = [self._queued.popleft() for _ in range(min(REPUBLISH_BATCH, len(self._queued)))]
                pipe = self.client.pipeline(transaction=False)
                for address, holder, since, replaces in batch:
                    await self._script(keys=[self.key], args=self._args(address, holder, since, replaces), client=pipe)
                winners = await call(pipe.execute())
                for (address, *_), winner in zip(batch, winners, strict=True):
                    self.adopt(address, winner)
        except Exception:  # noqa: BLE001 - `call` logged it
            self._queued.clear()
        finally:
            self._draining = False

    def _args(self, address: str, holder: str, since: float, replaces: str) -> list[Any]:
        value = f"{since!r} {holder}"
        message = self._message("owner", address=address, value=value)
        return [address, holder, repr(since), self.channel, replaces, message]

    async def republish_quietly(self, describe: Callable[[BaseException], str]) -> None:
        """republish(), a failure logged: the next (re)connect publishes them again."""
        try:
            await self.republish()
        except Exception as e:  # noqa: BLE001
            log.warning("could not share this replica's org module owners through redis: %s", describe(e))

    async def republish(self) -> None:
        """Tell Redis this replica's owners again (it may have restarted empty), then adopt every owner
        it holds that is earlier than this replica's (or of an address this replica holds not yet)."""
        entries = self._source()
        for start in range(0, len(entries), REPUBLISH_BATCH):
            batch = entries[start : start + REPUBLISH_BATCH]
            pipe = self.client.pipeline(transaction=False)
            for address, holder, since in batch:
                await self._script(keys=[self.key], args=self._args(address, holder, since, ""), client=pipe)
            await asyncio.wait_for(pipe.execute(), OP_TIMEOUT_SECONDS * 3)
        cursor: Any = 0
        found: Any
        while True:  # HSCAN: bounded replies however many owners there are
            cursor, found = await asyncio.wait_for(
                self.client.hscan(self.key, cursor, count=REPUBLISH_BATCH), OP_TIMEOUT_SECONDS * 3
            )
            for address, value in found.items():
                self.adopt(address, value)
            if not cursor:
                return

    def adopt(self, address: object, value: object) -> None:
        """An owner recorded in Redis (another replica's message, or an answer to ours): tell the owners."""
        if isinstance(address, bytes):
            address = address.decode("utf-8", "replace")
        owner = owner_value(value)
        if owner is not None and isinstance(address, str) and len(address) < 1024:
            self.on_owner.emit(address, owner[1], owner[0])


def owner_value(value: object) -> tuple[float, str] | None:
    """(first held, holder) from a Redis owner value "<time> <holder>"; None if it is not one."""
    if isinstance(value, bytes):
        value = value.decode("utf-8", "replace")
    if not isinstance(value, str):
        return None
    at, _, holder = value.partition(" ")
    try:
        since = float(at)
    except ValueError:
        return None
    if not holder or len(holder) > MAX_HOLDER or not math.isfinite(since):
        return None
    return since, holder
