"""Repository webhooks in org mode: a hint to read one repository again from each concerned org's API.

The payload never sets a record: a repository the API returns is taken as the API describes
it (wherever the payload said it was, or that it was deleted); only the API's 404 for the
repository the event names removes it. What one read cannot settle (an old name after a rename
or transfer) is left to an enumeration, asked for at once. The answer is patched into the
listing for the addresses it touches (orgs.patch), under the rebuild lock; orgs.json is written
a little later, once for a burst of webhooks.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Sequence

from gitreg.config.model import Config
from gitreg.forges.base import ForgeError
from gitreg.forges.payloads import RepositoryEvent
from gitreg.forges.records import RepoRecord
from gitreg.orgs.listing import OrgListing
from gitreg.orgs.model import OrgState, change, owns, patched
from gitreg.orgs.patch import patch_org
from gitreg.orgs.rebuild import OrgRebuilds
from gitreg.orgs.store import OrgStore
from gitreg.storage.files import run_file_work

log = logging.getLogger(__name__)

# How long a GitLab webhook waits for the one project it names (GitLab gives up after 10 s).
WEBHOOK_FETCH_SECONDS = 8.0
# orgs.json is written this long after a webhook changed a listing, with whatever changed meanwhile
# (writing 230,000 repositories costs a second of CPU: a burst of webhooks writes once).
WEBHOOK_WRITE_DELAY = 5.0


class RepositoryEvents:
    """Applies repository webhooks to the org listings (OrgCatalog.apply)."""

    def __init__(
        self,
        config: Config,
        orgs: Sequence[OrgState],
        listing: OrgListing,
        rebuilds: OrgRebuilds,
        store: OrgStore,
        refresh_soon: Callable[[int], None],
    ) -> None:
        self.config = config
        self._orgs = orgs
        self._listing = listing
        self._rebuilds = rebuilds
        self._store = store
        self._refresh_soon = refresh_soon

    async def apply(self, event: RepositoryEvent) -> int:
        """Read `event`'s repository again from each concerned org's API and apply what the API says;
        how many orgs it concerned."""
        concerned = 0
        for s in self._orgs:
            if s.config.provider != event.provider:
                continue
            now_here = owns(s, event.full_name)
            before_here = event.old_full_name is not None and owns(s, event.old_full_name)
            if not (now_here or before_here):
                continue
            concerned += 1
            if s.records is None or s.client is None:
                self._refresh_soon(s.index)  # no listing to patch: the first enumeration will see it
                continue
            fetched, record = await self._described(s, event)
            if not fetched:
                continue
            if s.lock.locked():  # (before waiting for the rebuild: see OrgRefresher.enumerate's journal; by-id
                # scans of 230,000 records: on a thread)
                s.journal.append(await run_file_work(self._store.executor, change, s, s.records, event, record))
            async with self._rebuilds.lock:  # the listing patched is the one installed now
                record = await self._patch(s, event, record)
                if before_here and event.old_full_name and event.old_full_name.lower() in (s.records or {}):
                    self._refresh_soon(s.index)  # whether the old name is gone is the listing's to say
                log.info(
                    "org %s: %s webhook %s %s: the API %s",
                    s.config.label,
                    event.provider,
                    event.action[:40],
                    event.full_name[:200],
                    f"lists {record.full_name[:200]}" if record is not None else "does not list it here",
                )
        if concerned:
            self._store.flush_soon(WEBHOOK_WRITE_DELAY)
        return concerned

    async def _patch(self, s: OrgState, event: RepositoryEvent, found: RepoRecord | None) -> RepoRecord | None:
        """Apply the API's answer `found` about `event`'s repo to org `s`'s listing, the rebuild lock held
        (orgs.patch: only the addresses touched are settled); the record it put in."""
        loop, protocols = asyncio.get_running_loop(), self.config.git.protocols
        if not all(o.records is not None for o in self._orgs):
            # (an org not listed yet: its claims are not all known, combined whole)
            records, record = await loop.run_in_executor(
                self._store.executor, patched, s, s.records or {}, event, found
            )
            await self._rebuilds.take([(s, records, None)], None)
            return record
        p = await loop.run_in_executor(
            self._store.executor, patch_org, s, event, found, protocols, self._listing.by_address
        )
        if p.changed:
            self._listing.install_patch(s, p)  # (no await: the addresses touched installed in one go)
        return p.record

    async def _described(self, s: OrgState, event: RepositoryEvent) -> tuple[bool, RepoRecord | None]:
        """The repository `event` names, as the API describes it now (one call): None when it says 404.

        (False, None) when the API did not answer in time: then the org is enumerated again.
        """
        assert s.client is not None
        try:
            # Within the hosts' webhook timeouts (10 s); past it, the next enumeration will do.
            found = await asyncio.wait_for(
                s.client.repository(event.project_id or event.full_name), WEBHOOK_FETCH_SECONDS
            )
        except (TimeoutError, ForgeError) as e:
            why = e.message if isinstance(e, ForgeError) else "no answer in time"
            log.warning(
                "org %s: webhook for %s: cannot read the repository from the API (%s); enumerating again",
                s.config.label,
                event.full_name[:200],
                why,
            )
            self._refresh_soon(s.index)
            return False, None
        return True, found
