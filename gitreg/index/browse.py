"""The browsing facade: what is listed, searched and shown, read from the index (no git).

The browse API (web/api/browse.py) and the module browser's pages (web/pages/views.py) call
this and nothing else: the index for what is
listed, the catalog for download counts, the registry for what still serves an address and
for the latest version a client is sent to.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from gitreg.config.rules import ResolvedModule
from gitreg.core.errors import GitregError, ModuleNotFound
from gitreg.core.names import ModuleAddress
from gitreg.core.versions import TaggedVersion
from gitreg.index.details import ModuleDetails
from gitreg.index.files import ModuleFiles
from gitreg.index.model import IndexedVersion, IndexEntry, NotListedYet
from gitreg.index.store import ModuleIndex
from gitreg.index.tree import utc_timestamp
from gitreg.registry.catalog import Catalog
from gitreg.registry.service import Registry
from gitreg.registry.signatures import Signatures

# The orders a list can be shown in (the pages' `sort=`); search has its own, best match first.
SORTS = ("newest", "name", "downloads")
# How long a version's page or details wait for its signature to be verified the first time.
SIGNATURE_WAIT = 3.0


def pushed_at(marker: str) -> str:
    """An org module's push marker as a date newest-first compares with tag dates (RFC 3339 UTC,
    "" when it is none); GitHub's and GitLab's UTC form without parsing it (a list of 200,000
    modules is sorted on the event loop)."""
    if len(marker) >= 20 and marker.endswith("Z") and marker[19] in ".Z" and marker[10] == "T":
        return marker[:19] + "Z"
    return utc_timestamp(marker)


class BrowseService:
    """List, search and details of the listed modules, for one application."""

    def __init__(self, index: ModuleIndex, catalog: Catalog, registry: Registry, files: ModuleFiles) -> None:
        self.index = index
        self.catalog = catalog
        self.registry = registry
        self.files = files

    def listed(
        self,
        keep: Callable[[IndexEntry], bool],
        memo_key: tuple[object, ...] | None = None,
        namespaces: Iterable[str] | None = None,
    ) -> list[IndexEntry]:
        """Listed modules for which `keep` holds, in list order (see View.listed)."""
        return self.index.view().listed(keep, memo_key, namespaces)

    def ordered(self, entries: list[IndexEntry], sort: str, memo_key: tuple[object, ...]) -> list[IndexEntry]:
        """`entries` (the list or search answer remembered under `memo_key`) by `sort`, one of SORTS.

        Newest published first, or most downloaded first, ties by name; or by name. A module whose
        latest tag's date is not read yet (it comes with its details) sorts by its repository's push
        time from the Git host's API (org modules; never before its newest tag's date, so a module
        tagged today is not placed after one tagged in 2020), else last. Remembered
        per key and index generation (and, by downloads, until the counts change), so a page
        of a large index does not sort it again.
        """
        view = self.index.view()
        catalog = self.catalog
        by_name = view.position
        last = len(by_name)

        def make() -> list[IndexEntry]:
            named = sorted(entries, key=lambda e: by_name.get(e.address, last))
            if sort == "newest":  # a stable sort: equal dates keep the name order
                return sorted(named, key=lambda e: e.published_at or pushed_at(e.marker), reverse=True)
            if sort == "downloads":
                return sorted(named, key=lambda e: catalog.downloads(e.address), reverse=True)
            return named

        counts = catalog.downloads_version if sort == "downloads" else None
        return view.remembered(("ordered", sort, counts, *memo_key), make)

    def facets(self, key: tuple[object, ...], entries: Callable[[], list[IndexEntry]]) -> tuple[list[str], list[str]]:
        """Sorted namespaces and systems of `entries()` (the pages' filters), once per key and index generation."""
        return self.index.view().facets(key, entries)

    def search(self, query: str, keep: Callable[[IndexEntry], bool], memo_key: tuple[object, ...]) -> list[IndexEntry]:
        """Matching modules, best first; ties go to the most downloaded."""
        catalog = self.catalog
        # Search ranks ties by downloads: a remembered answer is void once they change.
        return self.index.view().search(query, keep, (*memo_key, catalog.downloads_version), catalog.downloads)

    @property
    def complete(self) -> bool:
        """True once the index has seen every listable module (else the lists say they may grow)."""
        return self.index.complete

    def untagged(self, address: ModuleAddress) -> bool:
        """True when `address` is served but not listed for want of a SemVer tag."""
        return self.index.untagged(address) is not None

    def find(self, address: ModuleAddress) -> IndexEntry | None:
        """The indexed module at `address`, or None when it is not listed."""
        return self.index.get(address)

    def downloads(self, address: ModuleAddress) -> int:
        """Download requests answered for `address` (across replicas, with Redis up)."""
        return self.catalog.downloads(address)

    def indexed(self, address: ModuleAddress) -> IndexEntry:
        """The indexed module at `address`; 404 when it is not listed, or nothing serves it (any more);
        503 (Retry-After) when it is served but the index has not listed it yet."""
        entry = self.index.get(address)
        self.registry.resolve(address)  # 404 when nothing serves it (any more)
        if entry is None:  # untagged (404, saying so), being indexed (503) or not listable (404)
            raise self.index.unlisted(address)
        return entry

    def unlisted(self, address: ModuleAddress) -> ModuleNotFound | NotListedYet:
        """Why `address` is not listed: NotListedYet (503) while it is being indexed, else ModuleNotFound."""
        return self.index.unlisted(address)

    async def details(self, entry: IndexEntry, shown: IndexedVersion) -> tuple[ModuleDetails, list[str]]:
        """The details of one version, and every system its namespace/name is listed for.

        From memory or disk, never git: a version not read yet is a 503 (Retry-After) while the
        index reads it in the background (the latest's are read when the module is indexed).
        """
        details = await self.index.read.stored_details(entry, shown)
        return details, sorted({*self.systems(entry.address), entry.address.system})

    async def version_dates(self, entry: IndexEntry) -> dict[str, str]:
        """canonical -> when each version of `entry` was tagged ("" where gitreg's mirror does not say)."""
        return await self.index.read.version_dates(entry)

    async def served_details(self, entry: IndexEntry, shown: IndexedVersion) -> ModuleDetails:
        """The details of one version from memory or disk (never git), once the registry still
        serves the module (404 otherwise); a version not read yet raises DetailsPending."""
        self.registry.resolve(entry.address)
        return await self.index.read.stored_details(entry, shown)

    async def image(self, entry: IndexEntry, shown: IndexedVersion, path: str) -> tuple[memoryview, str]:
        """(bytes, Content-Type) of an image in the module's folder at `shown` (files.ModuleFiles.image),
        once the registry still serves the module (404 otherwise)."""
        resolved = self.registry.resolve(entry.address)
        return await self.files.image(resolved, shown.tagged(), path)

    def systems(self, address: ModuleAddress) -> list[str]:
        """The systems listed under `address`'s namespace/name, in list order."""
        return [
            e.address.system
            for e in self.index.view().listed(
                lambda e: e.address.namespace == address.namespace and e.address.name == address.name
            )
        ]

    async def signature(self, entry: IndexEntry, shown: IndexedVersion) -> tuple[dict[str, str] | None, str | None]:
        """The version's signature ([signing]; None when unsigned or no keys), and why it is not served, if so."""
        signing = self._signing(entry)
        if signing is None:
            return None, None
        signatures, resolved = signing
        return await signatures.describe(resolved, shown.tag, shown.sha, shown.canonical, SIGNATURE_WAIT)

    def refused_versions(self, entry: IndexEntry) -> set[str]:
        """The entry's versions known not to be served for want of a trusted signature (shown, marked)."""
        signing = self._signing(entry)
        return set() if signing is None else signing[0].refused(signing[1], entry.versions)

    def _signing(self, entry: IndexEntry) -> tuple[Signatures, ResolvedModule] | None:
        """The signatures service and the rule serving `entry`, when [signing] has keys and a rule does."""
        signatures = self.registry.signatures
        if signatures is None:
            return None
        try:
            return signatures, self.registry.resolve(entry.address)
        except GitregError:
            return None

    async def latest(self, address: ModuleAddress) -> TaggedVersion:
        """The highest version served (from the tag cache: the download redirect follows the tags)."""
        return await self.registry.latest(address)
