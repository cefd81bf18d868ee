"""The index's background work: which modules to (re)index when, and one module's entry made current.

A pass at start and every refresh_seconds looks at every listable module; a tag fetch, an org
change or a new module served brings one forward (`notice`); a version someone asked for is read
first (`want`). WORKERS tasks do the work, each at background priority in the git pool, so
`terraform init` goes first. The index it builds is the store (store.ModuleIndex), through `Store`.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import OrderedDict
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any, NamedTuple, Protocol

from gitreg.config.rules import ResolvedModule
from gitreg.core.errors import GitregError, ModuleNotFound
from gitreg.core.names import ModuleAddress
from gitreg.core.urls import web_url
from gitreg.git.pool import Priority, git_priority
from gitreg.index.details import ModuleDetails
from gitreg.index.model import DetailsUnfinished, IndexedVersion, IndexEntry, IndexStats, OrgInfo, Untagged
from gitreg.index.search import readme_words

log = logging.getLogger(__name__)

# Modules indexed at once: a bounded share of the git pool, so `terraform init` goes first.
WORKERS = 4
# A version whose details were cut short (DetailsUnfinished: a busy host, a parse worker stopped
# or killed) is read again after RETRY_FIRST_SECONDS, then twice as long after each failure, at
# most RETRY_MAX_SECONDS; meanwhile its page says the details are being read (and asking again
# does not bring the read forward: a page reloads every 2 s).
RETRY_FIRST_SECONDS = 5.0
RETRY_MAX_SECONDS = 600.0
# While an org's first listing is still arriving (a page noticed within LISTING_HOLD_SECONDS), a
# new module's details wait: every module is listed before a details read (a fetch, an archive,
# a parse: several ls-remotes' worth) takes one of the WORKERS background slots between two
# pages (#33: at 2,000 repositories the listing took 1.32x bare ls-remote with them mixed in).
# An org whose next page does not come (a spent rate limit, a host down) holds nothing longer.
LISTING_HOLD_SECONDS = 10.0
HOLD_CHECK_SECONDS = 0.5  # how soon a held worker sees the listing complete

Sources = Callable[[], Mapping[ModuleAddress, ResolvedModule]]
Resolve = Callable[[ModuleAddress], ResolvedModule | None]
Versions = Callable[[ModuleAddress], Any]  # async: (ResolvedModule, ModuleVersions)


class Reader(Protocol):
    """How the builder reads a version's details (reading.VersionReader)."""

    async def details(self, resolved: ResolvedModule, version: IndexedVersion, build: bool) -> ModuleDetails | None: ...


class Store(Protocol):
    """What the builder needs of the index it builds (store.ModuleIndex)."""

    stats: IndexStats

    @property
    def read(self) -> Reader: ...

    def get(self, address: ModuleAddress) -> IndexEntry | None: ...

    def addresses(self) -> list[ModuleAddress]: ...

    def put(self, entry: IndexEntry) -> None: ...

    def drop(self, address: ModuleAddress, why: str | None) -> None: ...

    def pass_done(self) -> None: ...

    def untagged(self, address: ModuleAddress) -> Untagged | None: ...

    def mark_untagged(self, address: ModuleAddress, found: Untagged) -> None: ...


def _idle() -> asyncio.Event:
    event = asyncio.Event()
    event.set()
    return event


@dataclass
class _Work:
    """What the background indexing has still to do, and is doing now."""

    pending: OrderedDict[ModuleAddress, None] = field(default_factory=OrderedDict)
    # New modules listed with their versions, details still to build: done once nothing is
    # pending, so a large org is listed at the speed of `ls-remote`, then described.
    later: OrderedDict[ModuleAddress, None] = field(default_factory=OrderedDict)
    # Versions someone asked for whose details are not on disk: read first, in the background
    # (a request never runs git: it gets DetailsPending and asks again).
    wanted: OrderedDict[tuple[ModuleAddress, str], None] = field(default_factory=OrderedDict)
    reading: int = 0  # versions being read now
    noticed: float = 0.0  # time.monotonic() of the last notice (an org page, a pass, a fetch)
    active: set[ModuleAddress] = field(default_factory=set)
    wake: asyncio.Event = field(default_factory=asyncio.Event)
    idle: asyncio.Event = field(default_factory=_idle)
    passing: set[ModuleAddress] | None = None  # what the running pass has still to index
    pass_listed: bool = False  # it started with every org listed: once done, the index is complete

    def waiting(self) -> bool:
        return bool(self.pending or self.later or self.wanted)

    def busy(self) -> bool:
        return self.waiting() or bool(self.active or self.reading)

    def settle(self) -> None:
        """Idle, when nothing is left to do."""
        if not self.busy():
            self.idle.set()

    def woken(self) -> None:
        self.idle.clear()
        self.wake.set()


