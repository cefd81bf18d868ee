"""`Usage`, the facade of "Used by": the last scan's consumers per module, and the scan's schedule.

In the serving process (the org listings, every repository's record and push marker, live
there; the index process is told only of the modules): usage.json is loaded at start, then a
pass runs once the orgs are listed, again whenever a listing changes, and at least every
RESCAN_SECONDS (a pass over unchanged repositories makes no git call). Off with `[usage] scan =
false`: nothing is scanned and every module has no consumers.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Callable
from concurrent.futures import Executor
from pathlib import Path

from gitreg.config.model import Config
from gitreg.git.pool import GitPool
from gitreg.git.remote import GitAdapter
from gitreg.git.shallow import ShallowReader
from gitreg.index.parse_workers import ParseWorkers
from gitreg.usage.model import Consumer
from gitreg.usage.scan import HANDLER, Listings, UsageScanner
from gitreg.usage.store import FILE_NAME, RepoScan, UsageStore

log = logging.getLogger(__name__)

RESCAN_SECONDS = 300.0  # at most this long between passes (each org's own listing refreshes on its schedule)
LISTED_POLL_SECONDS = 2.0  # before the orgs' first listings: how often to look again
SCRATCH = "usage-scratch"  # under [storage] path: one shallow repository per read, removed after it


class Usage:
    """The consumers of each module, as the usage scan last found them (event loop only)."""

    def __init__(
        self,
        config: Config,
        listings: Listings,
        complete: Callable[[], bool],
        pool: GitPool,
        git: GitAdapter,
        storage: Path | None,
        executor: Executor | None = None,
        scratch: Path | None = None,
    ) -> None:
        self.enabled = config.usage.scan and bool(config.orgs)
        self.store = UsageStore(storage / FILE_NAME if storage is not None else None, executor)
        self.workers = ParseWorkers(HANDLER)
        where = scratch or (storage / SCRATCH if storage is not None else Path(SCRATCH))
        self.scanner = UsageScanner(config, listings, self.store, pool, ShallowReader(git), self.workers, where)
        self._complete = complete
        self._wake = asyncio.Event()
        self.passes = 0

    def consumers(self, address: str) -> list[tuple[RepoScan, Consumer]]:
        """The `module` blocks calling `address` ("acme/vpc/aws"), with the repository each is in."""
        return self.store.consumers(address)

    def changed(self, *_: object) -> None:
        """An org listing changed: a pass soon (OrgCatalog.on_change)."""
        self._wake.set()

    async def lifetime(self) -> AsyncIterator[None]:
        """Cleanup context body: usage.json loaded, passes in the background until shutdown."""
        if not self.enabled:
            yield
            return
        await asyncio.to_thread(self.scanner.clean_scratch)
        loaded = await self.store.load()
        if loaded:
            log.info("usage: %d repositories' consumers loaded from %s", loaded, self.store.path)
        self._wake.set()  # a first pass as soon as the orgs are listed (orgs.json may be read already)
        task = asyncio.ensure_future(self._run())
        try:
            yield
        finally:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
            await self.workers.close()
            await self.store.flush()

    async def _run(self) -> None:
        while True:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), RESCAN_SECONDS)
            self._wake.clear()
            if not self._complete():  # until every org has a listing: a partial one would forget repositories
                await asyncio.sleep(LISTED_POLL_SECONDS)
                self._wake.set()
                continue
            try:
                stats = await self.scanner.refresh()
            except Exception:
                log.exception("usage scan: a pass failed; the next one starts over")
                continue
            self.passes += 1
            if stats.read or stats.failed or stats.forgotten:
                log.info(
                    "usage scan: %d repositories, %d read, %d unchanged, %d failed",
                    stats.repositories,
                    stats.read,
                    stats.unchanged + stats.same_commit,
                    stats.failed,
                )
