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
import logging
import time
from collections.abc import AsyncIterator, Callable, Iterable, Mapping
from pathlib import Path

from gitreg.core.errors import ModuleNotFound
from gitreg.core.events import AsyncSignal, Signal
from gitreg.core.names import ModuleAddress
from gitreg.index.build import IndexBuilder, Resolve, Sources, Versions
from gitreg.index.details import DetailsService
from gitreg.index.entries import Entries
from gitreg.index.model import ChangeLog, IndexEntry, IndexStats, NotListedYet, OrgInfo, Untagged
from gitreg.index.persist import (
    DETAILS_DIR,
    FILE_NAME,
    FORMAT,
    TMP_PREFIX,
    DetailsStore,
    IndexDocument,
    IndexEncoder,
    parse_index,
)
from gitreg.index.reading import VersionReader
from gitreg.index.search import View
from gitreg.storage.files import collector_paused, keep_long_lived, run_file_work
from gitreg.storage.state import StateFile

log = logging.getLogger(__name__)

FLUSH_SECONDS = 2.0


class ModuleIndex:
    """Listable modules with their versions and latest details, served from memory.

    The store: the entries (entries.Entries, with the view lists and search read), index.json,
    what changed; a version's details and dates are its `read` (reading.VersionReader); the
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
        self._resolve = resolve  # one listable module, O(1)
        self.enabled = enabled
        # False in the serving process when the index process builds: load, then take() its entries.
        self.builds = builds
        # In the index process: what changed since the serving process was sent it (process.py).
        self.changes = changes
        # Not fsynced (written every FLUSH_SECONDS while indexing): a damaged file is built again.
        self.state = StateFile(
            self.path, FORMAT, TMP_PREFIX, self._snapshot, unreadable="the index is built again", durable=False
        )
        self.state.on_written.connect(self._written)
        # Told of each indexed module whose repository no longer exists (the catalog forgets it).
        self.on_gone: Signal[[ModuleAddress]] = Signal()
        self._entries = Entries()
        self._encode = IndexEncoder()  # index.json's text, what was written before not encoded again
        self._complete = False
        self.stats = IndexStats()
        self._remote_queued = 0  # the index process's queue depth (take_status)
        self._builder = IndexBuilder(
            self, sources, resolve, versions, refresh_seconds, org_info, self.on_gone.emit, listed, leading
        )
        # In the serving process (on_wanted): details someone asked for go to the index process, which reads them.
        ask = on_wanted or self.want
        self.read = VersionReader(DetailsStore(root / DETAILS_DIR), details, resolve, self.stats, ask)

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

    def get(self, address: ModuleAddress) -> IndexEntry | None:
        """The indexed module at `address`, or None when it is not listed."""
        return self._entries.get(address)

    def untagged(self, address: ModuleAddress) -> Untagged | None:
        """What the index remembers of a module served without a SemVer tag yet (None: not that)."""
        return self._entries.untagged(address)

    def addresses(self) -> list[ModuleAddress]:
        """Every listed module's address, and every untagged one's."""
        return self._entries.addresses()

    def unlisted(self, address: ModuleAddress) -> ModuleNotFound | NotListedYet:
        """Why a module the registry serves is not listed: NotListedYet (503) while the index has not
        looked at it yet, ModuleNotFound when it has (or nothing makes it listable)."""
        if self._entries.untagged(address) is not None:
            return ModuleNotFound(
                f"module {address} has no SemVer tag yet: it is listed once its repository has a tag like v1.0.0"
            )
        why = self._entries.refused(address)
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
        """The current generation's sorted entries (entries.Entries.view: a second behind while indexing)."""
        return self._entries.view(busy=bool(self.queue_depth()))

    def age(self) -> float:
        """Seconds since the last complete pass over every listable module."""
        return max(0.0, time.time() - self.stats.last_pass)

    def queue_depth(self) -> int:
        """Modules waiting to be (re)indexed."""
        return self._builder.depth() + self._remote_queued

    def listing_queued(self) -> int:
        """Modules waiting to be listed with their versions (in the process that builds)."""
        return self._builder.listing()

    # --- the background work --------------------------------------------------------------------

    def want(self, address: ModuleAddress, canonical: str) -> None:
        """Read the details of this version next, in the background (someone asked for them)."""
        self._builder.want(address, canonical)

    def notice(self, addresses: Iterable[ModuleAddress]) -> None:
        """(Re)index these modules soon (a new module served, an org repository changed)."""
        self._builder.notice(addresses)

    def notice_repository(self, repository: str) -> None:
        """The tag cache fetched new tags of `repository`: reindex the listed modules it serves.

        (A module not listed yet is indexed anyway: it is pending, or not listable.)
        """
        self.notice(self._entries.of_repository(repository))

    async def settled(self, timeout: float = 30.0) -> None:
        """Wait until nothing is waiting to be indexed (tests, benchmarks)."""
        await self._builder.settled(timeout)

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
        self.state.mark_dirty()

    def _replace(self, document: IndexDocument) -> None:
        self._entries.replace(document.entries, document.untagged)
        self._complete = document.complete and bool(self._entries.addresses())

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

    # --- the entries, and what follows them ----------------------------------------------------------

    def put(self, entry: IndexEntry) -> None:
        """List `entry` (in place of the module's old one)."""
        self._entries.set(entry)
        self.state.mark_dirty()
        if self.changes is not None:
            self.changes.record(entry.address, entry)

    def mark_untagged(self, address: ModuleAddress, found: Untagged) -> None:
        """`address` is served but has no SemVer tag: not listed (dropped if it was), remembered."""
        self._unlist(address, "no tag is a SemVer version")
        if self._entries.set_untagged(address, found):
            self.state.mark_dirty()
            if self.changes is not None:
                self.changes.record(address, found)

    def drop(self, address: ModuleAddress, why: str | None) -> None:
        """No longer list `address` (nor remember it untagged); `why` is logged (None: said elsewhere)."""
        if self._entries.forget_untagged(address):
            self.state.mark_dirty()
            if self.changes is not None:
                self.changes.record(address, None)
        self._unlist(address, why)

    def _unlist(self, address: ModuleAddress, why: str | None) -> None:
        old, newly_refused = self._entries.unlist(address, why)
        if old is not None:
            if why is not None:
                log.info("%s is no longer listed: %s", address, why)
            self.state.mark_dirty()
        if (old is not None or newly_refused) and self.changes is not None:
            self.changes.record(address, None)  # (the serving process answers 404 for it, not 503)

    def pass_done(self) -> None:
        """A pass that started with every org listed is over: the index is complete."""
        self._complete = True
        self.stats.passes += 1
        self.stats.last_pass = time.time()
        self.state.mark_dirty()

    def _snapshot(self) -> Callable[[], str]:
        """What a flush of index.json takes on the event loop: entries are immutable, so a copy of
        the list is all; encoding thousands of them (tens of ms) is done off the loop."""
        return functools.partial(self._encode, self._entries.listed(), self._complete, self._entries.all_untagged())

    async def _written(self, _text: str) -> None:
        self.stats.writes += 1
