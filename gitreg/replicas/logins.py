"""Issued login tokens and sign-in sessions shared through Redis, and one-time codes used once.

`terraform login` on one replica issues a token every replica must accept, and `gitreg tokens
revoke` must reach every replica within a second. Each issued record is one field of a hash,
keyed by the token's digest (hex, never the token): the record's JSON as identity/issued.py
writes it, the Git host's tokens inside it sealed (AES-GCM). Replicas read a record again at
most once a second while it is used, so a revocation (or a refreshed host token) written here
is seen everywhere within that second. A one-time code Terraform redeems is marked used with
`SET NX PX`: on every replica, the second redemption finds it taken. Revocations are also
appended to a list (`<prefix>login-revocations`, identity/revocations.py says what its entries
mean), read together with a record in one round trip.

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

Entries = list[str | None]  # a slice of the revocation log, as read (None: not text gitreg could have written)
# A record is a few hundred bytes; anything far larger was not written by gitreg.
MAX_RECORD = 16 * 1024
# Starts a log (its first entry) when the list is empty, or when its first item is `ARGV[2]` (no entry
# of a log: made up by someone), in one step, so two replicas never start two; the first item after.
_START_LOG = """
local first = redis.call('LINDEX', KEYS[1], 0)
if (not first and ARGV[2] == '') or (first and first == ARGV[2]) then
  redis.call('DEL', KEYS[1])
  redis.call('RPUSH', KEYS[1], ARGV[1])
end
return redis.call('LINDEX', KEYS[1], 0)
"""


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
        self.log_key = f"{prefix}login-revocations"

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

    async def read(
        self, digest: str | None, start: int, count: int
    ) -> tuple[str | None, str | None, int, list[str | None]]:
        """In one round trip: (the record of `digest` or None, the log's first entry, its length, up to
        `count` of its entries from index `start`)."""

        async def pipeline(r: Redis) -> list[Any]:
            async with r.pipeline(transaction=True) as p:
                p.hget(self.key, digest or "")
                p.lindex(self.log_key, 0)
                p.llen(self.log_key)
                p.lrange(self.log_key, start, start + count - 1)
                return list(await p.execute())

        record, first, length, entries = await self._run(pipeline)
        found = [_text(e) for e in entries] if isinstance(entries, list) else []
        return _text(record) if digest else None, _text(first), int(length or 0), found

    async def start_log(self, first: str, replacing: str | None) -> str | None:
        """Start the log with `first` when it is empty (`replacing` None) or begins with `replacing`
        (not an entry of a log); its first entry afterwards."""
        found = await self._run(lambda r: r.eval(_START_LOG, 1, self.log_key, first, replacing or ""))
        return _text(found)

    async def append(self, *entries: str) -> None:
        """Append revocation entries to the log."""
        if entries:
            await self._run(lambda r: r.rpush(self.log_key, *entries))

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