class _Retries:
    """Versions whose details were cut short, each read again after its back-off."""

    def __init__(self, again: Callable[[ModuleAddress, str], None]) -> None:
        self._again = again
        self._attempts: dict[tuple[ModuleAddress, str], int] = {}
        self._timers: dict[tuple[ModuleAddress, str], asyncio.TimerHandle] = {}

    def failed(self, address: ModuleAddress, canonical: str) -> float:
        """Read it again later; the delay."""
        key = (address, canonical)
        attempts = self._attempts[key] = self._attempts.get(key, 0) + 1
        delay: float = min(RETRY_FIRST_SECONDS * 2.0 ** (attempts - 1), RETRY_MAX_SECONDS)
        old = self._timers.pop(key, None)
        if old is not None:
            old.cancel()
        self._timers[key] = asyncio.get_running_loop().call_later(delay, self._due, key)
        return delay

    def _due(self, key: tuple[ModuleAddress, str]) -> None:
        del self._timers[key]
        self._again(*key)

    def waiting(self, address: ModuleAddress, canonical: str) -> bool:
        """Whether its next read is not due yet."""
        return (address, canonical) in self._timers

    def read(self, address: ModuleAddress, canonical: str) -> None:
        """Its details were read: no more retries."""
        self._attempts.pop((address, canonical), None)
        timer = self._timers.pop((address, canonical), None)
        if timer is not None:
            timer.cancel()


class _Described(NamedTuple):
    """What an entry shows of its latest version's details."""

    description: str
    published_at: str
    words: str
    details: bool  # they are on disk


