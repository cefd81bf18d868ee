"""Download counts in Redis: counted in memory per request, added to one hash every second, read back.

`HINCRBY` per address every tick (a `downloads` message tells the others to read again); the
totals are read back every few seconds (and after a reconnect). A count Redis holds that is not
a count is ignored and counted (`bad_values`), never taken as "Redis is down". With Redis down,
`downloads` answers None (the catalog's local count answers) and the counts kept are sent on return.
"""

from __future__ import annotations

import logging

from gitreg.core.events import Signal
from gitreg.replicas.values import download_totals
from gitreg.replicas.wire import Wire

log = logging.getLogger(__name__)

DOWNLOADS_READ_SECONDS = 2.0


class SharedDownloads:
    """The download counts hash, for `RedisShared` (which owns the connection and flushes on its tick)."""

    def __init__(self, wire: Wire, shown_url: str) -> None:
        self.wire = wire
        self._shown_url = shown_url
        self.on_downloads: Signal[[]] = Signal()  # the shared download counts changed
        self._pending: dict[str, int] = {}
        self._totals: dict[str, int] | None = None
        self.stale, self._next_read = True, 0.0
        self.bad_values = 0  # counts gitreg never writes, ignored
        self._bad_logged = False

    def count(self, address: str) -> None:
        """Counted in memory (no round trip); added to Redis within a second."""
        self._pending[address] = self._pending.get(address, 0) + 1

    def downloads(self, address: str) -> int | None:
        """All replicas' count (as last read, plus this replica's not yet sent), or None while Redis is down."""
        if self._totals is None:
            return None
        return self._totals.get(address, 0) + self._pending.get(address, 0)

    def forget(self) -> None:
        """Redis is down: the local counts answer until the totals are read again."""
        self._totals = None

    def due(self, now: float) -> bool:
        """True when the totals should be read again."""
        return self.stale or now >= self._next_read

    async def flush(self) -> None:
        """Add the counts kept to Redis (kept for the next time on a failure, which is raised)."""
        if not self._pending:
            return
        pending, self._pending = self._pending, {}
        pipe = self.wire.client.pipeline(transaction=True)
        for address, count in pending.items():
            pipe.hincrby(self.wire.key("downloads"), address, count)
        pipe.publish(self.wire.channel, self.wire.message("downloads"))
        try:
            results = await pipe.execute()
        except BaseException:
            for address, count in pending.items():  # not sent: send them next time
                self._pending[address] = self._pending.get(address, 0) + count
            raise
        if self._totals is not None:
            # `results` ends with the PUBLISH count, one more than the increments.
            for address, total in zip(pending, results, strict=False):
                self._totals[address] = int(total)
            self.on_downloads.emit()

    async def read(self) -> None:
        """Read every replica's totals (raises on a Redis failure)."""
        self.stale = False
        self._next_read = self.wire.clock() + DOWNLOADS_READ_SECONDS
        raw = await self.wire.client.hgetall(self.wire.key("downloads"))
        totals, bad = download_totals(raw)
        if bad:  # not what gitreg writes: ignored, never "Redis is down"
            self.bad_values += bad
            if not self._bad_logged:
                self._bad_logged = True
                log.warning("redis at %s: ignored %d download counts that are not counts", self._shown_url, bad)
        if totals != self._totals:
            self._totals = totals
            self.on_downloads.emit()
