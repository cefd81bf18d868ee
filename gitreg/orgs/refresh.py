"""Enumerating orgs through their hosts' APIs: now, and in the background on a schedule.

Each org is enumerated at start (unless its listing on disk is current), then every
`refresh_seconds`, jittered so that orgs sharing a host do not fire together, or at once when
a webhook asks. A failed enumeration keeps the last listing and is tried again sooner (15 s,
doubling, never before a spent rate limit resets). An org listed for the first time is served
page by page as its pages arrive; later listings apply whole.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
import time
from collections.abc import AsyncIterator, Sequence
from typing import Protocol

import aiohttp

from gitreg.forges.base import ForgeError
from gitreg.forges.hosts import client_for
from gitreg.forges.records import RepoRecord
from gitreg.orgs.model import Evaluated, OrgState, by_name, patch

log = logging.getLogger(__name__)

# After a failed enumeration the next try comes sooner than refresh_seconds: 15 s, doubling.
FAILURE_RETRY_SECONDS = 15.0
# However far ahead a host puts its rate limit's reset, the org is tried again within this.
MAX_BACKOFF_SECONDS = 3600.0
_JITTER = 0.1


class Listings(Protocol):
    """What enumerations feed (orgs.rebuild.OrgRebuilds)."""

    async def take_listing(
        self, s: OrgState, records: dict[str, RepoRecord], since: float | None, evaluated: Evaluated | None = None
    ) -> None:
        """A new listing for org `s`; `since`: when the one it replaces was enumerated."""

    async def evaluated(self, s: OrgState, records: dict[str, RepoRecord]) -> Evaluated:
        """Which of `records` are modules, and which are ignored and why (orgs.model.evaluate), off the loop."""

    def take_page(self, s: OrgState, page: list[RepoRecord]) -> None:
        """A page of org `s`'s first listing, before its last page."""

    async def flush(self) -> None:
        """Persist the listings."""


