"""Git hosts' "can read" answers in Redis: a repository is asked about once per identity across replicas.

A key is a digest (of a token's digest and a project path, made by identity/forge.py); a value
is "1" or "0", expiring with the forge's `recheck_seconds`. Nothing else is stored: no token, no
name, no path. A value that is not "1" or "0" is ignored (the host is asked), never trusted.
With Redis down, each replica asks the host itself (and keeps its own answer in memory).
"""

from __future__ import annotations

import contextlib

from gitreg.replicas.connection import RedisDown
from gitreg.replicas.wire import Wire

_VALUES = {b"1": True, b"0": False, "1": True, "0": False}


class SharedAccess:
    """`SharedState.access` and `remember_access` for the Redis backend."""

    def __init__(self, wire: Wire) -> None:
        self._wire = wire
        self._prefix = wire.key("access:")
        self.bad_values = 0

    async def access(self, key: str) -> bool | None:
        """The answer another replica stored for `key`, or None (none, not ours, or Redis down)."""
        if not self._wire.up():
            return None
        try:
            raw = await self._wire.call(self._wire.client.get(self._prefix + key))
        except RedisDown:
            return None
        found = _VALUES.get(raw) if isinstance(raw, bytes | str) else None
        if raw is not None and found is None:
            self.bad_values += 1
        return found

    def remember_access(self, key: str, allowed: bool, seconds: float) -> None:
        """Store the answer for the other replicas, in the background, for `seconds`."""
        if self._wire.up():
            self._wire.spawn(self._store(key, allowed, seconds))

    async def _store(self, key: str, allowed: bool, seconds: float) -> None:
        with contextlib.suppress(RedisDown):
            value = "1" if allowed else "0"
            await self._wire.call(self._wire.client.set(self._prefix + key, value, px=max(1, int(seconds * 1000))))
