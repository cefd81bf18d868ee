"""Issued login tokens and sign-in sessions shared through Redis, and one-time codes used once.

`terraform login` on one replica issues a token every replica must accept, and `gitreg tokens
revoke` must reach every replica within a second. Each issued record is one field of a hash,
keyed by the token's digest (hex, never the token): the record's JSON as identity/issued.py
writes it, the Git host's tokens inside it sealed (AES-GCM). Replicas read a record again at
most once a second while it is used, so a revocation (or a refreshed host token) written here
is seen everywhere within that second. A one-time code Terraform redeems is marked used with
`SET NX PX`: on every replica, the second redemption finds it taken.

Each replica keeps its own copy on disk (issued_tokens.json): with Redis down it answers from
that, as alone. A server's SharedLogins rides on its replicas' connection (`RedisShared.logins`):
their client, their up/down state and reconnect loop, so with Redis down a login token's lookup
does not wait on it at all. `gitreg tokens` (no replicas running) opens one of its own
(`SharedLogins.connect`). Every call is bounded by OP_TIMEOUT_SECONDS and raises RedisDown on failure.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from gitreg.replicas.connection import OP_TIMEOUT_SECONDS, RedisDown, connect, describe, quietly

if TYPE_CHECKING:
    from redis.asyncio import Redis

# A record is a few hundred bytes; anything far larger was not written by gitreg.
MAX_RECORD = 16 * 1024


class SharedLogins:
    """The issued-records hash and the used-codes keys of one Redis.

    `call` runs one command (bounded, RedisDown on failure); `up` False skips Redis at once (RedisDown).
    """

    def __init__(
        self,
        client: Redis,
        prefix: str,
        call: Callable[[Awaitable[Any]], Awaitable[Any]],
        up: Callable[[], bool] = lambda: True,
        owned: bool = False,
    ) -> None:
        self._client = client
        self._call = call
        self._up = up
        self._owned = owned  # closed by close(): a connection of its own, not the replicas'
        self.key = f"{prefix}logins"
        self._codes = f"{prefix}login-code:"

    @classmethod
    def connect(cls, url: str, prefix: str) -> SharedLogins:
        """A SharedLogins on a connection of its own (`gitreg tokens`: no replicas' connection to ride on)."""
        client = connect(url)

        async def call(command: Awaitable[Any]) -> Any:
            try:
                return await asyncio.wait_for(command, OP_TIMEOUT_SECONDS)
            except Exception as e:  # noqa: BLE001 - every failure means: answer locally
                raise RedisDown(describe(e, url)) from None

        return cls(client, prefix, call, owned=True)

    async def _run(self, command: Callable[[Redis], Awaitable[Any]]) -> Any:
        if not self._up():
            raise RedisDown("redis is down")
        return await self._call(command(self._client))

    async def put(self, digest: str, record: str) -> None:
        """Store (or replace) the record of the token whose digest is `digest`."""
        await self._run(lambda r: r.hset(self.key, digest, record))

    async def get(self, digest: str) -> str | None:
        """The record stored for `digest`, or None."""
        value = await self._run(lambda r: r.hget(self.key, digest))
        return _text(value)

    async def all(self) -> dict[str, str]:
        """Every stored record by digest (`gitreg tokens list`, and a replica's start)."""
        found = await self._run(lambda r: r.hgetall(self.key))
        out = {}
        for digest, value in found.items():
            text, name = _text(value), _text(digest)
            if text is not None and name is not None:
                out[name] = text
        return out

    async def first_use(self, code_id: str, ttl_seconds: float) -> bool:
        """True the first time `code_id` is used on any replica (remembered `ttl_seconds`)."""
        taken = await self._run(lambda r: r.set(self._codes + code_id, "1", nx=True, px=int(ttl_seconds * 1000)))
        return bool(taken)

    async def close(self) -> None:
        """Disconnect a connection of its own; never raises (the replicas close theirs)."""
        if self._owned:
            self._owned = False
            await quietly(self._client.aclose())


def _text(value: object) -> str | None:
    if isinstance(value, bytes):
        value = value.decode("utf-8", "replace")
    return value if isinstance(value, str) and len(value) <= MAX_RECORD else None