class IndexBuilder:
    """Keeps a Store's entries current, in the background."""

    def __init__(
        self,
        store: Store,
        sources: Sources,
        resolve: Resolve,
        versions: Versions,
        refresh_seconds: float,
        org_info: Callable[[ModuleAddress], OrgInfo | None] | None = None,
        on_gone: Callable[[ModuleAddress], None] | None = None,
        listed: Callable[[], bool] | None = None,
        leading: Callable[[], bool] | None = None,
    ) -> None:
        self.store = store
        self._sources = sources  # every listable module (a pass)
        self._resolve = resolve  # one listable module, O(1)
        self._versions = versions
        # Rule modules are looked at again this often (the tag cache's TTL, at least a minute).
        self.refresh_seconds = max(60.0, refresh_seconds)
        self._org_info = org_info or (lambda _a: None)
        self._on_gone = on_gone or (lambda _a: None)
        # False while an org's first listing is still being fetched: what `sources` lacks then may
        # only not be listed yet, so nothing is dropped and no pass counts as the first index.
        self._listed = listed or (lambda: True)
        # With Redis: only the lease holder indexes; the others adopt() what it wrote.
        self.leading = leading or (lambda: True)
        self._work = _Work()
        self._retries = _Retries(self._want)

    def start(self) -> list[asyncio.Task[None]]:
        """The scheduler and the workers, running until cancelled."""
        workers = [asyncio.ensure_future(self._worker()) for _ in range(WORKERS)]
        return [asyncio.ensure_future(self._schedule()), *workers]

    def depth(self) -> int:
        """Modules waiting to be (re)indexed, or being indexed."""
        work = self._work
        return len(work.pending) + len(work.later) + len(work.wanted) + len(work.active)

    def listing(self) -> int:
        """Modules waiting to be listed with their versions (their details not counted)."""
        return len(self._work.pending)

    def notice(self, addresses: Iterable[ModuleAddress]) -> None:
        """(Re)index these modules soon (a new module served, an org repository changed)."""
        if not self.leading():
            return  # another replica indexes; its index arrives through adopt()
        for address in addresses:
            self._work.pending[address] = None
        if self._work.pending:
            self._work.noticed = time.monotonic()
            self._work.woken()

    def want(self, address: ModuleAddress, canonical: str) -> None:
        """Read the details of this version next, in the background (someone asked for them),
        unless a read of them was cut short and its back-off is not over."""
        if not self._retries.waiting(address, canonical):
            self._want(address, canonical)

    def _want(self, address: ModuleAddress, canonical: str) -> None:
        self._work.wanted[(address, canonical)] = None
        self._work.wanted.move_to_end((address, canonical), last=False)
        self._work.woken()

    async def settled(self, timeout: float = 30.0) -> None:
        """Wait until nothing is waiting to be indexed (tests, benchmarks)."""
        await asyncio.wait_for(self._work.idle.wait(), timeout)

    async def _read_version(self, address: ModuleAddress, canonical: str) -> None:
        """Build one version's details in the background (at browsing priority: someone asked); the
        latest version's also go into the module's entry (read again after a cut-short read)."""
        entry, resolved = self.store.get(address), self._resolve(address)
        version = entry.find(canonical) if entry is not None else None
        if resolved is None or version is None:
            return
        try:
            with git_priority(Priority.BROWSE):
                details = await self.store.read.details(resolved, version, build=True)
        except DetailsUnfinished as e:
            self._cut_short(address, canonical, e)
            return
        except GitregError as e:
            log.warning("no details for %s %s: %s", address, canonical, e.message)
            return
        self._retries.read(address, canonical)
        current = self.store.get(address)
        if details is not None and current is not None and current.latest == version and _same_place(current, resolved):
            updated = self._described(current, _described(details))
            if updated != current:
                self.store.put(updated)

    def _cut_short(self, address: ModuleAddress, canonical: str, e: DetailsUnfinished) -> None:
        if e.stopping:  # gitreg is stopping: nothing failed, nothing to read again
            return
        self.store.stats.failures += 1
        delay = self._retries.failed(address, canonical)
        log.warning("details of %s %s not kept: %s (read again in %.0f s)", address, canonical, e.message, delay)

    def _described(self, entry: IndexEntry, described: _Described) -> IndexEntry:
        """`entry` showing `described` (an org's own description wins over the README's)."""
        org = self._org_info(entry.address)
        return replace(
            entry,
            description=(org.description if org and org.description else described.description),
            published_at=described.published_at,
            words=described.words,
            details=described.details,
        )

    async def _schedule(self) -> None:
        """A pass at start and every refresh_seconds; modules no longer listable drop out.

        A pass indexes every rule module again (the tag cache answers from memory within its
        TTL, so that is no git call until the TTL expired) but an org module only when its
        repository changed (the org source's marker, e.g. GitHub's pushed_at), so a pass over
        an org where nothing changed costs no git at all.
        """
        while True:
            if not self.leading():
                await asyncio.sleep(1.0)  # another replica indexes; take over within a second of its lease
                continue
            listed = self._listed()
            listable = self._sources()
            if listed:
                for address in [a for a in self.store.addresses() if a not in listable]:
                    self.store.drop(address, "no rule or org serves it any more")
            todo = [a for a in listable if self._needs_index(a)]
            work = self._work
            work.passing = (work.passing or set()) | set(todo)
            work.pass_listed = listed
            if not work.passing:
                self._pass_end()
            self.notice(todo)
            for _ in range(int(self.refresh_seconds)):
                await asyncio.sleep(1.0)
                if not self.leading() or (not listed and self._listed()):
                    break  # (listed now: the pass that makes the index complete starts at once)

    def _needs_index(self, address: ModuleAddress) -> bool:
        entry = self.store.get(address)
        org = self._org_info(address)
        if entry is None:  # new, or known to have no SemVer tag: looked at again once it was pushed to
            untagged = self.store.untagged(address)
            return untagged is None or org is None or org.marker != untagged.marker
        return org is None or org.marker != entry.marker or not entry.details

    def _pass_end(self) -> None:
        self._work.passing = None
        if self._work.pass_listed:
            self.store.pass_done()

    def _holding_details(self) -> bool:
        """Whether new modules' details wait: only they are left while an org's first listing is
        still arriving (see LISTING_HOLD_SECONDS)."""
        work = self._work
        if work.pending or work.wanted or not work.later or self._listed():
            return False
        return time.monotonic() - work.noticed < LISTING_HOLD_SECONDS

    async def _ready(self) -> None:
        """Wait until there is work a worker may take now."""
        work = self._work
        while True:
            held = self._holding_details()
            if work.waiting() and not held:
                return  # (taken before the next await: no other worker takes it meanwhile)
            work.settle()
            work.wake.clear()
            if held:  # the listing's end wakes nobody: look again soon
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(work.wake.wait(), HOLD_CHECK_SECONDS)
            else:
                await work.wake.wait()

    async def _worker(self) -> None:
        work = self._work
        while True:
            await self._ready()
            if work.wanted:  # someone is waiting for these
                (wanted, canonical), _ = work.wanted.popitem(last=False)
                work.reading += 1
                try:
                    await self._read_version(wanted, canonical)
                finally:
                    work.reading -= 1
                work.settle()
                continue
            queue = work.pending or work.later
            address, _ = queue.popitem(last=False)
            if address in work.active:  # another worker has it: index it again after that one
                queue[address] = None
                await asyncio.sleep(0.01)
                continue
            work.active.add(address)
            try:
                await self._index(address, build=queue is work.later)
            except asyncio.CancelledError:
                raise
            except Exception:
                self.store.stats.failures += 1
                log.exception("indexing %s failed", address)
            finally:
                self._indexed(address)

    def _indexed(self, address: ModuleAddress) -> None:
        """A worker is done with `address` (indexed or not): the pass may be over, the index idle."""
        work = self._work
        work.active.discard(address)
        # A module listed with its versions but waiting in `later` for its details is not indexed
        # yet: the pass (and `complete`) ends only once its details are in too.
        if work.passing is not None and address not in work.later:
            work.passing.discard(address)
            if not work.passing:
                self._pass_end()
        work.settle()

    async def _index(self, address: ModuleAddress, build: bool = False) -> None:
        """Versions, then (when the latest changed) details: one module's entry made current.

        A module not listed yet is listed with its versions first; its details, unless they
        are on disk already, are built later (`build`), once no module waits for its versions.
        """
        resolved = self._resolve(address)
        if resolved is None:
            if self._listed():  # (else its org's page may only not have arrived yet)
                self.store.drop(address, "no rule or org serves it any more")
            return
        found = await self._current_versions(address, resolved, build)
        if found is None:
            return
        resolved, versions, newest = found
        old = self.store.get(address)
        described = await self._describe(address, resolved, newest, old, build)
        org = self._org_info(address)
        entry = IndexEntry(
            address=address,
            repository=resolved.repository,
            path=resolved.rule.path,
            source=(org.source if org and org.source else web_url(resolved.clone_url)),
            versions=versions,
            latest=newest,
            description="",
            published_at="",
            verified=resolved.rule.verified,
            topics=org.topics if org else (),
            marker=org.marker if org else "",
            indexed_at=time.time(),
        )
        entry = self._described(entry, described)
        self.store.stats.indexed += 1
        if old is None or old != replace(entry, indexed_at=old.indexed_at):  # unchanged: not a change
            self.store.put(entry)

    async def _current_versions(
        self, address: ModuleAddress, resolved: ResolvedModule, build: bool
    ) -> tuple[ResolvedModule, tuple[IndexedVersion, ...], IndexedVersion] | None:
        """The module's versions (highest first) and its latest; None when it is not listed now."""
        old = self.store.get(address)
        if build and old is not None and not old.details and _same_place(old, resolved):
            # Listed a moment ago with its versions: only its details are missing (and the tag
            # cache's TTL may have run out since, which must not cost a second ls-remote).
            return resolved, old.versions, old.latest
        try:
            resolved, found = await self._versions(address)
        except ModuleNotFound as e:
            self.store.drop(address, e.message)
            self._on_gone(address)
            return None
        except GitregError as e:
            self.store.stats.failures += 1
            log.warning("not indexing %s now (the last indexed state stays): %s", address, e.message)
            return None
        latest = found.latest()
        if latest is None:
            org = self._org_info(address)
            self.store.mark_untagged(address, Untagged(resolved.repository, org.marker if org else ""))
            return None
        versions = tuple(IndexedVersion(tv.canonical, tv.tag, tv.sha) for tv in found.versions)
        return resolved, versions, next(v for v in versions if v.tag == latest.tag)

    async def _describe(
        self,
        address: ModuleAddress,
        resolved: ResolvedModule,
        newest: IndexedVersion,
        old: IndexEntry | None,
        build: bool,
    ) -> _Described:
        """What the entry shows of `newest`'s details: the old entry's, none yet, or read now."""
        kept = old is not None and old.details and old.latest == newest
        if old is not None and kept and _same_place(old, resolved):
            return _Described(old.description, old.published_at, old.words, True)
        if not build and (old is None or not old.details):
            # New, or listed a moment ago and noticed again (a pass, an org page) before its details
            # came: listed now with its versions; described later, from disk when it is there (a
            # restart that lost index.json), else built (listing is not held up by either).
            self._work.later[address] = None
            if old is None or old.latest != newest:
                return _Described("", "", "", False)
            return _Described(old.description, old.published_at, old.words, False)
        details: ModuleDetails | None = None
        published = old.published_at if old is not None and old.latest == newest else ""
        try:
            details = await self.store.read.details(resolved, newest, build=True)
        except DetailsUnfinished as e:
            self._cut_short(address, newest.canonical, e)
            published = e.published_at or published  # git gave the tag's date; only the parsing was cut short
        except GitregError as e:
            self.store.stats.failures += 1
            log.warning("no details for %s %s (listed without them): %s", address, newest.canonical, e.message)
        if details is None:
            return _Described("", published, "", kept)
        self._retries.read(address, newest.canonical)
        return _described(details)


def _described(details: ModuleDetails) -> _Described:
    """What an entry shows of its latest version's details (read now, or from disk)."""
    return _Described(details.description, details.published_at, readme_words(details.root.get("readme", "")), True)


def _same_place(entry: IndexEntry, resolved: ResolvedModule) -> bool:
    """Whether `entry` was indexed from where `resolved` serves the module now."""
    return entry.repository == resolved.repository and entry.path == resolved.rule.path
