"""Signature verdicts shared through Redis: one replica verifies a tag, the others read its verdict.

One field of a hash per (keys, repository, tag, commit) digest, holding what `registry.signatures`
wrote there: its own HMAC then the verdict's JSON. Whoever can write to Redis is not trusted with a
verdict: a value without a valid HMAC (or none at all when `[auth] signing_key` is unset, which
keys it) is verified again by git. Every call is bounded and raises RedisDown on failure.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from gitreg.replicas.connection import RedisDown

if TYPE_CHECKING:
    from redis.asyncio import Redis

# A verdict is a few hundred bytes; anything far larger was not written by gitreg.
MAX_VALUE = 8 * 1024


class SharedVerdicts:
    """The verdicts hash of one Redis, on the replicas' connection (`RedisShared.verdicts`)."""

    def __init__(
        self, client: Redis, prefix: str, call: Callable[[Awaitable[Any]], Awaitable[Any]], up: Callable[[], bool]
    ) -> None:
        self._client = client
        self._call = call
        self._up = up
        self.key = f"{prefix}signatures"

    async def get(self, field: str) -> str | None:
        """The value stored under `field`, or None (RedisDown when Redis does not answer)."""
        if not self._up():
            raise RedisDown("redis is down")
        value = await self._call(self._client.hget(self.key, field))
        if isinstance(value, bytes):
            value = value.decode("utf-8", "replace")
        return value if isinstance(value, str) and len(value) <= MAX_VALUE else None

    async def put(self, field: str, value: str) -> None:
        """Store `value` under `field` (RedisDown when Redis does not answer)."""
        if not self._up():
            raise RedisDown("redis is down")
        await self._call(self._client.hset(self.key, field, value))
