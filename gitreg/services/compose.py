"""The composition root: `Services`, the services built from the config, in dependency order.

A plain object (boring-registry's `cmd/server.go`): `Services(config, role)` is made at once,
`async with services.running():` builds every resource (each handed what it needs when it is
constructed) and closes them after, in reverse, each before what it was built with. The role
(index.process.Role) decides here, and only here, which resources a process has. The web layer
(web/app.py) wires HTTP to it; the index process (indexer.py) runs it with no HTTP at all.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import tempfile
import time
from collections.abc import AsyncIterator, Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING

import aiohttp

from gitreg.config.model import Config
from gitreg.core.errors import GitregError
from gitreg.core.names import ModuleAddress
from gitreg.core.urls import origin_label
from gitreg.git.mirror import MirrorGit
from gitreg.git.pool import GitPool, Waiters
from gitreg.git.remote import GitAdapter, TagList
from gitreg.git.runner import GitRunner
from gitreg.git.verify import SignatureGit
from gitreg.index.browse import BrowseService
from gitreg.index.details import DetailsService
from gitreg.index.files import ModuleFiles
from gitreg.index.model import ChangeLog, OrgInfo
from gitreg.index.process import CommandPipe, EarlyStart, IndexProcess, Role
from gitreg.index.protocol import Seed
from gitreg.index.store import ModuleIndex
from gitreg.observability.collectors import ArchiveCollector, IndexCollector
from gitreg.observability.lines import JsonFormatter
from gitreg.observability.metrics import Lifecycle, Metrics
from gitreg.orgs.service import OrgCatalog
from gitreg.orgs.store import FILE_NAME as ORGS_FILE
from gitreg.registry.catalog import FILE_NAME as CATALOG_FILE
from gitreg.registry.catalog import Catalog
from gitreg.registry.declared import FILE as DECLARATIONS_FILE
from gitreg.registry.declared import FLUSH_SECONDS, Declarations
from gitreg.registry.publish import Publisher
from gitreg.registry.resolve import Resolver
from gitreg.registry.service import Registry
from gitreg.registry.signatures import Signatures
from gitreg.registry.tags import TagCache
from gitreg.replicas.base import SharedState
from gitreg.replicas.factory import make_shared
from gitreg.replicas.memory import MemoryShared
from gitreg.storage.archives import ArchiveBuilder, ArchiveStore
from gitreg.storage.budget import StorageBudget
from gitreg.storage.files import keep_long_lived
from gitreg.storage.mirrors import MirrorStore
from gitreg.storage.pins import TagPins

if TYPE_CHECKING:  # imported where built: the index process imports none of these (#33)
    from gitreg.identity.door import Identities
    from gitreg.identity.oauth import LoginFlows
    from gitreg.providers.service import Providers
    from gitreg.registry.provenance import Provenances
    from gitreg.usage.installs import Installs
    from gitreg.usage.service import Usage

log = logging.getLogger(__name__)


class Services:
    """Every service of one process, built from an already-validated config (see the module docstring).

    `role`: what `gitreg serve` runs (index.process.serve_role: SERVE, or ALL with the index off)
    or `python -m gitreg.indexer` (INDEX, with its `seed`). `clock` is what the tag cache and the
    identities measure ages with. The attributes below exist while `running()`.
    """

    # What the web layer's handlers ask (web/keys.py names them).
    pool: GitPool
    git: GitAdapter
    shared: SharedState
    cache: TagCache
    orgs: OrgCatalog
    catalog: Catalog
    identities: Identities
    registry: Registry
    publisher: Publisher
    mirrors: MirrorStore
    archives: ArchiveStore
    details: DetailsService
    index: ModuleIndex
    browse: BrowseService
    providers: Providers  # not in the index process
    installs: Installs  # observed CI installs; not in the index process
    usage: Usage  # not in the index process
    provenance: Provenances  # not in the index process
    index_process: IndexProcess  # Role.SERVE only
    # What later services are built with.
    home: str
    files: ThreadPoolExecutor
    pins: TagPins
    budget: StorageBudget
    resolver: Resolver
    hosts_http: Callable[[], aiohttp.ClientSession]
    logins: LoginFlows | None = None
    signatures: Signatures | None = None  # [signing] with keys, in the serving process

    def __init__(
        self,
        config: Config,
        role: Role,
        clock: Callable[[], float] = time.monotonic,
        seed: Seed | None = None,
        wall_clock: Callable[[], float] = time.time,
        early: EarlyStart | None = None,
    ) -> None:
        if (role is Role.INDEX) != (seed is not None):
            raise ValueError("the index process (Role.INDEX), and it alone, starts from a seed")
        if role is Role.ALL and config.index.enabled:  # a set-up gitreg never runs (#32)
            raise ValueError("with the index on, the index process builds it: Role.SERVE, not Role.ALL")
        self.config = config
        self.role = role
        self.clock = clock
        self.wall_clock = wall_clock  # Unix time: what is kept for days (observed installs)
        self._seed = seed
        self._early = early  # Role.SERVE: its index process, started already (cli/server.py)
        self.metrics = Metrics()  # this process's own registry: no process-wide state
        self.lifecycle = Lifecycle()

    @property
    def seed(self) -> Seed:
        """The index process's start (Role.INDEX only)."""
        if self._seed is None:
            raise RuntimeError("only the index process (Role.INDEX) has a seed")
        return self._seed

    @contextlib.asynccontextmanager
    async def running(self) -> AsyncIterator[Services]:
        """Every service built, in dependency order; closed at the end, each before those it was built with."""
        async with contextlib.AsyncExitStack() as stack:
            for context in self._contexts():
                await stack.enter_async_context(contextlib.asynccontextmanager(context)())
            yield self

    def _contexts(self) -> list[Callable[[], AsyncIterator[None]]]:
        """The resources this role has, in dependency order (each closes before those it was built with)."""
        role = self.role
        contexts = [self._git_home, self._file_threads, self._git_pool, self._git, self._shared, self._pins]
        contexts += [self._budget, self._queued_git, self._tags, self._orgs, self._mirrors_and_archives]
        contexts += [self._catalog, self._hosts_http]
        if role is not Role.INDEX:  # the serving process signs people in, asks who is calling, sees installs
            contexts += [self._logins, self._identities, self._providers, self._installs]
        contexts += [self._signatures, self._registry]
        # The serving process enumerates the orgs (and scans their repositories) and answers details.
        if role is not Role.INDEX:
            contexts += [self._org_listings, self._usage, self._provenance]
        contexts += [self._details, self._index]
        if role is Role.SERVE:
            contexts.append(self._index_process)
        if role is not Role.INDEX:  # the mirrors are the serving process's (scanned after the slower ones)
            contexts.append(self._storage_scan)
        contexts.append(self._readiness)  # keep last: ready only when every service above is up
        return contexts

    def _storage(self) -> Path:
        return Path(self.config.storage.path)

    async def _git_home(self) -> AsyncIterator[None]:
        """A HOME of gitreg's own for git (its config, its credential helper); removed last."""
        home = tempfile.TemporaryDirectory(prefix="gitreg-home-")
        self.home = home.name
        yield
        home.cleanup()

    async def _file_threads(self) -> AsyncIterator[None]:
        """gitreg's own file work (pin records, sizes, renames, removals): a few threads of its own,
        apart from the git pool's slots and from the default executor aiohttp opens files in."""
        files = self.files = ThreadPoolExecutor(max_workers=4, thread_name_prefix="gitreg-files")
        yield
        files.shutdown(wait=True)  # pin records and removals finish: nothing half-written

    async def _git_pool(self) -> AsyncIterator[None]:
        """The bounded pool every git call waits in (queued work is dropped by _queued_git)."""
        git = self.config.git
        pool = self.pool = GitPool(git.max_concurrency, git.max_queue, git.max_per_host)
        self.metrics.watch_pool(pool)
        yield
        pool.shutdown()

    async def _git(self) -> AsyncIterator[None]:
        """The git adapter: the runner of every git process."""
        config = self.config
        adapter = self.git = GitAdapter(GitRunner(config.git, config.credentials, self.home))
        self.metrics.watch_git(adapter.runner.running)
        yield
        # In-flight requests had their grace period (the runner's shutdown_timeout): git still
        # talking to a host now serves nobody (a background refresh, a cancelled request), so it
        # is killed with its helpers instead of holding shutdown up to [git] timeout_seconds.
        if killed := adapter.runner.kill_running():
            log.info("shutdown: stopped %d running git process(es)", killed)

    async def _shared(self) -> AsyncIterator[None]:
        """What replicas share: Redis when configured, else this process's memory (the index process
        has no Redis of its own: its serving process is the replica, indexer.py)."""
        config = self.config
        index_process = self.role is Role.INDEX
        shared = self.shared = (
            MemoryShared() if index_process else make_shared(config.cache, config.git.timeout_seconds)
        )
        await shared.start()
        self.metrics.watch_shared(shared)
        yield
        await shared.close()

    async def _pins(self) -> AsyncIterator[None]:
        """The commit each served tag was first served at; read (and compacted) off the event loop.

        The index process serves no download, so pins nothing: it must not compact the serving
        process's file, and has one of its own.
        """
        index_process = self.role is Role.INDEX
        path = Path(self.home, "tagpins.jsonl") if index_process else self._storage() / "tagpins.jsonl"
        files = self.files
        pins = self.pins = await asyncio.get_running_loop().run_in_executor(files, TagPins, path, files)
        yield
        await pins.close()

    async def _budget(self) -> AsyncIterator[None]:
        """One [storage] max_bytes over mirrors and archives together."""
        budget = self.budget = StorageBudget(self.config.storage.max_bytes)
        yield
        await budget.close()

    async def _queued_git(self) -> AsyncIterator[None]:
        """At shutdown, work still waiting for a git slot (archive builds, details) fails instead of
        starting: before the stores it would write to close, after the tag cache stopped."""
        yield
        if dropped := self.pool.close():
            log.info("shutdown: dropped %d queued git call(s)", dropped)

    async def _tags(self) -> AsyncIterator[None]:
        """The tag cache: a miss goes through the git pool (with Redis, the other replicas' list first)."""
        config, pool, shared = self.config, self.pool, self.shared
        ls_remote = self.metrics.instrument_ls_remote(self.git.ls_remote_tags)

        async def load(url: str, waiters: Waiters) -> TagList:
            return await pool.run(ls_remote, url, host=origin_label(url), waiters=waiters)

        # With Redis, a miss asks the other replicas' shared list first (one git call across all of them).
        cache = self.cache = TagCache(
            config.cache, lambda url, waiters: shared.load_tags(url, lambda key: load(key, waiters)), self.clock
        )
        self.metrics.watch_cache(cache)
        yield
        await cache.close()

    async def _orgs(self) -> AsyncIterator[None]:
        """The org listings; enumerated by _org_listings, or (index process) told by the serving process."""
        orgs = self.orgs = OrgCatalog(self.config, self._storage() / ORGS_FILE)
        if self.role is Role.INDEX:  # the serving process enumerates, and tells it of each change
            orgs.follow(self.seed.orgs, (), self.seed.orgs_complete)
        else:  # with Redis, owners are shared like pins: the earliest holder on any replica wins
            shared = self.shared
            if shared.is_shared:  # (alone: 30,000 new owners after a first listing, and no call for each)
                orgs.owners.on_held.connect(shared.publish_owner)
            shared.on_owner.connect(orgs.adopt_owner)
            orgs.on_loaded.connect(lambda: shared.share_owners(orgs.owners.entries))
        self.metrics.watch_orgs(orgs)
        yield

    async def _catalog(self) -> AsyncIterator[None]:
        """The one resolver (what serves an address), and the catalog of listable modules and downloads.

        In Role.INDEX the catalog is not persisted: the serving process keeps it, and gives it the modules.
        """
        config, shared = self.config, self.shared
        resolver = self.resolver = Resolver(config, self.orgs)
        catalog = self.catalog = Catalog(config, self._storage() / CATALOG_FILE, resolver, shared)
        shared.on_downloads.connect(catalog.downloads_changed)
        if self.role is Role.INDEX:  # the index process's catalog is given, never written
            for address in self.seed.remembered:
                with contextlib.suppress(GitregError):
                    catalog.remember(resolver.resolve(address))
            yield
            return
        async for _ in catalog.lifetime():
            yield

    async def _hosts_http(self) -> AsyncIterator[None]:
        """One HTTP session for every call toward the Git hosts and CI issuers on behalf of identities (who a
        token is, can it read, the login flows, refreshes, JWKS): opened on first use, closed here, after
        the identities and logins that use it."""
        sessions: list[aiohttp.ClientSession] = []

        def session() -> aiohttp.ClientSession:
            if not sessions:
                sessions.append(aiohttp.ClientSession(auto_decompress=True, trust_env=False))
            return sessions[0]

        self.hosts_http = session
        yield
        for opened in sessions:
            await opened.close()

    async def _identities(self) -> AsyncIterator[None]:
        """Who a bearer token is and what it may read (asking the Git hosts through the hosts' HTTP session)."""
        from gitreg.identity.door import Identities

        identities = self.identities = Identities(
            self.config, self.resolver, self.shared, self.hosts_http, self.logins, self.clock
        )
        self.metrics.watch_identities(identities.api_stats)
        yield
        identities.close()

    async def _providers(self) -> AsyncIterator[None]:
        """Providers served from releases (`[[providers]]`): services/release_providers.py."""
        from gitreg.services.release_providers import running_providers

        names = self.orgs.repository_names
        providers = running_providers(
            self.config, self._storage(), self.budget, self.cache, self.mirrors, self.git, self.pool, self.clock, names
        )
        async with providers as self.providers:
            yield

    async def _installs(self) -> AsyncIterator[None]:
        """Observed CI installs (`Installs.of(address)`): in memory, written to storage in batches, shared
        with the other replicas through Redis (when configured)."""
        from gitreg.usage.installs import FILE_NAME, Installs

        shared = self.shared
        installs = self.installs = Installs(self._storage() / FILE_NAME, shared.installs, self.wall_clock)
        shared.on_reconnect.connect(installs.reconnected)  # Redis may have lost them: sent again
        async for _ in installs.lifetime():
            yield

    async def _registry(self) -> AsyncIterator[None]:
        """The registry service (`terraform init`'s path) and the publisher of repository changes."""
        cache, shared, catalog = self.cache, self.shared, self.catalog
        resolver, signatures = self.resolver, self.signatures
        declarations = Declarations(
            self.mirrors,
            None if self.role is Role.INDEX else self._storage() / DECLARATIONS_FILE,
            self.files,
            self.config.cache.error_retry_seconds,
            self.clock,
        )
        await declarations.load()
        self.metrics.watch_declarations(declarations)
        # The index process serves nothing: it reads no .gitreg.toml (the serving process does).
        served = None if self.role is Role.INDEX else declarations
        self.registry = Registry(
            self.config, resolver, cache, self.pins, shared, catalog, self.archives, signatures, served
        )
        cache.on_fetched.connect(self.registry.tags_fetched)
        publisher = self.publisher = Publisher(self.config, cache, shared, self.orgs)
        shared.on_invalidate.connect(publisher.changed_elsewhere)
        shared.on_reconnect.connect(publisher.reconnected)
        # The pins on disk are the truth: published again at every (re)connect, an earlier one adopted.
        shared.on_pin.connect(self.pins.adopt)
        shared.share_pins(self.pins.entries, self.config.git.allow_moved_tags)
        try:
            if declarations.state is None:
                yield
            else:
                async with declarations.state.flushing(FLUSH_SECONDS):
                    yield
        finally:
            await declarations.close()

    async def _signatures(self) -> AsyncIterator[None]:
        """[signing] with keys, in the serving process: which versions a trusted key signed (registry.signatures)."""
        if self.role is Role.INDEX or not self.config.signing.keys:
            yield
            return
        signatures = self.signatures = Signatures(
            self.config,
            self._storage() / "signatures",
            SignatureGit(self.mirrors.git),
            self.pool,
            self.git.tag_objects,
            self.shared,
            self.files,
        )
        await signatures.start()
        yield
        await signatures.close()

    async def _provenance(self) -> AsyncIterator[None]:
        """What pages and details say of a version's commit, archive sha256 and moved tag (registry/provenance.py)."""
        from gitreg.registry.provenance import Provenances
        from gitreg.storage.moved import MOVED_FILE, MovedTags

        moved = MovedTags(self._storage() / MOVED_FILE, self.files)
        await moved.load()
        self.provenance = Provenances(self.config, self.registry, self.pins, self.shared, moved, self.archives)
        self.pins.on_moved.connect(self.provenance.noticed_by_download)
        async with moved.flushing():
            yield

    async def _mirrors_and_archives(self) -> AsyncIterator[None]:
        """Bare mirrors and archive builds, in [storage] path, within one budget."""
        config, pool, files = self.config, self.pool, self.files
        storage = self._storage()
        index_process = self.role is Role.INDEX
        pins = self.pins
        mirrors = self.mirrors = MirrorStore(
            storage / "mirrors",
            MirrorGit(self.git),
            pool,
            files,
            self.budget,
            config.cache.error_retry_seconds,
            pins.commits,
            scratch_only=index_process,
        )
        await mirrors.prepare()  # a directory listing; the mirrors are cleaned and measured by _storage_scan
        archives = self.archives = ArchiveStore(
            storage / "archives", mirrors, ArchiveBuilder(mirrors.git), pool, config.storage.max_bytes, files
        )
        archive_mode = any(r.download == "archive" for r in config.modules) or any(
            o.download == "archive" for o in config.orgs
        )
        if archive_mode and not index_process:  # its prepare() removes builds cut short: the serving process's
            await archives.prepare()
        self.metrics.registry.register(ArchiveCollector(archives, pins))
        yield

    async def _org_listings(self) -> AsyncIterator[None]:
        """Org listings: loaded from disk, then enumerated in the background until shutdown (not in the index
        process)."""
        async for _ in self.orgs.lifetime():
            yield

    async def _usage(self) -> AsyncIterator[None]:
        """ "Used by": every repository the orgs list, read in the background ([usage] scan)."""
        from gitreg.usage.service import Usage

        orgs = self.orgs
        usage = self.usage = Usage(
            self.config, orgs.listings, orgs.complete, self.pool, self.git, self._storage(), self.files
        )
        if usage.enabled:
            orgs.on_change.connect(usage.changed)
        async for _ in usage.lifetime():
            yield

    async def _details(self) -> AsyncIterator[None]:
        """Module details read from tagged trees, by parse worker processes."""
        mirrors = self.mirrors
        parse_seconds = self.config.index.parse_seconds
        details = self.details = DetailsService(mirrors, mirrors.git, self.pool, parse_seconds=parse_seconds)
        yield
        await details.close()  # its parse worker processes

    async def _index(self) -> AsyncIterator[None]:
        """The module index, and the browse API's facade over it.

        In Role.SERVE the index process builds the index (its IndexProcess is created here, started
        by _index_process); in Role.INDEX this is that process's index.
        """
        config, role, catalog, orgs, registry = self.config, self.role, self.catalog, self.orgs, self.registry

        def org_info(address: ModuleAddress) -> OrgInfo | None:
            repo = orgs.get(address)
            if repo is None:
                return None
            return OrgInfo(source=repo.web_url, description=repo.description, topics=repo.topics, marker=repo.pushed_at)

        # In the index process, from the start: the serving process is sent every change, and
        # forgets what is gone too.
        changes = ChangeLog() if role is Role.INDEX else None

        def gone(address: ModuleAddress) -> None:
            catalog.forget(address)
            if changes is not None:
                changes.forget(address)

        # With Redis: one replica indexes (the lease) and publishes; the others load what it wrote.
        # (The index process has no Redis: the serving process holds its place, see indexer.py.)
        seed = self.seed if role is Role.INDEX else None
        commands = CommandPipe() if role is Role.SERVE else None  # to the index process
        index = self.index = ModuleIndex(
            self._storage(),
            sources=catalog.sources,
            resolve=catalog.listable,
            versions=registry.versions,
            details=self.details,
            refresh_seconds=config.cache.ttl_seconds,
            org_info=org_info,
            enabled=config.index.enabled,
            listed=orgs.complete,
            builds=role is not Role.SERVE,
            leading=(lambda: seed.leading) if seed is not None else self.shared.leading,
            changes=changes,
            on_wanted=commands.want if commands is not None else None,
        )
        process: IndexProcess | None = None
        if commands is not None:
            log_json = any(isinstance(h.formatter, JsonFormatter) for h in logging.getLogger().handlers)
            process = self.index_process = IndexProcess(
                config, index, catalog, orgs, self.cache, self.shared, commands, log_json, self._early
            )
        index.on_gone.connect(gone)
        self._follow_changes(index, process)
        mirrors = self.mirrors
        self.browse = BrowseService(index, catalog, registry, ModuleFiles(mirrors, mirrors.git, self.pool))
        self.metrics.registry.register(IndexCollector(index, (lambda: process.starts) if process is not None else None))
        async for _ in index.lifetime():
            yield

    def _follow_changes(self, index: ModuleIndex, process: IndexProcess | None) -> None:
        """What the index (or, in Role.SERVE, the index process) is told of.

        A wildcard rule's module becomes listable when it is first served; any fetched tag list
        (a webhook, a `terraform init` after the TTL) may change what the index shows; an org's
        enumeration or repository webhook says which of its modules were added, pushed to or removed.
        """
        catalog, cache, orgs, shared = self.catalog, self.cache, self.orgs, self.shared
        if process is not None:  # ... all of which the index process is told
            catalog.on_new.connect(process.remember)
            cache.on_fetched.connect(process.fetched)
            orgs.on_change.connect(process.orgs_changed)
        elif index.enabled:  # (the index off, nothing builds: not even a set of 230,000 org changes is made)
            catalog.on_new.connect(lambda address: index.notice([address]))
            cache.on_fetched.connect(index.notice_repository)
            orgs.on_change.connect(lambda changes: index.notice(changes.all))
        index.on_written.connect(shared.publish_index)
        shared.on_index.connect(process.adopt if process is not None else index.adopt)
        shared.follow_index()

    async def _index_process(self) -> AsyncIterator[None]:
        """Role.SERVE: the index process, given its seed once the index it feeds is up (spawned here, or
        before the application was built: cli/server.py)."""
        if not self.config.index.enabled:
            yield
            return
        async for _ in self.index_process.lifetime():
            yield

    async def _storage_scan(self) -> AsyncIterator[None]:
        """The mirrors an earlier run left: cleaned up, measured and counted in [storage] max_bytes in the
        background, so the port opens at once (2,000 mirrors take seconds to walk)."""

        async def scan() -> None:
            try:
                await self.mirrors.scan()
            except Exception:
                log.exception("the scan of [storage] path/mirrors failed; mirrors it did not reach are not counted")

        task = asyncio.get_running_loop().create_task(scan())
        yield
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)

    async def _logins(self) -> AsyncIterator[None]:
        """`terraform login` and "Sign in with ...": the issued tokens (on disk, shared through Redis when
        configured) and the OAuth flows, talking to the Git hosts through the hosts' HTTP session."""
        from gitreg.identity import issued, oauth

        config = self.config
        key = config.auth.signing_key
        if key is None or not any(f.oauth for f in config.auth.forges):
            yield
            return
        http = self.hosts_http()
        # Shared with the other replicas on the replicas' own Redis connection (None: this replica alone).
        tokens = issued.IssuedTokens(config, self._storage() / issued.FILE_NAME, http, self.shared.logins)
        await tokens.load()
        self.shared.on_reconnect.connect(tokens.reconnected)  # the file's revocations back in Redis
        tokens.start_watching()  # revocations of tokens this replica never saw, from the log in Redis
        self.logins = oauth.LoginFlows(config.auth.forges, key, tokens, http)  # the identity door's
        yield
        await tokens.close()

    async def _readiness(self) -> AsyncIterator[None]:
        """Last cleanup context: ready once everything before it started; first to go at shutdown."""
        keep_long_lived()  # index.json, orgs.json and the catalog, loaded: out of the collector's walks
        self.lifecycle.up(self.index, self.shared)
        yield
        self.lifecycle.down()
