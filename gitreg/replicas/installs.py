"""Observed installs shared through Redis: every replica's CI installs of a module, read by any of them.

One sorted set per module (`<prefix>installs:<address>`): a member is one (project, repository,
version) as JSON, its score the Unix time of the newest install. `ZADD GT` keeps the newest time
whoever sends it; each write also drops what is older than the keep time, all but the newest
`cap` members, and sets the key to expire with the keep time (a module nobody installs any more
leaves nothing behind). A read takes at most the newest `cap` members and checks each: whoever can
write to Redis is not trusted with more than gitreg itself writes (a member that is not one of
gitreg's is skipped and counted, never shown). It rides on the replicas' one connection (`Wire`):
with Redis down every call raises RedisDown at once and the installs answer from this replica.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterable
from typing import Any

from gitreg.replicas.connection import RedisDown
from gitreg.replicas.wire import Wire

# (project, repository or None, version, Unix time): what one observed install is, here.
Row = tuple[str, str | None, str, float]

# What gitreg writes as a project (identity's `safe_name`), a version and a repository URL.
_PROJECT_RE = re.compile(r"[A-Za-z0-9._@:+/-]{1,100}")
_VERSION_RE = re.compile(r"[0-9A-Za-z.+-]{1,64}")
_REPOSITORY_RE = re.compile(r"https?://[A-Za-z0-9.:\[\]-]+/[A-Za-z0-9_./-]{1,2100}\.git")
MAX_MEMBER = 2400
# A time further ahead than this is not one gitreg wrote (replicas' clocks differ by seconds).
FUTURE_SLACK_SECONDS = 86_400.0


class SharedInstalls:
    """The installs' sorted sets of one Redis, for `Installs` (gitreg/usage/installs.py)."""

    def __init__(self, wire: Wire) -> None:
        self.wire = wire
        self.bad_values = 0  # members gitreg never writes, skipped

    def _key(self, address: str) -> str:
        return self.wire.key("installs", address)

    async def add(self, rows: dict[str, list[Row]], keep_seconds: float, cap: int, now: float) -> None:
        """Add each module's rows (newest time kept), trimmed to `keep_seconds` and `cap`; RedisDown on failure."""
        if not self.wire.up():
            raise RedisDown("redis is down")
        pipe = self.wire.client.pipeline(transaction=False)
        for address, found in rows.items():
            key = self._key(address)
            pipe.zadd(key, {_member(r): r[3] for r in found}, gt=True)
            pipe.zremrangebyscore(key, "-inf", f"({now - keep_seconds}")
            pipe.zremrangebyrank(key, 0, -(cap + 1))
            pipe.expire(key, max(1, int(keep_seconds)))
        await self.wire.call(pipe.execute())

    async def read(self, address: str, keep_seconds: float, cap: int, now: float) -> list[Row]:
        """Every replica's installs of `address` (the newest `cap`, none older than `keep_seconds`), checked;
        RedisDown when Redis cannot answer."""
        if not self.wire.up():
            raise RedisDown("redis is down")
        raw = await self.wire.call(self.wire.client.zrange(self._key(address), 0, cap - 1, desc=True, withscores=True))
        rows, bad = checked_rows(raw, now - keep_seconds, now + FUTURE_SLACK_SECONDS)
        self.bad_values += bad
        return rows


def _member(row: Row) -> str:
    return json.dumps([row[0], row[1], row[2]], separators=(",", ":"))


def checked_rows(raw: Iterable[Any], oldest: float, newest: float) -> tuple[list[Row], int]:
    """(the rows of what ZRANGE WITHSCORES answered that gitreg could have written, how many were not)."""
    rows: list[Row] = []
    bad = 0
    for item in raw:
        row = _row(item, oldest, newest)
        if row is None:
            bad += 1
        else:
            rows.append(row)
    return rows, bad


def _row(item: Any, oldest: float, newest: float) -> Row | None:
    try:
        member, score = item
        text = member.decode("utf-8") if isinstance(member, bytes) else member
        if not isinstance(text, str) or len(text) > MAX_MEMBER:
            return None
        project, repository, version = json.loads(text)
        at = float(score)
    except (ValueError, TypeError, UnicodeDecodeError, RecursionError):
        return None
    return checked_row(project, repository, version, at, oldest, newest)


def checked_row(project: Any, repository: Any, version: Any, at: Any, oldest: float, newest: float) -> Row | None:
    """The row these values are when gitreg could have written them (Redis, installs.json), else None."""
    if not (isinstance(project, str) and _PROJECT_RE.fullmatch(project)):
        return None
    if not (isinstance(version, str) and _VERSION_RE.fullmatch(version)):
        return None
    if repository is not None and not (isinstance(repository, str) and _REPOSITORY_RE.fullmatch(repository)):
        return None
    if isinstance(at, bool) or not isinstance(at, int | float) or not math.isfinite(at) or not oldest <= at <= newest:
        return None
    return project, repository, version, float(at)
