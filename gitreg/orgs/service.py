"""Org mode's facade: the repositories of GitLab groups and GitHub organizations, served as modules.

`OrgCatalog` is the one object the rest of gitreg asks about org mode. It holds the current
listing of every `[[orgs]]` entry (module address -> `OrgRepo`, orgs.listing): requests read
it (memory only), enumerations (orgs.refresh) and rebuilds (orgs.rebuild) and repository
webhooks (orgs.repo_events) change it, and orgs.json (orgs.store) keeps its last good state,
loaded at start so a restart serves the known modules before the API answers. An API failure
never empties a listing: the last good one stays. The registry asks `resolve()` for an org
module, built as a `ResolvedModule` with a synthetic `ModuleRule`, so org modules are served
exactly like rule modules. Subscribers (the module index) hear of every added, changed or
removed address (`on_change`). Everything here runs on the event loop, except the file's I/O
and what grows with the listing (evaluating records, combining the orgs' claims), each on a
thread from a snapshot, then installed by reference swaps.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Callable, Coroutine, Iterable, Mapping
from concurrent.futures import Executor
from pathlib import Path
from typing import Any

import aiohttp

from gitreg.config.model import Config, OrgConfig
from gitreg.config.rules import ResolvedModule
from gitreg.core.errors import ModuleNotFound
from gitreg.core.events import Signal
from gitreg.core.names import ModuleAddress
from gitreg.forges.base import OrgStats
from gitreg.forges.payloads import RepositoryEvent
from gitreg.forges.records import RepoRecord
from gitreg.orgs.listing import OrgListing
from gitreg.orgs.model import OrgChanges, OrgListingPending, OrgRepo, OrgReport, OrgState, by_name
from gitreg.orgs.owners import Owners
from gitreg.orgs.rebuild import OrgRebuilds, Taken
from gitreg.orgs.refresh import OrgRefresher
from gitreg.orgs.repo_events import RepositoryEvents
from gitreg.orgs.store import OrgStore, read_owners

log = logging.getLogger(__name__)

# A request for an org namespace whose first listing is still being fetched waits this long
# for it (only before the very first listing; after that, requests never wait).
FIRST_LISTING_WAIT = 8.0
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
        self._owners = Owners(self._orgs)
        self._tasks: set[asyncio.Task[None]] = set()
        # orgs.json was read: its owners are known (to publish them to the other replicas).
        self.on_loaded: Signal[[]] = Signal(failures=(log, "an org listing subscriber failed"))
        # path None: not persisted (gitreg check --probe)
        self._store = OrgStore(path, executor, self._orgs, self._owners)
        self._listing = OrgListing(config, self._orgs, self._owners, self._store)
        # Told each change of the listing, on the event loop (a failing listener is logged, the rest still run).
        self.on_change: Signal[[OrgChanges]] = self._listing.on_change
        self._rebuilds = OrgRebuilds(config, self._orgs, self._owners, self._listing, self._store, self._spawn)
        self._refresher = OrgRefresher(self._orgs, self._rebuilds)
        self._events = RepositoryEvents(
            config, self._orgs, self._listing, self._rebuilds, self._store, self._refresher.refresh_soon
        )
        self._loading: asyncio.Task[int] | None = None  # orgs.json being read, after the port opened

    # ---- reading (requests) -----------------------------------------------------------

    def resolve(self, address: ModuleAddress) -> ResolvedModule | None:
        """The org module at `address` as a ResolvedModule (a synthetic rule), or None."""
        return self._listing.resolve(address)

    def get(self, address: ModuleAddress) -> OrgRepo | None:
        """The org repository serving `address`, or None."""
        return self._listing.by_address.get(address)

    def modules(self) -> Mapping[ModuleAddress, OrgRepo]:
        """Every org module now (a read-only view; replaced, never mutated, on change)."""
        return self._listing.by_address

    def repository_names(self) -> list[tuple[str, str]]:
        """(API URL, full name) of every repository the orgs' last listings hold (providers match them)."""
        return [
            (s.config.api_url, r.full_name) for s in self._orgs if s.records is not None for r in s.records.values()
        ]

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

    def repositories_named(self, urls: Iterable[str], host_path: Callable[[str], str | None]) -> list[str]:
        """The org repositories (cache keys) that any of `urls` names, by `host_path` (urls.host_path)."""
        return self._listing.repositories_named(urls, host_path)

    def listings(self) -> list[tuple[OrgConfig, list[RepoRecord]]]:
        """Each listed org's repositories, modules or not (a snapshot of its records): what the usage scan reads."""
        return [(s.config, list(s.records.values())) for s in self._orgs if s.records is not None]

    def complete(self) -> bool:
        """True when every org has a listing (enumerated, or loaded from orgs.json)."""
        return all(s.records is not None for s in self._orgs)

    def report(self) -> list[OrgReport]:
        """Per org: repositories found, the modules they became, the ones ignored and why."""
        out = []
        for s in self._orgs:
            ignored = {**s.ignored, **self._listing.shadowed.get(s.index, {})}
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
        taken: Taken = []
        for s, records, _ in found:  # on a thread: 230,000 repositories take seconds
            listing = await loop.run_in_executor(self._store.executor, by_name, records)
            taken.append((s, listing, await self._rebuilds.evaluated(s, listing)))
        if taken:
            async with self._rebuilds.lock:  # every org at once: one rebuild
                await self._rebuilds.take(taken, None)
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
        self._rebuilds.adopt_owner(address, holder, since)

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
                "org listings loaded from %s: %d module(s) from %d org(s)",
                self._store.path,
                len(self._listing.by_address),
                loaded,
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
        and apply what the API says (orgs.repo_events); how many orgs it concerned."""
        return await self._events.apply(event)

    def notify_pushed(self, repositories: Iterable[str]) -> frozenset[ModuleAddress]:
        """A tag webhook refreshed these repositories (cache keys): tell subscribers which org modules."""
        return self._listing.pushed(repositories)

    def follow(self, repos: Iterable[OrgRepo], gone: Iterable[ModuleAddress], complete: bool) -> None:
        """In the index process: the serving process's listing changes (it enumerates, this one never does).

        `complete`: every org has its first listing there (until then nothing is dropped from the index).
        """
        self._listing.follow(repos, gone, complete)