class OrgRefresher:
    """Owns the orgs' API clients and their background enumerations."""

    def __init__(self, orgs: Sequence[OrgState], listings: Listings) -> None:
        self._orgs = orgs
        self._listings = listings
        self._tasks: set[asyncio.Task[None]] = set()

    def open(self, session: aiohttp.ClientSession) -> None:
        """Make each org's API client on `session` (done by running(); by hand for a probe)."""
        for s in self._orgs:
            s.client = client_for(s.config, session, s.stats)

    def refresh_soon(self, index: int) -> None:
        """Ask the org's background loop to enumerate now (coalesced with one already running)."""
        self._orgs[index].wake.set()

    async def enumerate(self, index: int) -> bool:
        """List org `index` through its API now; False (and the last listing kept) when that fails."""
        s = self._orgs[index]
        assert s.client is not None, "open() first"
        async with s.lock:
            s.journal.clear()
            # Listed for the first time: each page's modules are served and indexed as it arrives
            # (an org of thousands of repositories takes many pages, seconds each on a busy host).
            # Nothing is dropped before the last page; later listings apply whole.
            early = (lambda page: self._listings.take_page(s, page)) if s.records is None else None
            try:  # (first listing: a request waiting for it wakes once it is taken, or failed)
                try:
                    records = await s.client.list_repositories(early)
                except ForgeError as e:
                    _failed(s, e)
                    return False
                since = s.enumerated_at
                s.enumerated_at = time.time()
                s.stats.last_success = s.enumerated_at
                s.error, s.failures, s.loaded = None, 0, False
                if not records and s.records:
                    was = len(s.records)
                    log.warning("org %s: the API now lists no repositories at all (it listed %d)", s.config.label, was)
                # Off the loop: keyed by name (230,000 records: 55-63 ms), evaluated, the journal replayed
                # (by-id scans: 38 ms an entry), until no webhook added to it meanwhile.
                loop = asyncio.get_running_loop()
                listing = await loop.run_in_executor(None, by_name, records)
                evaluated: Evaluated | None = await self._listings.evaluated(s, listing)
                replayed = 0
                while replayed < len(s.journal):
                    entries = s.journal[replayed:]
                    await loop.run_in_executor(None, _replay, listing, entries)
                    replayed += len(entries)
                    evaluated = None  # webhooks changed it meanwhile: evaluated again, with their changes
                s.journal.clear()
                # (From the journal's replay until the listing is installed, a webhook's change to
                # this org waits for the install and patches what it installed.)
                await self._listings.take_listing(s, listing, since, evaluated)
            finally:
                s.attempted.set()
        log.info("org %s: %d repositories, %d modules", s.config.label, len(records), len(s.modules))
        await self._listings.flush()
        return True

    @contextlib.asynccontextmanager
    async def running(self) -> AsyncIterator[None]:
        """An API session and every org's background loop, for as long as the context lasts."""
        async with aiohttp.ClientSession(auto_decompress=True, trust_env=False) as session:
            self.open(session)
            for s in self._orgs:
                task = asyncio.ensure_future(self._run(s))
                self._tasks.add(task)
                task.add_done_callback(self._tasks.discard)
            try:
                yield
            finally:
                for task in list(self._tasks):
                    task.cancel()
                await asyncio.gather(*self._tasks, return_exceptions=True)

    async def _run(self, s: OrgState) -> None:
        """Enumerate when due, then every refresh_seconds (jittered), or at once when woken.

        Due at start, unless the listing loaded from orgs.json is younger than refresh_seconds:
        then when it would have been due had gitreg kept running (a restart costs no API pages
        and leaves the first requests the CPU; repository webhooks still apply at once).
        """
        delay = 0.0
        if s.loaded and s.enumerated_at is not None:
            delay = max(0.0, s.enumerated_at + s.config.refresh_seconds - time.time())
            if delay:
                log.info("org %s: its listing on disk is current; next enumeration in %.0f s", s.config.label, delay)
        while True:
            if delay > 0:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(s.wake.wait(), delay)
            s.wake.clear()
            try:
                ok = await self.enumerate(s.index)
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("org %s: enumeration failed", s.config.label)
                ok = False
            delay = next_delay(s, ok)


def _replay(listing: dict[str, RepoRecord], journal: list[tuple[tuple[str, ...], RepoRecord | None]]) -> None:
    """Apply webhooks' changes to a listing enumerated meanwhile (on a thread; `listing` is not shared yet)."""
    for dropped, record in journal:
        patch(listing, dropped, record)


def _failed(s: OrgState, e: ForgeError) -> None:
    """An enumeration of `s` failed: remember why (logged once while it fails the same way); its last listing stays."""
    again = s.error == e.message
    s.error = e.message
    s.failures += 1
    kept = f"keeping the last listing ({len(s.records)} repositories)" if s.records is not None else "no listing yet"
    level = logging.DEBUG if again else logging.WARNING
    log.log(level, "org %s: listing failed: %s; %s", s.config.label, e.message, kept)


def next_delay(s: OrgState, ok: bool) -> float:
    """Seconds until org `s`'s next enumeration, after one that succeeded (`ok`) or failed."""
    refresh = s.config.refresh_seconds
    delay = refresh if ok else min(refresh, FAILURE_RETRY_SECONDS * 2 ** min(s.failures - 1, 10))
    client = s.client
    if not ok and client is not None and s.stats.rate_remaining == 0 and client.reset_at:
        reset = client.reset_at - time.time()  # never ask again before the quota resets...
        if reset > MAX_BACKOFF_SECONDS:  # ...unless the host names a reset past any real one
            log.warning(
                "org %s: the API's rate limit resets in %.0f s; trying again in %.0f s instead",
                s.config.label,
                reset,
                MAX_BACKOFF_SECONDS,
            )
            reset = MAX_BACKOFF_SECONDS
        delay = max(delay, reset)
    delay *= random.uniform(1 - _JITTER, 1 + _JITTER)  # orgs sharing a host do not fire together
    return delay if ok else min(delay, MAX_BACKOFF_SECONDS)
