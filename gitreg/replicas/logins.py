"""Issued login tokens and sign-in sessions shared through Redis, and one-time codes used once.

`terraform login` on one replica issues a token every replica must accept, and `gitreg tokens
revoke` must reach every replica within a second. Each issued record is one field of a hash,
keyed by the token's digest (hex, never the token): the record's JSON as identity/issued.py
writes it, the Git host's tokens inside it sealed (AES-GCM). Replicas read a record again at
most once a second while it is used, so a revocation (or a refreshed host token) written here
is seen everywhere within that second. A one-time code Terraform redeems is marked used with
`SET NX PX`: on every replica, the second redemption finds it taken.

Each replica keeps its own copy on disk (issued_tokens.json): with Redis down it answers from
that, as alone. Every call is bounded by OP_TIMEOUT_SECONDS and raises RedisDown on failure.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any

from gitreg.replicas.connection import OP_TIMEOUT_SECONDS, RedisDown, connect, describe, quietly

if TYPE_CHECKING:
    from redis.asyncio import Redis

# A record is a few hundred bytes; anything far larger was not written by gitreg.
MAX_RECORD = 16 * 1024


class SharedLogins:
    """The issued-records hash and the used-codes keys of one Redis."""

    def __init__(self, url: str, prefix: str) -> None:
        self._url = url
        self._client: Redis | None = None
        self.key = f"{prefix}logins"
        self._codes = f"{prefix}login-code:"

    def _redis(self) -> Redis:
        if self._client is None:
            self._client = connect(self._url)
        return self._client

    async def _run(self, call: Any) -> Any:
        try:
            return await asyncio.wait_for(call, OP_TIMEOUT_SECONDS)
        except Exception as e:  # noqa: BLE001 - every failure means: answer locally
            raise RedisDown(describe(e, self._url)) from None

    async def put(self, digest: str, record: str) -> None:
        """Store (or replace) the record of the token whose digest is `digest`."""
        await self._run(self._redis().hset(self.key, digest, record))

    async def get(self, digest: str) -> str | None:
        """The record stored for `digest`, or None."""
        value = await self._run(self._redis().hget(self.key, digest))
        return _text(value)

    async def all(self) -> dict[str, str]:
        """Every stored record by digest (`gitreg tokens list`, and a replica's start)."""
        found = await self._run(self._redis().hgetall(self.key))
        out = {}
        for digest, value in found.items():
            text, name = _text(value), _text(digest)
            if text is not None and name is not None:
                out[name] = text
        return out

    async def first_use(self, code_id: str, ttl_seconds: float) -> bool:
        """True the first time `code_id` is used on any replica (remembered `ttl_seconds`)."""
        taken = await self._run(self._redis().set(self._codes + code_id, "1", nx=True, px=int(ttl_seconds * 1000)))
        return bool(taken)

    async def close(self) -> None:
        """Disconnect; never raises."""
        if self._client is not None:
            await quietly(self._client.aclose())
            self._client = None


def _text(value: object) -> str | None:
    if isinstance(value, bytes):
        value = value.decode("utf-8", "replace")
    return value if isinstance(value, str) and len(value) <= MAX_RECORD else None
