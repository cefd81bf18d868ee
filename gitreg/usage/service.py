"""`Usage`, the facade of "Used by": the last scan's consumers per module, and the scan's schedule.

In the serving process (the org listings, every repository's record and push marker, live
there; the index process is told only of the modules): usage.json is loaded at start, then a
pass runs once the orgs are listed, again whenever a listing changes, and at least every
RESCAN_SECONDS. A pass is planned here (no git: a repository whose marker has not moved is not
read) and what must be read is read by `python -m gitreg.usage.child` (usage/child.py: why),
whose usage.json is then loaded. Off with `[usage] scan =
false`: nothing is scanned and every module has no consumers.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import sys
from asyncio.subprocess import PIPE
from collections.abc import AsyncIterator, Callable
from concurrent.futures import Executor
from pathlib import Path

from gitreg.config.model import Config
from gitreg.git.pool import GitPool
from gitreg.git.remote import GitAdapter
from gitreg.git.shallow import ShallowReader
from gitreg.index.parse_workers import ParseWorkers, pickled_frame
from gitreg.index.process import index_config, index_environment
from gitreg.usage.model import Consumer
from gitreg.usage.scan import HANDLER, Listings, PassStats, Target, UsageScanner
from gitreg.usage.store import FILE_NAME, RepoScan, UsageStore

log = logging.getLogger(__name__)

RESCAN_SECONDS = 300.0  # at most this long between passes (each org's own listing refreshes on its schedule)
CHILD = "gitreg.usage.child"  # `python -m` this: a pass's reads, in a process of their own
CHILD_SECONDS = 4 * 3600.0  # a pass's process past this is stopped (each git call and parse has its own bound)
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
        in_process: bool = False,
    ) -> None:
        self.config = config
        self.enabled = config.usage.scan and bool(config.orgs)
        # False: a pass's reads run in a process of their own (usage/child.py), never beside the
        # serving loop; True: here (`gitreg check --probe`, and that child process itself).
        self.in_process = in_process or storage is None
        self.storage = storage
        self.store = UsageStore(storage / FILE_NAME if storage is not None else None, executor)
        self.workers = ParseWorkers(HANDLER)
        where = scratch or (storage / SCRATCH if storage is not None else Path(SCRATCH))
        self.scanner = UsageScanner(config, listings, self.store, pool, ShallowReader(git), self.workers, where)
        self._complete = complete
        self._wake = asyncio.Event()
        self.passes = 0
        self.last = PassStats()

    async def refresh(self) -> PassStats:
        """One pass now: what must be read is read (here, or in the scan's own process), the rest costs nothing."""
        scanner = self.scanner
        async with scanner.lock:
            todo, stats = await scanner.plan()
            if todo and not self.in_process:
                await self.store.flush()  # what the child starts from (forgotten repositories, names)
                await self._in_child(todo, stats)
                await self.store.load()  # what it wrote
            else:
                await scanner.scan(todo, stats)
            await self.store.flush()
            self.last = scanner.last = stats
            return stats

    async def _in_child(self, todo: list[Target], stats: PassStats) -> None:
        """Read `todo` in `python -m gitreg.usage.child` (see there); its counts added to `stats`."""
        request = {"config": index_config(self.config), "storage": str(self.storage), "todo": todo}
        frame = await asyncio.get_running_loop().run_in_executor(None, pickled_frame, request)
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-P", "-m", CHILD, stdin=PIPE, stdout=PIPE, env=index_environment()
        )
        out = b""
        try:
            out, _ = await asyncio.wait_for(proc.communicate(frame), CHILD_SECONDS)
        except TimeoutError:
            log.warning("usage scan: its process ran past %.0f s; stopped", CHILD_SECONDS)
        finally:
            if proc.returncode is None:
                with contextlib.suppress(ProcessLookupError):
                    proc.kill()
                await proc.wait()
        try:
            counts = json.loads(out.decode().strip().splitlines()[-1]) if out.strip() else {}
        except (ValueError, IndexError):
            counts = {}
        if proc.returncode != 0 or not counts:
            stats.failed += len(todo)
            log.warning("usage scan: its process exited with %s; the pass is tried again later", proc.returncode)
            return
        for key in ("same_commit", "read", "failed"):
            setattr(stats, key, getattr(stats, key) + int(counts.get(key, 0)))

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
                stats = await self.refresh()
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
