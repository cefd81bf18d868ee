"""The module index: what list, search, latest and details answer from, kept in memory and on disk.

Browsing never runs git or calls a Git host's API inside a request: it reads this index. The
index is built and kept fresh in the background, below `terraform init`'s work:

- which modules: every fully specified `[[modules]]` rule, every module a wildcard rule has
  served (the catalog remembers them), and every module an `[[orgs]]` source enumerates;
- for each: its versions (through the tag cache, so one `ls-remote` serves both the index and
  the versions endpoint), then the details of its latest version (README, inputs, outputs...),
  which depend only on the commit and are kept on disk under `[storage] path/details`;
- when: all of them at start (from the persisted index first, so a restart serves at once),
  again whenever the tag cache fetched a repository's tags (a webhook, a `terraform init` after
  the TTL), when an org source reports a repository changed, and every `[cache] ttl_seconds` for
  rule modules (the tag cache answers from memory within its TTL, so that costs no git).

`index.json` (persist.py, a StateFile) is written at most every FLUSH_SECONDS and at shutdown. A module
without a SemVer tag, or whose repository is gone, is not listed.

Under `gitreg serve` this work runs in the index process (process.py, gitreg/indexer.py), at a
lower CPU priority: its ModuleIndex builds (and records `changes`), the serving process's
ModuleIndex only `take()`s the entries it sends and forwards the details someone asked for
(`on_wanted`).
"""

from __future__ import annotations

import asyncio
import functools
import hashlib
import logging
import time
from collections.abc import AsyncIterator, Callable, Iterable, Mapping
from pathlib import Path

from cachetools import LRUCache

from gitreg.config.rules import ResolvedModule
from gitreg.core.errors import ModuleNotFound
from gitreg.core.events import AsyncSignal, Signal
from gitreg.core.flight import InFlight
from gitreg.core.names import ModuleAddress
from gitreg.core.urls import mask
from gitreg.git.pool import Priority, git_priority
from gitreg.git.remote import TagObjects
from gitreg.index.build import IndexBuilder, Resolve, Sources, Versions
from gitreg.index.details import DetailsService, ModuleDetails
from gitreg.index.model import (
    ChangeLog,
    DetailsPending,
    IndexedVersion,
    IndexEntry,
    IndexStats,
    NotListedYet,
    OrgInfo,
    Untagged,
)
from gitreg.index.persist import (
    DETAILS_DIR,
    FILE_NAME,
    FORMAT,
    TMP_PREFIX,
    DetailsStore,
    IndexDocument,
    encode_index,
    parse_index,
)
from gitreg.index.search import View
from gitreg.index.tree import utc_timestamp
from gitreg.storage.files import collector_paused, keep_long_lived, run_file_work
from gitreg.storage.state import StateFile

log = logging.getLogger(__name__)

FLUSH_SECONDS = 2.0
DATES_KEPT = 4096  # tag dates remembered for the version picker
DATES_READ = 1000  # at most this many tags' dates read from the host per page (git's argv stays small)
# While the indexer is busy, lists may be this much behind it (see ModuleIndex.view).
VIEW_STALE_SECONDS = 1.0


