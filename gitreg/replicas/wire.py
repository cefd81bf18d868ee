"""What each part of `RedisShared` uses of its one connection: the client, key and message names, calls.

`RedisShared` (redis.py) owns the connection, its up/down state and the reconnect loop; the parts
that keep one concern's state in Redis (`tags`, `lease`, `counts`) reach Redis only through a `Wire`.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from redis.asyncio import Redis

Call = Callable[[Awaitable[Any]], Awaitable[Any]]  # RedisShared._call: timed, RedisDown on failure


@dataclass(frozen=True)
class Wire:
    """One replica's connection to Redis, as its parts see it."""

    client: Redis
    prefix: str  # `[cache] redis_prefix`: every key and the channel start with it
    replica: str  # this replica's name, in each message it sends
    call: Call  # one command, bounded; a failure marks Redis down and raises RedisDown
    up: Callable[[], bool]  # True while Redis answers
    spawn: Callable[[Awaitable[Any]], None]  # run in the background (cancelled at close)
    clock: Callable[[], float]

    @property
    def channel(self) -> str:
        """The pub/sub channel every replica listens to."""
        return f"{self.prefix}events"

    def key(self, *parts: str) -> str:
        """A Redis key of this registry (`prefix` + parts joined by ":")."""
        return self.prefix + ":".join(parts)

    def repo_key(self, kind: str, repository: str) -> str:
        """A per-repository key: the repository's URL as a digest (any length, any characters)."""
        return self.key(kind, hashlib.sha256(repository.encode("utf-8", "surrogateescape")).hexdigest()[:40])

    def message(self, kind: str, **fields: Any) -> str:
        """A pub/sub message from this replica."""
        return json.dumps({"kind": kind, "from": self.replica, **fields})
