"""A version's details and its versions' dates, as the pages, the API and the index builder read them.

Details depend only on the commit: memory (DetailsService's), then disk (`[storage] path/details`,
DetailsStore), then, only for the index's background work, built from the mirror. A request never
runs git for them: what is not on disk yet is asked of the index (DetailsPending, 503). Tag dates
for the version picker come from gitreg's mirror, and what it lacks from the host, in the background.
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Callable

from cachetools import LRUCache

from gitreg.config.rules import ResolvedModule
from gitreg.core.errors import ModuleNotFound
from gitreg.core.flight import InFlight
from gitreg.core.names import ModuleAddress
from gitreg.core.urls import mask
from gitreg.git.pool import Priority, git_priority
from gitreg.git.remote import TagObjects
from gitreg.index.details import DetailsService, ModuleDetails
from gitreg.index.model import DetailsPending, IndexedVersion, IndexEntry, IndexStats
from gitreg.index.persist import DetailsStore
from gitreg.index.tree import utc_timestamp
from gitreg.storage.files import run_file_work

log = logging.getLogger(__name__)

Resolve = Callable[[ModuleAddress], ResolvedModule | None]

DATES_KEPT = 4096  # tag dates remembered for the version picker
DATES_READ = 1000  # at most this many tags' dates read from the host per page (git's argv stays small)


class VersionReader:
    """Versions' details (memory, disk, built) and dates; `ask` reads details not on disk in the
    background (the index's want, or in the serving process the index process's)."""

    def __init__(
        self,
        store: DetailsStore,
        details: DetailsService,
        resolve: Resolve,
        stats: IndexStats,
        ask: Callable[[ModuleAddress, str], None],
    ) -> None:
        self.store = store
        self._details = details
        self._resolve = resolve  # one listable module, O(1)
        self._stats = stats
        self._ask = ask
        # Tag dates read from a mirror for the version picker: (repository, tag, sha) -> RFC 3339.
        self._dates: LRUCache[tuple[str, str, str], str] = LRUCache(maxsize=DATES_KEPT)
        # The host's tag dates being read for a page, by the key marking them read (_read_dates).
        self._reading: InFlight[tuple[str, str, str], None] = InFlight()

    @property
    def tag_objects(self) -> TagObjects:
        """Annotated tags' own objects from recent ls-remotes, which details fetches ask for."""
        return self._details.mirrors.git.adapter.tag_objects

    async def details(self, resolved: ResolvedModule, version: IndexedVersion, build: bool) -> ModuleDetails | None:
        """Details of one version: memory, then disk, then (when `build`) computed from the mirror."""
        tagged = version.tagged()
        cached = self._details.cached(resolved, tagged)
        if cached is not None:
            return cached
        stored = await run_file_work(None, self.store.load, resolved.repository, resolved.rule.path, version.sha)
        if stored is not None:
            self._details.remember(resolved, tagged, stored)
            return stored
        if not build:
            return None
        built = await self._details.get(resolved, tagged)
        self._stats.details_built += 1
        await run_file_work(None, self.store.save, resolved.repository, resolved.rule.path, version.sha, built)
        return built

    async def stored_details(self, entry: IndexEntry, version: IndexedVersion) -> ModuleDetails:
        """The details of `version` from memory or disk, never from git: DetailsPending (503) when
        they have not been read yet, and then they are read in the background for the next ask."""
        resolved = self._resolve(entry.address)
        if resolved is None:
            raise ModuleNotFound(f"module {entry.address} is not served by this registry any more")
        found = await self.details(resolved, version, build=False)
        if found is not None:
            return found
        self._ask(entry.address, version.canonical)
        raise DetailsPending(
            f"the details of {entry.address} {version.canonical} are being read from its repository; "
            "ask again in a moment"
        )

    async def version_dates(self, entry: IndexEntry) -> dict[str, str]:
        """Each version's date (canonical -> RFC 3339 UTC, "" when unknown) as far as gitreg's mirror
        knows: one read of its tags per repository and set of versions, remembered. The dates it
        lacks are read from the host in the background (_read_dates), for the next view."""
        resolved = self._resolve(entry.address)
        if resolved is None:
            return {}
        keys = {v.canonical: (resolved.repository, v.tag, v.sha) for v in entry.versions}
        # Read once for this set of versions, even when the mirror lacks some of their tags.
        marker = (resolved.repository, entry.latest.sha, f"{len(entry.versions)} versions")
        if marker not in self._dates and any(k not in self._dates for k in keys.values()):
            dates = await self._details.mirrors.known_tag_dates(resolved.repository)
            if dates is not None:  # a failed read is not remembered: the next view asks again
                for key in keys.values():
                    if dates.get(key[1]):  # only what was found: the others come with their details
                        self._dates[key] = utc_timestamp(dates[key[1]])
                self._dates[marker] = ""
        if marker in self._dates and any(k not in self._dates for k in keys.values()):
            self._read_dates(resolved.repository, list(keys.values()))
        return {canonical: self._dates.get(key, "") for canonical, key in keys.items()}

    def _read_dates(self, repository: str, keys: list[tuple[str, str, str]]) -> None:
        """Read the dates of `keys` (repository, tag, commit) gitreg does not know from the host, in
        the background at BROWSE priority: one scratch fetch of their tag objects and commits (no
        files, no ref listing), at most once per repository and set of tags (remembered in
        `_dates`); a failed read is not remembered, so a later view tries again."""
        tags = "\0".join(sorted(f"{tag} {sha}" for _, tag, sha in keys))
        read = (repository, hashlib.sha256(tags.encode()).hexdigest(), "tag dates read")
        if read in self._dates or self._reading.get(read) is not None:
            return
        missing = dict([(tag, sha) for repo, tag, sha in keys if (repo, tag, sha) not in self._dates][:DATES_READ])

        async def work() -> None:
            try:
                dates = await self._details.mirrors.fetched_tag_dates(repository, missing)
            except Exception as e:  # noqa: BLE001 - the page shows the dates it has; a later view retries
                log.info("could not read the tag dates of %s for its page: %s", mask(repository), e)
                return
            for key in keys:
                if dates.get(key[1]):
                    self._dates[key] = utc_timestamp(dates[key[1]])
            self._dates[read] = ""

        with git_priority(Priority.BROWSE):  # a person looks at the page: before the index's work
            self._reading.start(read, work())