class ModuleIndex:
    """Listable modules with their versions and latest details, served from memory.

    The store: entries, the view lists and search read, details from disk, index.json; the
    background work that keeps it current is its IndexBuilder's (`build`).
    """

    def __init__(
        self,
        root: Path,
        sources: Sources,
        resolve: Resolve,
        versions: Versions,
        details: DetailsService,
        refresh_seconds: float,
        org_info: Callable[[ModuleAddress], OrgInfo | None] | None = None,
        enabled: bool = True,
        builds: bool = True,
        listed: Callable[[], bool] | None = None,
        leading: Callable[[], bool] | None = None,
        changes: ChangeLog | None = None,
        on_wanted: Callable[[ModuleAddress, str], None] | None = None,
    ) -> None:
        self.path = root / FILE_NAME
        self.store = DetailsStore(root / DETAILS_DIR)
        self._resolve = resolve  # one listable module, O(1)
        self._details = details
        # Tag dates read from a mirror for the version picker: (repository, tag, sha) -> RFC 3339.
        self._dates: LRUCache[tuple[str, str, str], str] = LRUCache(maxsize=DATES_KEPT)
        # The host's tag dates being read for a page, by the key marking them read (_read_dates).
        self._reading: InFlight[tuple[str, str, str], None] = InFlight()
        self.enabled = enabled
        # False in the serving process when the index process builds: load, then take() its entries.
        self.builds = builds
        # In the index process: what changed since the serving process was sent it (process.py).
        self.changes = changes
        # In the serving process: details someone asked for go to the index process, which reads them.
        self.on_wanted = on_wanted
        # Not fsynced (written every FLUSH_SECONDS while indexing): a damaged file is built again.
        self.state = StateFile(
            self.path, FORMAT, TMP_PREFIX, self._snapshot, unreadable="the index is built again", durable=False
        )
        self.state.on_written.connect(self._written)
        # Told of each indexed module whose repository no longer exists (the catalog forgets it).
        self.on_gone: Signal[[ModuleAddress]] = Signal()
        self._entries: dict[ModuleAddress, IndexEntry] = {}
        self._untagged: dict[ModuleAddress, Untagged] = {}  # served, but no SemVer tag yet
        self._by_repository: dict[str, set[ModuleAddress]] = {}
        self._readme: dict[str, set[ModuleAddress]] = {}  # README word -> modules (search)
        # Modules the index looked at and does not list (no SemVer tag, repository gone...): their
        # pages and API answers are 404s; any other servable module not listed yet is a 503.
        self._refused: dict[ModuleAddress, str] = {}
        self._view: View | None = None
        self._view_stale = False
        self._view_built = 0.0
        self._complete = False
        self.stats = IndexStats()
        self._remote_queued = 0  # the index process's queue depth (take_status)
        self._builder = IndexBuilder(
            self, sources, resolve, versions, refresh_seconds, org_info, self.on_gone.emit, listed, leading
        )

    # --- reads (event loop, no I/O) -----------------------------------------------------------

    @property
    def on_written(self) -> AsyncSignal[[str]]:
        """Told the text of each index.json write (with Redis, the other replicas load it)."""
        return self.state.on_written

    @property
    def complete(self) -> bool:
        """True once every listable module was indexed at least once (or loaded from disk)."""
        return self._complete

    def __len__(self) -> int:
        return len(self._entries)

    def entries(self) -> list[IndexEntry]:
        """Every listed module now (unordered; lists and search use the sorted view)."""
        return list(self._entries.values())

    def get(self, address: ModuleAddress) -> IndexEntry | None:
        """The indexed module at `address`, or None when it is not listed."""
        return self._entries.get(address)

    def untagged(self, address: ModuleAddress) -> Untagged | None:
        """What the index remembers of a module served without a SemVer tag yet (None: not that)."""
        return self._untagged.get(address)

    def unlisted(self, address: ModuleAddress) -> ModuleNotFound | NotListedYet:
        """Why a module the registry serves is not listed: NotListedYet (503) while the index has not
        looked at it yet, ModuleNotFound when it has (or nothing makes it listable)."""
        untagged = self._untagged.get(address)
        if untagged is not None:
            return ModuleNotFound(
                f"module {address} has no SemVer tag yet: it is listed once its repository has a tag like v1.0.0"
            )
        why = self._refused.get(address)
        if why is None and self.enabled and self._resolve(address) is not None:
            return NotListedYet(
                f"module {address} is being indexed: its versions are being read from its repository; "
                "ask again in a moment"
            )
        return ModuleNotFound(
            f"module {address} is not listed by this registry"
            + (
                f": {why}"
                if why
                else " (yet): a module is listed once it has a SemVer tag and the index has seen it "
                "(a wildcard rule's modules after their first `terraform init`)"
            )
        )

    def view(self) -> View:
        """The current generation's sorted entries, rebuilt lazily after a change.

        While the indexer is busy (the first pass over a large org changes the index many
        times a second) a view up to VIEW_STALE_SECONDS old is served, so requests do not
        rebuild it after every module; once the indexer is idle, the next request sees all.
        """
        view = self._view
        if view is not None and (
            not self._view_stale or (self.queue_depth() and time.monotonic() - self._view_built < VIEW_STALE_SECONDS)
        ):
            return view
        self._view = view = View(self._entries.values(), self._readme)
        self._view_stale = False
        self._view_built = time.monotonic()
        return view

    def age(self) -> float:
        """Seconds since the last complete pass over every listable module."""
        return max(0.0, time.time() - self.stats.last_pass)

    def queue_depth(self) -> int:
        """Modules waiting to be (re)indexed."""
        return self._builder.depth() + self._remote_queued

    # --- details (the latest's from disk; others built once, then on disk) ------------------------

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
        self.stats.details_built += 1
        await run_file_work(None, self.store.save, resolved.repository, resolved.rule.path, version.sha, built)
        return built

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

    @property
    def tag_objects(self) -> TagObjects:
        """Annotated tags' own objects from recent ls-remotes, which details fetches ask for."""
        return self._details.mirrors.git.adapter.tag_objects

    async def stored_details(self, entry: IndexEntry, version: IndexedVersion) -> ModuleDetails:
        """The details of `version` from memory or disk, never from git: DetailsPending (503) when
        they have not been read yet, and then they are read in the background for the next ask."""
        resolved = self._resolve(entry.address)
        if resolved is None:
            raise ModuleNotFound(f"module {entry.address} is not served by this registry any more")
        found = await self.details(resolved, version, build=False)
        if found is not None:
            return found
        (self.on_wanted or self.want)(entry.address, version.canonical)
        raise DetailsPending(
            f"the details of {entry.address} {version.canonical} are being read from its repository; "
            "ask again in a moment"
        )

    def want(self, address: ModuleAddress, canonical: str) -> None:
        """Read the details of this version next, in the background (someone asked for them)."""
        self._builder.want(address, canonical)

    # --- changes --------------------------------------------------------------------------------

    def notice(self, addresses: Iterable[ModuleAddress]) -> None:
        """(Re)index these modules soon (a new module served, an org repository changed)."""
        self._builder.notice(addresses)

    def notice_repository(self, repository: str) -> None:
        """The tag cache fetched new tags of `repository`: reindex the listed modules it serves.

        (A module not listed yet is indexed anyway: it is pending, or not listable.)
        """
        self.notice(list(self._by_repository.get(repository, ())))

    async def settled(self, timeout: float = 30.0) -> None:
        """Wait until nothing is waiting to be indexed (tests, benchmarks)."""
        await self._builder.settled(timeout)

    # --- what another process built ----------------------------------------------------------------

    def load(self) -> None:
        """Read index.json (blocking, at start); a damaged file is set aside, never fatal."""
        # The collector paused while the entries become objects too, not only while parsing.
        with collector_paused():
            data = self.state.read()
            document = None if data is None else parse_index(data)
            if document is not None:
                self._replace(document)
                log.info("loaded %d indexed module(s) from %s", len(self._entries), self.path)
        keep_long_lived()

    def adopt(self, text: str) -> None:
        """Replace the index with the one another replica built (its index.json text); kept on disk here too."""
        data = self.state.parse(text)
        document = None if data is None else parse_index(data)
        if document is None:
            return
        self._replace(document)
        keep_long_lived()
        self.stats.last_pass = time.time()
        self._changed()

    def _replace(self, document: IndexDocument) -> None:
        for entry in self._entries.values():
            self._unlink(entry)
        self._entries.clear()
        for entry in document.entries:
            self._entries[entry.address] = entry
            self._link(entry)
        self._untagged = dict(document.untagged)
        self._complete = document.complete and bool(self._entries or self._untagged)

    def take(
        self,
        entries: Iterable[IndexEntry],
        dropped: Iterable[ModuleAddress] = (),
        untagged: Mapping[ModuleAddress, Untagged] | None = None,
    ) -> None:
        """Entries the index process built (or dropped, or found untagged), replacing these only (serving process)."""
        for entry in entries:
            self.put(entry)
        for address in dropped:
            self.drop(address, None)  # the index process logged why
        for address, found in (untagged or {}).items():
            self.mark_untagged(address, found)

    def take_status(self, complete: bool, queued: int, stats: Mapping[str, float]) -> None:
        """The index process's progress (serving process): /readyz and /metrics show it."""
        if complete and not self._complete:  # the entries it sent one by one, all here
            keep_long_lived()
        self._complete = complete
        self._remote_queued = queued
        for name, value in stats.items():
            setattr(self.stats, name, value)

    # --- the background work ------------------------------------------------------------------------

    async def lifetime(self) -> AsyncIterator[None]:
        """Load, index in the background while the app runs, write once more at shutdown."""
        if not self.enabled:
            yield
            return
        await run_file_work(None, self.load)
        if not self.builds:  # the index process builds, writes index.json, and sends its changes
            yield
            return
        async with self.state.flushing(FLUSH_SECONDS):  # its last flush after the builder stopped
            tasks = self._builder.start()
            try:
                yield
            finally:
                for task in tasks:
                    task.cancel()
                await asyncio.gather(*tasks, return_exceptions=True)

    # --- the entries, and what follows them ----------------------------------------------------------

    def put(self, entry: IndexEntry) -> None:
        """List `entry` (in place of the module's old one)."""
        self._untagged.pop(entry.address, None)
        old = self._entries.get(entry.address)
        if old is not None:
            self._unlink(old)
        self._refused.pop(entry.address, None)
        self._entries[entry.address] = entry
        self._link(entry)
        self._changed()
        if self.changes is not None:
            self.changes.record(entry.address, entry)

    def mark_untagged(self, address: ModuleAddress, found: Untagged) -> None:
        """`address` is served but has no SemVer tag: not listed (dropped if it was), remembered."""
        self._unlist(address, "no tag is a SemVer version")
        if self._untagged.get(address) != found:
            self._untagged[address] = found
            self.state.mark_dirty()
            if self.changes is not None:
                self.changes.record(address, found)

    def drop(self, address: ModuleAddress, why: str | None) -> None:
        """No longer list `address` (nor remember it untagged); `why` is logged (None: said elsewhere)."""
        if self._untagged.pop(address, None) is not None:
            self.state.mark_dirty()
            if self.changes is not None:
                self.changes.record(address, None)
        self._unlist(address, why)

    def _unlist(self, address: ModuleAddress, why: str | None) -> None:
        old = self._entries.pop(address, None)
        newly_refused = address not in self._refused
        self._refused[address] = why or "the index does not list it"
        if old is not None:
            self._unlink(old)
            if why is not None:
                log.info("%s is no longer listed: %s", address, why)
            self._changed()
        if (old is not None or newly_refused) and self.changes is not None:
            self.changes.record(address, None)  # (the serving process answers 404 for it, not 503)

    def addresses(self) -> list[ModuleAddress]:
        """Every listed module's address, and every untagged one's."""
        return [*self._entries, *self._untagged]

    def pass_done(self) -> None:
        """A pass that started with every org listed is over: the index is complete."""
        self._complete = True
        self.stats.passes += 1
        self.stats.last_pass = time.time()
        self.state.mark_dirty()

    def _link(self, entry: IndexEntry) -> None:
        self._by_repository.setdefault(entry.repository, set()).add(entry.address)
        for word in entry.words.split():
            self._readme.setdefault(word, set()).add(entry.address)

    def _unlink(self, entry: IndexEntry) -> None:
        self._by_repository.get(entry.repository, set()).discard(entry.address)
        for word in entry.words.split():
            modules = self._readme.get(word)
            if modules is not None:
                modules.discard(entry.address)
                if not modules:
                    del self._readme[word]

    def _changed(self) -> None:
        self._view_stale = True
        self.state.mark_dirty()

    def _snapshot(self) -> Callable[[], str]:
        """What a flush of index.json takes on the event loop: entries are immutable, so a copy of
        the list is all; encoding thousands of them (tens of ms) is done off the loop."""
        return functools.partial(encode_index, list(self._entries.values()), self._complete, dict(self._untagged))

    async def _written(self, _text: str) -> None:
        self.stats.writes += 1
