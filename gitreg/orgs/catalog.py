"""Org mode's listing: the repositories of GitLab groups and GitHub organizations, served as modules.

`OrgCatalog` holds the current listing of every `[[orgs]]` entry (module address -> `OrgRepo`)
and is the one facade of org mode: requests read it (memory only), enumerations
(orgs.refresh) and repository webhooks change it, and orgs.json (orgs.store) keeps its last
good state, loaded at start so a restart serves the known modules before the API answers. An
API failure never empties a listing: the last good one stays. The registry asks `resolve()`
for an org module, built as a `ResolvedModule` with a synthetic `ModuleRule`, so org modules
are served exactly like rule modules. Subscribers (the module index) hear of every added,
changed or removed address. Everything here runs on the event loop, except the file's I/O and
what grows with the listing: evaluating records, combining the orgs' claims (orgs.combine),
each on a thread from a snapshot, then installed here by reference swaps.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Callable, Coroutine, Iterable, Mapping
from concurrent.futures import Executor
from itertools import chain
from pathlib import Path
from typing import Any

import aiohttp

from gitreg.config.model import Config, ModuleRule, OrgConfig
from gitreg.config.rules import ResolvedModule
from gitreg.core.errors import ModuleNotFound
from gitreg.core.events import Signal
from gitreg.core.names import ModuleAddress
from gitreg.forges.base import ForgeError, OrgStats, RepoRecord, RepositoryEvent
from gitreg.orgs.combine import (
    KEEP_LONG_LIVED_AT,
    Clash,
    Combined,
    Inputs,
    OrgView,
    combine_paused,
    evaluate_kept,
)
from gitreg.orgs.model import (
    Evaluated,
    OrgChanges,
    OrgListingPending,
    OrgRepo,
    OrgReport,
    OrgState,
    by_name,
    change,
    evaluate,
    owns,
    patched,
)
from gitreg.orgs.owners import Owners
from gitreg.orgs.patch import Served, followed, identities, install_touched, patch_org, reindex, settle_patch
from gitreg.orgs.refresh import OrgRefresher
from gitreg.orgs.store import OrgStore, read_owners
from gitreg.storage.files import keep_long_lived, run_file_work

log = logging.getLogger(__name__)

# A request for an org namespace whose first listing is still being fetched waits this long
# for it (only before the very first listing; after that, requests never wait).
FIRST_LISTING_WAIT = 8.0
# How long a GitLab webhook waits for the one project it names (GitLab gives up after 10 s).
WEBHOOK_FETCH_SECONDS = 8.0
# orgs.json is written this long after a webhook changed a listing, with whatever changed meanwhile
# (writing 230,000 repositories costs a second of CPU: a burst of webhooks writes once).
WEBHOOK_WRITE_DELAY = 5.0
# At start, orgs.json gets this long to load before the port opens (a usual file loads well
# within it, so the first requests find the listing); a larger one goes on loading behind.
LOAD_BEFORE_SERVING = 0.3


class OrgCatalog:
    """The listings of every `[[orgs]]` entry; touched from the event loop only."""

    def __init__(self, config: Config, path: Path | None, executor: Executor | None = None) -> None:
        self.config = config
        self._orgs = [OrgState(i, org) for i, org in enumerate(config.orgs)]
        self._namespaces: dict[str, list[OrgState]] = {}
        for state in self._orgs:
            self._namespaces.setdefault(state.config.namespace, []).append(state)
        self._listing: dict[ModuleAddress, OrgRepo] = {}
        self._by_repository: dict[str, set[ModuleAddress]] = {}
        self._identities: dict[str, set[str]] | None = None  # built on the first webhook after a rebuild
        self._identity: Callable[[str], str | None] | None = None  # (how it was built)
        self._contested: dict[ModuleAddress, list[OrgRepo]] = {}  # every claim to each address claimed twice or more
        self._resolved: dict[ModuleAddress, tuple[OrgRepo, ResolvedModule]] = {}
        self._shadowed: dict[int, dict[str, str]] = {}  # org index -> full_name -> why (an address conflict)
        self._clashes_logged: set[tuple[ModuleAddress, str, str]] = set()
        # Told each change of the listing, on the event loop (a failing listener is logged, the rest still run).
        self.on_change: Signal[[OrgChanges]] = Signal(failures=(log, "an org listing subscriber failed"))
        self._owners = Owners(self._orgs)
        self._settling = False  # a rebuild for owners adopted from other replicas is scheduled
        # One rebuild at a time (computed on a thread, installed on the loop); a webhook's patch
        # reads the listing it patches under it too. While one computes, first-listing pages wait
        # (`_deferred`); any other change of what it read (`_generation`) makes it start over.
        self._rebuilding = asyncio.Lock()
        self._deferred: list[tuple[OrgState, list[RepoRecord]]] | None = None
        self._generation = 0
        self._tasks: set[asyncio.Task[None]] = set()
        # orgs.json was read: its owners are known (to publish them to the other replicas).
        self.on_loaded: Signal[[]] = Signal(failures=(log, "an org listing subscriber failed"))
        # path None: not persisted (gitreg check --probe)
        self._store = OrgStore(path, executor, self._orgs, self._owners)
        self._refresher = OrgRefresher(self._orgs, self)
        self._loading: asyncio.Task[int] | None = None  # orgs.json being read, after the port opened

    # ---- reading (requests) -----------------------------------------------------------

    def resolve(self, address: ModuleAddress) -> ResolvedModule | None:
        """The org module at `address` as a ResolvedModule (a synthetic rule), or None."""
        repo = self._listing.get(address)
        if repo is None:
            return None
        memo = self._resolved.get(address)
        if memo is not None and memo[0] is repo:
            return memo[1]
        org = self.config.orgs[repo.org]
        rule = ModuleRule(
            repository=repo.repository,
            namespace=address.namespace,
            name=address.name,
            system=address.system,
            clone_url=repo.clone_url,
            ref="tag",
            download=org.download,
        )
        resolved = ResolvedModule(address, rule, repo.repository, repo.clone_url)
        self._resolved[address] = (repo, resolved)
        return resolved

    def get(self, address: ModuleAddress) -> OrgRepo | None:
        """The org repository serving `address`, or None."""
        return self._listing.get(address)

    def modules(self) -> Mapping[ModuleAddress, OrgRepo]:
        """Every org module now (a read-only view; replaced, never mutated, on change)."""
        return self._listing

    def serves_namespace(self, namespace: str) -> bool:
        """True when an org serves `namespace` (so a name it does not list is a 404, without git)."""
        return namespace in self._namespaces

    def not_found(self, address: ModuleAddress) -> ModuleNotFound:
        """The 404 for a name the org listing of its namespace does not have."""
        labels = ", ".join(s.config.label for s in self._namespaces.get(address.namespace, ()))
        return ModuleNotFound(
            f"module {address} is not served by this registry: namespace {address.namespace} "
            f"lists the repositories of {labels}, and none of them is this module"
        )

    async def wait_listed(self, namespace: str, timeout: float = FIRST_LISTING_WAIT) -> None:
        """Return once every org of `namespace` has a listing; 503 (OrgListingPending) when one has none.

        Only while orgs.json is read at start, or before an org's first enumeration has ended,
        does this wait (at most `timeout` in all).
        """
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        if self._loading is not None and not self._loading.done():  # orgs.json is still being read
            with contextlib.suppress(TimeoutError, asyncio.CancelledError):
                await asyncio.wait_for(asyncio.shield(self._loading), timeout)
        pending = [s for s in self._namespaces.get(namespace, ()) if s.records is None]
        if not pending:
            return
        waiting = [s.attempted.wait() for s in pending if not s.attempted.is_set()]
        if waiting:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(asyncio.gather(*waiting), max(0.0, deadline - loop.time()))
        pending = [s for s in pending if s.records is None]
        if pending:
            errors = "; ".join(s.error for s in pending if s.error) or "the first listing is still being fetched"
            raise OrgListingPending(
                f"namespace {namespace} is served from an org whose repositories are not listed "
                f"yet ({errors}); try again shortly"
            )

    def repositories_named(self, urls: Iterable[str], identity: Callable[[str], str | None]) -> list[str]:
        """The org repositories (cache keys) that any of `urls` names, by `identity` (urls.identity).

        A module's https, clone and web URLs all name its repository. The index is built once
        per listing change, not per webhook.
        """
        index = self._identities
        if index is None:
            index = self._identities = identities(self._listing.values(), identity)
            self._identity = identity
        found: dict[str, None] = {}
        for url in urls:
            key = identity(url)
            for repository in sorted(index.get(key, ())) if key is not None else ():
                found[repository] = None
        return list(found)

    def complete(self) -> bool:
        """True when every org has a listing (enumerated, or loaded from orgs.json)."""
        return all(s.records is not None for s in self._orgs)

    def report(self) -> list[OrgReport]:
        """Per org: repositories found, the modules they became, the ones ignored and why."""
        out = []
        for s in self._orgs:
            ignored = {**s.ignored, **self._shadowed.get(s.index, {})}
            modules = tuple(repo for _, repo in sorted(s.modules.items()))
            out.append(
                OrgReport(
                    org=s.config,
                    index=s.index,
                    found=len(s.records) if s.records is not None else None,
                    modules=modules,
                    ignored=tuple(sorted(ignored.items(), key=lambda kv: kv[0].lower())),
                    enumerated_at=s.enumerated_at,
                    loaded=s.loaded,
                    error=s.error,
                )
            )
        return out

    def stats(self) -> list[tuple[OrgConfig, OrgStats]]:
        """Each org's API counters, for the metrics collector."""
        return [(s.config, s.stats) for s in self._orgs]

    # ---- enumerating (orgs.refresh) and persisting (orgs.store) ---------------------------

    def open(self, session: aiohttp.ClientSession) -> None:
        """Make each org's API client on `session` (done by lifetime(); by hand for a probe)."""
        self._refresher.open(session)

    async def enumerate(self, index: int) -> bool:
        """List org `index` through its API now; False (and the last listing kept) when that fails."""
        return await self._refresher.enumerate(index)

    def refresh_soon(self, index: int) -> None:
        """Ask the org's background loop to enumerate now (coalesced with one already running)."""
        self._refresher.refresh_soon(index)

    async def flush(self) -> None:
        """Write orgs.json if the listing changed since the last write (off the event loop)."""
        await self._store.flush()

    async def load(self) -> int:
        """Read orgs.json (off the loop): the listings of orgs still configured; how many were loaded."""
        found = await self._store.read()
        loop = asyncio.get_running_loop()
        taken: list[tuple[OrgState, dict[str, RepoRecord], Evaluated | None]] = []
        for s, records, _ in found:  # on a thread: 230,000 repositories take seconds
            listing = await loop.run_in_executor(self._store.executor, by_name, records)
            taken.append((s, listing, await self.evaluated(s, listing)))
        if taken:
            async with self._rebuilding:  # every org at once: one rebuild
                await self._take(taken, None)
        for s, _, enumerated_at in found:
            s.enumerated_at = enumerated_at
            s.stats.last_success = enumerated_at
            s.loaded = True
        self._store.loaded()
        self.on_loaded.emit()
        return len(found)

    @property
    def owners(self) -> Owners:
        """Who holds each address (the application shares them between replicas)."""
        return self._owners

    def adopt_owner(self, address: str, holder: str, since: float) -> None:
        """An owner another replica recorded: when it holds an address here now, the listing is
        rebuilt (once for a burst: a reconnect reads every owner)."""
        if self._owners.adopt(address, holder, since) and not self._settling:
            self._settling = True
            self._spawn(self._settle_adopted())

    async def _settle_adopted(self) -> None:
        async with self._rebuilding:
            self._settling = False  # (adopted from here on: settled by the next rebuild)
            try:
                await self._take([], None)
            except Exception:
                log.exception("org listings: settling the owners adopted from other replicas failed")

    def _spawn(self, work: Coroutine[Any, Any, None]) -> None:
        task = asyncio.ensure_future(work)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def load_owners(self, path: Path) -> None:
        """Who holds each address, from the orgs.json at `path`, read only (`gitreg check --probe`)."""
        self._owners.load(await asyncio.get_running_loop().run_in_executor(None, read_owners, path))

    async def lifetime(self) -> AsyncIterator[None]:
        """Load orgs.json, open an API session, enumerate in the background; stop and write at shutdown.

        orgs.json is read in the background; past LOAD_BEFORE_SERVING the port opens whatever its
        size: requests for org modules wait for it (wait_listed), and enumerations start once it is read.
        """
        if not self._orgs:
            yield
            return
        self._loading = loading = asyncio.ensure_future(self._load_logged())
        running = asyncio.ensure_future(self._run_after(loading))
        await asyncio.wait({loading}, timeout=LOAD_BEFORE_SERVING)
        try:
            yield
        finally:
            for task in (running, loading, *self._tasks):
                task.cancel()
            await asyncio.gather(running, loading, *self._tasks, return_exceptions=True)
            await self._store.close()

    async def _load_logged(self) -> int:
        loaded = await self.load()
        if loaded:
            log.info(
                "org listings loaded from %s: %d module(s) from %d org(s)", self._store.path, len(self._listing), loaded
            )
        return loaded

    async def _run_after(self, loading: asyncio.Task[int]) -> None:
        """Enumerate in the background once orgs.json is read (its listings decide when each org is due)."""
        with contextlib.suppress(Exception):  # (a failed load was logged by the task; enumerate anyway)
            await asyncio.shield(loading)
        async with self._refresher.running():
            await asyncio.Event().wait()  # until cancelled at shutdown

    # ---- changing -----------------------------------------------------------------------

    async def apply(self, event: RepositoryEvent) -> int:
        """A repository webhook, as a hint: read that repository again from each concerned org's API
        and apply what the API says; how many orgs it concerned.

        The payload never sets a record: a repository the API returns is taken as the API
        describes it (wherever the payload said it was, or that it was deleted); only the API's
        404 for the repository the event names removes it. What one read cannot settle (an old
        name after a rename or transfer) is left to an enumeration, asked for at once.
        """
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
                self.refresh_soon(s.index)  # no listing to patch: the first enumeration will see it
                continue
            fetched, record = await self._described(s, event)
            if not fetched:
                continue
            if s.lock.locked():  # (before waiting for the rebuild: see OrgRefresher.enumerate's journal; by-id
                # scans of 230,000 records: on a thread)
                s.journal.append(await run_file_work(self._store.executor, change, s, s.records, event, record))
            async with self._rebuilding:  # the listing patched is the one installed now
                record = await self._patch(s, event, record)
                if before_here and event.old_full_name and event.old_full_name.lower() in (s.records or {}):
                    self.refresh_soon(s.index)  # whether the old name is gone is the listing's to say
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
        if not self.complete():  # (an org not listed yet: its claims are not all known, combined whole)
            records, record = await loop.run_in_executor(
                self._store.executor, patched, s, s.records or {}, event, found
            )
            await self._take([(s, records, None)], None)
            return record
        p = await loop.run_in_executor(self._store.executor, patch_org, s, event, found, protocols, self._listing)
        if not p.changed:
            return p.record
        # From here on no await: the addresses touched are settled and installed in one go.
        before, settled = settle_patch(self._orgs, s, p, self._owners, self._listing, self._contested)
        s.records, s.claims, s.ignored = p.records, p.claims, p.ignored
        s.stats.repositories = len(p.records)
        self._owners.install_part(settled.draft, before)
        served = Served(self._listing, self._by_repository, self._contested, self._shadowed)
        changes = install_touched(served, self._orgs, before, settled, p)
        self._generation += 1
        self._listing = served.listing
        if self._identities is not None and self._identity is not None:
            now = [repo for repo in settled.owners.values() if repo is not None]
            reindex(self._identities, self._identity, chain(*before.values()), now, self._by_repository)
        for address in changes.removed:
            self._resolved.pop(address, None)
        self._log_clashes(settled.clashes)
        self._store.changed()
        if changes:
            self.on_change.emit(changes)
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
            self.refresh_soon(s.index)
            return False, None
        return True, found

    def notify_pushed(self, repositories: Iterable[str]) -> frozenset[ModuleAddress]:
        """A tag webhook refreshed these repositories (cache keys): tell subscribers which org modules."""
        pushed = frozenset(a for url in repositories for a in self._by_repository.get(url, ()))
        if pushed:
            self.on_change.emit(OrgChanges(pushed=pushed))
        return pushed

    def take_page(self, s: OrgState, page: list[RepoRecord]) -> None:
        """A slice of org `s`'s first listing (not the last page): its modules join the listing at once
        (or, while a rebuild computes, as soon as it is installed).

        Incremental, in the page's size: the address map is copied (a C-speed dict copy), never
        rebuilt from every org's modules, so a first listing of 300 pages stays linear.
        """
        if self._deferred is not None:
            self._deferred.append((s, page))
            return
        if s.records is not None:  # a webhook's listing, or orgs.json, came first
            return
        claims, _ = evaluate(s.config, s.index, page, self.config.git.protocols)
        s.claims = [*s.claims, *claims]  # the last page's evaluation replaces them all
        added: dict[ModuleAddress, OrgRepo] = {}
        for repo in claims:
            address = repo.address
            if address in self._listing or address in added:
                continue  # a second claim: the rebuild after the last page settles it (its owner)
            holder = self._owners.holder(address)
            if holder is not None and (holder[0], holder[1].lower()) != (repo.org, repo.full_name.lower()):
                continue  # held by another repository (of an org maybe not listed yet)
            added[address] = repo
        self._generation += 1
        if not added:
            return
        new = dict(self._listing)
        new.update(added)
        self._listing = new
        for address, repo in added.items():
            self._by_repository.setdefault(repo.repository, set()).add(address)
            s.modules[address] = repo
        self._identities = None
        s.stats.modules += len(added)
        self._store.changed()
        self.on_change.emit(OrgChanges(added=frozenset(added), pushed=frozenset(added)))
        self._keep(new)

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
        async with self._rebuilding:
            await self._take([(s, records, evaluated)], since)

    async def _take(
        self, taken: list[tuple[OrgState, dict[str, RepoRecord], Evaluated | None]], since: float | None
    ) -> None:
        """Install new listings for the orgs in `taken` (none: the owners changed), the rebuild lock held.

        The combined listing is computed on a thread from a snapshot (orgs.combine), then installed
        here in one go, with no await in between: a request sees the old listing or the new one.
        When what the snapshot read changed meanwhile (owners adopted from another replica, read
        from orgs.json), it is computed again; first-listing pages wait for the install instead.
        """
        done = [(s, records, evaluated or await self.evaluated(s, records)) for s, records, evaluated in taken]
        first = any(s.records is None for s, _, _ in done)
        hint = (done[0][0].index, since) if since is not None and len(done) == 1 else None
        views = {s.index: OrgView(s.index, s.config.label, records, ev[0]) for s, records, ev in done}
        loop, orgs = asyncio.get_running_loop(), self._orgs
        while True:
            generation = (self._generation, self._owners.version)
            inputs = Inputs(
                orgs=tuple(views.get(s.index) or OrgView(s.index, s.config.label, s.records, s.claims) for s in orgs),
                owners=self._owners.draft(
                    frozenset(s.index for s in orgs if s.records is not None or s.index in views)
                ),
                old=self._listing,
                since=hint,
            )
            self._deferred = []
            try:
                combined = await loop.run_in_executor(self._store.executor, combine_paused, inputs)
            except BaseException:
                self._take_deferred()
                raise
            if generation == (self._generation, self._owners.version):
                break
            log.debug("org listings changed while they were combined; combining again")
            self._take_deferred()
        for s, records, (claims, ignored) in done:
            s.records, s.claims, s.ignored = records, claims, ignored
            s.stats.repositories = len(records)
        self._install(combined, announce=first and self.complete())
        self._take_deferred()

    def _take_deferred(self) -> None:
        """Take the first-listing pages that arrived while a rebuild computed."""
        deferred, self._deferred = self._deferred or [], None
        for s, page in deferred:
            self.take_page(s, page)

    def _install(self, combined: Combined, announce: bool) -> None:
        """Take a rebuild's outcome (by reference swaps); tell subscribers what changed (and, with
        `announce`, that every org is listed now, even when its last page changed nothing)."""
        self._generation += 1
        self._owners.install(combined.owners)
        self._listing = combined.listing
        self._by_repository = combined.by_repository
        self._identities = None
        self._shadowed = combined.conflicts
        self._contested = combined.contested
        for s in self._orgs:
            s.modules = combined.modules[s.index]
            s.stats.modules = len(s.modules)
            s.stats.conflicts = len(combined.conflicts.get(s.index, ()))
        for address in combined.changes.removed:
            self._resolved.pop(address, None)
        self._log_clashes(combined.clashes)
        changes = combined.changes
        if changes or announce or self._owners.dirty:
            self._store.changed()  # (the owners' flag is cleared by the write)
            if changes or announce:
                self.on_change.emit(changes)

    def _log_clashes(self, clashes: Iterable[Clash]) -> None:
        """Log each conflict once (by address, claimant and owner), however often it is settled again."""
        for key, repo, why in clashes:
            if key not in self._clashes_logged:
                self._clashes_logged.add(key)
                log.warning(
                    "org %s: %s claims %s, not served: %s",
                    self.config.orgs[repo.org].label,
                    repo.full_name[:200],
                    repo.address,
                    why,
                )

    @staticmethod
    def _keep(listing: Mapping[ModuleAddress, OrgRepo]) -> None:
        """A page of a large listing just taken: out of the collector's walks (a full collection walking
        it stopped the loop for 100 ms and more); a rebuild's listing is kept so on its thread."""
        if len(listing) >= KEEP_LONG_LIVED_AT:
            keep_long_lived()

    def follow(self, repos: Iterable[OrgRepo], gone: Iterable[ModuleAddress], complete: bool) -> None:
        """In the index process: the serving process's listing changes (it enumerates, this one never does).

        `complete`: every org has its first listing there (until then nothing is dropped from the index).
        """
        gone = list(gone)
        for address in gone:
            self._resolved.pop(address, None)
        new = followed(self._listing, self._by_repository, repos, gone)
        if complete:
            for s in self._orgs:
                if s.records is None:
                    s.records = {}  # listed by the serving process: nothing to wait for here
        self._generation += 1
        self._listing = new
        self._identities = None
