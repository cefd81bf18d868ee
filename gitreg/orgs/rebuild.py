"""Rebuilding the combined org listing: one at a time, computed on a thread, installed on the loop.

What enumerations (orgs.refresh), orgs.json (orgs.store) and owners adopted from other replicas
feed: each new listing of an org, or a change of owners, combines every org's claims again
(orgs.combine) from a snapshot on a thread, then installs the outcome in one go (orgs.listing).
One rebuild at a time (`lock`, which a webhook's patch holds too). While one computes,
first-listing pages wait (`take_page`); any other change of what it read (the listing's
`generation`, the owners' `version`) makes it start over.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Coroutine, Sequence
from typing import Any

from gitreg.config.model import Config
from gitreg.forges.records import RepoRecord
from gitreg.orgs.combine import Inputs, OrgView, combine_paused, evaluate_kept
from gitreg.orgs.listing import OrgListing
from gitreg.orgs.model import Evaluated, OrgState
from gitreg.orgs.owners import Owners
from gitreg.orgs.store import OrgStore

log = logging.getLogger(__name__)

# New listings to install: per org, its records and (when done already) their evaluation.
Taken = list[tuple[OrgState, dict[str, RepoRecord], Evaluated | None]]


class OrgRebuilds:
    """The one rebuild at a time of the combined listing (implements orgs.refresh.Listings)."""

    def __init__(
        self,
        config: Config,
        orgs: Sequence[OrgState],
        owners: Owners,
        listing: OrgListing,
        store: OrgStore,
        spawn: Callable[[Coroutine[Any, Any, None]], None],
    ) -> None:
        self.config = config
        self._orgs = orgs
        self._owners = owners
        self._listing = listing
        self._store = store
        self._spawn = spawn
        # Held by a rebuild from its snapshot to its install, and by a webhook's patch.
        self.lock = asyncio.Lock()
        self._deferred: list[tuple[OrgState, list[RepoRecord]]] | None = None
        self._settling = False  # a rebuild for owners adopted from other replicas is scheduled

    def take_page(self, s: OrgState, page: list[RepoRecord]) -> None:
        """A slice of org `s`'s first listing (not the last page): its modules join the listing at once
        (or, while a rebuild computes, as soon as it is installed)."""
        if self._deferred is not None:
            self._deferred.append((s, page))
            return
        self._listing.add_page(s, page)

    async def evaluated(self, s: OrgState, records: dict[str, RepoRecord]) -> Evaluated:
        """`evaluate()` of org `s`'s `records` on a thread (30,000 repositories: over half a second)."""
        return await asyncio.get_running_loop().run_in_executor(
            self._store.executor, evaluate_kept, s.config, s.index, list(records.values()), self.config.git.protocols
        )

    async def take_listing(
        self,
        s: OrgState,
        records: dict[str, RepoRecord],
        since: float | None,
        evaluated: Evaluated | None = None,
    ) -> None:
        """Take a new listing for org `s`: the combined listing rebuilt (off the loop), subscribers told.

        `since`: when the listing it replaces was enumerated; `evaluated`: `evaluate()` of these
        records, done already (off the loop).
        """
        async with self.lock:
            await self.take([(s, records, evaluated)], since)

    async def flush(self) -> None:
        """Write orgs.json if the listing changed since the last write (off the event loop)."""
        await self._store.flush()

    def adopt_owner(self, address: str, holder: str, since: float) -> None:
        """An owner another replica recorded: when it holds an address here now, the listing is
        rebuilt (once for a burst: a reconnect reads every owner)."""
        if self._owners.adopt(address, holder, since) and not self._settling:
            self._settling = True
            self._spawn(self._settle_adopted())

    async def _settle_adopted(self) -> None:
        async with self.lock:
            self._settling = False  # (adopted from here on: settled by the next rebuild)
            try:
                await self.take([], None)
            except Exception:
                log.exception("org listings: settling the owners adopted from other replicas failed")

    async def take(self, taken: Taken, since: float | None) -> None:
        """Install new listings for the orgs in `taken` (none: the owners changed), `lock` held.

        The combined listing is computed on a thread from a snapshot (orgs.combine), then installed
        in one go, with no await in between: a request sees the old listing or the new one.
        When what the snapshot read changed meanwhile (owners adopted from another replica, read
        from orgs.json), it is computed again; first-listing pages wait for the install instead.
        """
        done = [(s, records, evaluated or await self.evaluated(s, records)) for s, records, evaluated in taken]
        first = any(s.records is None for s, _, _ in done)
        hint = (done[0][0].index, since) if since is not None and len(done) == 1 else None
        views = {s.index: OrgView(s.index, s.config.label, records, ev[0]) for s, records, ev in done}
        loop, orgs = asyncio.get_running_loop(), self._orgs
        while True:
            generation = (self._listing.generation, self._owners.version)
            inputs = Inputs(
                orgs=tuple(views.get(s.index) or OrgView(s.index, s.config.label, s.records, s.claims) for s in orgs),
                owners=self._owners.draft(
                    frozenset(s.index for s in orgs if s.records is not None or s.index in views)
                ),
                old=self._listing.by_address,
                since=hint,
            )
            self._deferred = []
            try:
                combined = await loop.run_in_executor(self._store.executor, combine_paused, inputs)
            except BaseException:
                self._take_deferred()
                raise
            if generation == (self._listing.generation, self._owners.version):
                break
            log.debug("org listings changed while they were combined; combining again")
            self._take_deferred()
        for s, records, (claims, ignored) in done:
            s.records, s.claims, s.ignored = records, claims, ignored
            s.stats.repositories = len(records)
        self._listing.install(combined, announce=first and all(s.records is not None for s in orgs))
        self._take_deferred()

    def _take_deferred(self) -> None:
        """Take the first-listing pages that arrived while a rebuild computed."""
        deferred, self._deferred = self._deferred or [], None
        for s, page in deferred:
            self.take_page(s, page)
