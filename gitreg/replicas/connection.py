"""Talking to Redis: a client that fails fast, error texts without the password, `gitreg check`'s PING.

redis-py is imported inside the functions: only a replica configured for Redis loads it.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import secrets
import socket
from collections.abc import Awaitable
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

if TYPE_CHECKING:
    from redis.asyncio import Redis

# A Redis command that takes longer than this counts as "Redis is down": the request goes on locally.
OP_TIMEOUT_SECONDS = 1.0
CONNECT_TIMEOUT_SECONDS = 1.0


class RedisDown(Exception):
    """A Redis command failed; the caller answers locally."""


def replica_name() -> str:
    """This process, as other replicas and logs see it: host, pid and a random suffix."""
    return f"{socket.gethostname()[:40]}-{os.getpid()}-{secrets.token_hex(3)}"


def connect(url: str) -> Redis:
    """A client for a replica: short timeouts and no retries inside redis-py.

    A failure falls back to local answers at once; RedisShared's reconnect loop takes over.
    """
    from redis.asyncio import Redis
    from redis.asyncio.retry import Retry
    from redis.backoff import NoBackoff

    return Redis.from_url(
        url,
        socket_timeout=OP_TIMEOUT_SECONDS,
        socket_connect_timeout=CONNECT_TIMEOUT_SECONDS,
        retry=Retry(NoBackoff(), 0),
        client_name="gitreg",
    )


async def quietly(awaitable: Awaitable[Any]) -> None:
    """Await `awaitable`, ignoring its failure (closing a broken connection)."""
    with contextlib.suppress(Exception):
        await awaitable


def describe(error: BaseException, url: str | None) -> str:
    """A short reason for logs and /readyz, without the password (redis-py names host and port only, but be sure)."""
    text = f"{type(error).__name__}: {str(error).strip() or 'no detail'}"
    try:
        password = urlsplit(url or "").password
    except ValueError:
        password = None
    if password:
        text = text.replace(password, "***")
    return text[:200]


async def check_redis(url: str, timeout: float = 3.0) -> str | None:
    """`gitreg check`: None when Redis at `url` answers PING within `timeout`, else why not (masked)."""
    from redis.asyncio import Redis

    client = Redis.from_url(url, socket_timeout=timeout, socket_connect_timeout=timeout)
    try:
        await asyncio.wait_for(client.ping(), timeout)
        return None
    except Exception as e:  # noqa: BLE001
        return describe(e, url) if str(e).strip() else f"no answer within {timeout:.0f}s"
    finally:
        await quietly(client.aclose())
