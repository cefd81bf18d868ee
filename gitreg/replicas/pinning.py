"""Moved-tag records in Redis: every replica pins a tag at the same commit, whatever Redis lost.

The pins on each replica's disk (`storage.pins`) are the truth; Redis only lets replicas agree.
A pin is stored as "<sha> <seconds since the epoch it was first pinned>" in one hash, and the
earliest pin wins (`_PIN`; a tie goes to the smaller commit id, a value without a time counts
as the earliest). At every (re)connect a replica publishes its own pins again (Redis may have
restarted empty); where two replicas pinned one tag at different commits (a replica pinned
while Redis was gone, or after it came back empty), the earlier pin replaces the later one in
Redis and a `pin` message makes every replica adopt it (`TagPins.adopt`). With
`[git] allow_moved_tags = true` pins follow the tag instead: the last one is stored, nothing
is published again.
"""

from __future__ import annotations

import asyncio
import json
import logging
import math
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from gitreg.core.events import Signal
from gitreg.git.remote import SHA_RE
from gitreg.replicas.connection import OP_TIMEOUT_SECONDS, RedisDown
from gitreg.replicas.wire import Call

if TYPE_CHECKING:
    from redis.asyncio import Redis

log = logging.getLogger(__name__)

# Pin a tag unless an earlier pin is recorded; tell every replica when a pin was replaced.
# KEYS: the hash. ARGV: field, sha, time, channel, message. The answer: the winning value.
_PIN = """
local cur = redis.call('HGET', KEYS[1], ARGV[1])
if cur then
  local sha, at = string.match(cur, '^(%S+) (%S+)$')
  if not sha then sha, at = cur, '0' end
  local theirs, mine = tonumber(at) or 0, tonumber(ARGV[3])
  if theirs < mine or (theirs == mine and sha <= ARGV[2]) then return cur end
end
local value = ARGV[2] .. ' ' .. ARGV[3]
redis.call('HSET', KEYS[1], ARGV[1], value)
if cur then redis.call('PUBLISH', ARGV[4], ARGV[5]) end
return value
"""
# Pins published again per round trip after a (re)connect.
REPUBLISH_BATCH = 500

Entries = Callable[[], list[tuple[str, str, str, float]]]


class SharedPins:
    """The pins hash of one Redis, for `RedisShared` (which owns the connection and the messages)."""

    def __init__(self, client: Redis, key: str, channel: str, message: Callable[..., str]) -> None:
        self.client = client
        self.key = key
        self.channel = channel
        self._message = message
        self._script = client.register_script(_PIN)
        self._source: Entries = list
        self.follow_tags = False
        self.on_pin: Signal[[str, str, str, float]] = Signal()  # an earlier pin than this replica's

    def share(self, source: Entries, allow_moved: bool) -> None:
        """Where this replica's pins are read, to publish them again at every (re)connect."""
        self._source, self.follow_tags = source, allow_moved

    async def pin(
        self, call: Call | None, repository: str, tag: str, sha: str, allow_moved: bool, at: float
    ) -> tuple[str, float]:
        """The commit every replica pins `tag` at, and when: the earliest recorded, or (`sha`, `at`)
        to follow a moved tag or when Redis is down (`call` None, or failing)."""
        if call is None:
            return sha, at
        field = json.dumps([repository, tag], ensure_ascii=False)
        try:
            if allow_moved:
                await call(self.client.hset(self.key, field, f"{sha} {at!r}"))
                return sha, at
            winner = await call(self._script(keys=[self.key], args=self._args(repository, tag, sha, at)))
        except RedisDown:
            return sha, at
        return pin_value(winner) or (sha, at)

    async def pinned(self, call: Call | None, repository: str, tag: str) -> tuple[str, float] | None:
        """The pin recorded for `tag` (read-only), or None: none recorded, or Redis down (`call` None, or failing)."""
        if call is None:
            return None
        try:
            value = await call(self.client.hget(self.key, json.dumps([repository, tag], ensure_ascii=False)))
        except RedisDown:
            return None
        return pin_value(value)

    def _args(self, repository: str, tag: str, sha: str, at: float) -> list[Any]:
        field = json.dumps([repository, tag], ensure_ascii=False)
        message = self._message("pin", repository=repository, tag=tag, value=f"{sha} {at!r}")
        return [field, sha, repr(at), self.channel, message]

    async def republish_quietly(self, describe: Callable[[BaseException], str]) -> None:
        """republish(), a failure logged: the next (re)connect publishes them again."""
        try:
            await self.republish()
        except Exception as e:  # noqa: BLE001
            log.warning("could not publish this replica's pins to redis: %s", describe(e))

    async def republish(self) -> None:
        """Tell Redis this replica's pins again (it may have restarted empty); adopt any earlier one it holds."""
        if self.follow_tags:
            return
        entries = self._source()
        for start in range(0, len(entries), REPUBLISH_BATCH):
            batch = entries[start : start + REPUBLISH_BATCH]
            pipe = self.client.pipeline(transaction=False)
            for repository, tag, sha, at in batch:
                await self._script(keys=[self.key], args=self._args(repository, tag, sha, at), client=pipe)
            winners = await asyncio.wait_for(pipe.execute(), OP_TIMEOUT_SECONDS * 3)
            for (repository, tag, _, _), winner in zip(batch, winners, strict=True):
                self.adopt(winner, repository, tag)

    def adopt(self, value: object, repository: object, tag: object) -> None:
        """A pin recorded in Redis (another replica's message, or an answer to ours): tell the pins."""
        pinned = pin_value(value)
        if pinned is not None and isinstance(repository, str) and isinstance(tag, str):
            self.on_pin.emit(repository, tag, *pinned)


def pin_value(value: object) -> tuple[str, float] | None:
    """(commit, when pinned) from a Redis pin value, "<sha> <time>" or a bare sha (time 0); None if neither."""
    if isinstance(value, bytes):
        value = value.decode("utf-8", "replace")
    if not isinstance(value, str):
        return None
    sha, _, at = value.partition(" ")
    if not SHA_RE.fullmatch(sha):
        return None
    try:
        when = float(at) if at else 0.0
    except ValueError:
        return None
    return (sha, when) if math.isfinite(when) else None
