"""The application factory: the one composition root, one cleanup context per resource.

Each resource is created in dependency order, handed everything it needs when it is
constructed, and closed after `yield`; aiohttp unwinds the contexts in reverse, so a resource
closes before what it depends on. The role (index.process.Role) decides here, and only here,
which contexts an application has.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import secrets
import tempfile
import time
from collections.abc import AsyncIterator, Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import aiohttp
from aiohttp import web

from gitreg.config.model import Config
from gitreg.core.errors import GitregError
from gitreg.core.names import ModuleAddress
from gitreg.core.urls import origin_label
from gitreg.git.mirror import MirrorGit
from gitreg.git.pool import GitPool, Waiters
from gitreg.git.remote import GitAdapter, TagList
from gitreg.git.runner import GitRunner
from gitreg.identity.issued import FILE_NAME as ISSUED_FILE
from gitreg.identity.issued import IssuedTokens
from gitreg.identity.oauth import LoginFlows
from gitreg.identity.service import Identities
from gitreg.identity.static import TokenChecker
from gitreg.index.browse import BrowseService
from gitreg.index.details import DetailsService
from gitreg.index.files import ModuleFiles
from gitreg.index.model import ChangeLog, OrgInfo
from gitreg.index.process import CommandPipe, IndexProcess, Role
from gitreg.index.protocol import Seed
from gitreg.index.store import ModuleIndex
from gitreg.observability.collectors import ArchiveCollector, IndexCollector
from gitreg.observability.logs import JsonFormatter, ServerLogger
from gitreg.observability.metrics import Lifecycle, Metrics
from gitreg.orgs.catalog import OrgCatalog
from gitreg.orgs.store import FILE_NAME as ORGS_FILE
from gitreg.registry.catalog import FILE_NAME as CATALOG_FILE
from gitreg.registry.catalog import Catalog
from gitreg.registry.publish import Publisher
from gitreg.registry.resolve import Resolver
from gitreg.registry.service import Registry
from gitreg.registry.tags import TagCache
from gitreg.replicas.factory import make_shared
from gitreg.replicas.memory import MemoryShared
from gitreg.storage.archives import ArchiveBuilder, ArchiveStore
from gitreg.storage.budget import StorageBudget
from gitreg.storage.files import keep_long_lived
from gitreg.storage.mirrors import MirrorStore
from gitreg.storage.pins import TagPins
from gitreg.web.api.browse import browse_routes
from gitreg.web.api.modules import routes
from gitreg.web.api.oauth import oauth_routes
from gitreg.web.api.webhooks import webhook_routes
from gitreg.web.keys import (
    ARCHIVES,
    AUTH,
    BROWSE,
    CACHE,
    CATALOG,
    CLOCK,
    CONFIG,
    DETAILS,
    GIT,
    GIT_POOL,
    IDENTITIES,
    INDEX,
    INDEX_PROCESS,
    LIFECYCLE,
    LOGIN_TOKENS,
    LOGINS,
    METRICS,
    MIRRORS,
    ORGS,
    PUBLISHER,
    REGISTRY,
    ROLE,
    SEED,
    SHARED,
    SIGNER,
)
from gitreg.web.pages.views import add_ui
from gitreg.web.routing import Routes
from gitreg.web.signing import UrlSigner

log = logging.getLogger(__name__)

# The composition's own resources: what later contexts are built with, not what handlers read.
_HOME: web.AppKey[str] = web.AppKey("git_home")
_FILES: web.AppKey[ThreadPoolExecutor] = web.AppKey("file_threads")
_PINS: web.AppKey[TagPins] = web.AppKey("tag_pins")
_BUDGET: web.AppKey[StorageBudget] = web.AppKey("storage_budget")
_RESOLVER: web.AppKey[Resolver] = web.AppKey("resolver")
# The HTTP session toward the Git hosts (their APIs and OAuth) and the CI issuers, opened on first use.
_HOSTS_HTTP: web.AppKey[Callable[[], aiohttp.ClientSession]] = web.AppKey("hosts_http")


def _storage(app: web.Application) -> Path:
    return Path(app[CONFIG].storage.path)


async def _git_home(app: web.Application) -> AsyncIterator[None]:
    """A HOME of gitreg's own for git (its config, its credential helper); removed last."""
    home = tempfile.TemporaryDirectory(prefix="gitreg-home-")
    app[_HOME] = home.name
    yield
    home.cleanup()


async def _file_threads(app: web.Application) -> AsyncIterator[None]:
    """gitreg's own file work (pin records, sizes, renames, removals): a few threads of its own,
    apart from the git pool's slots and from the default executor aiohttp opens files in."""
    files = app[_FILES] = ThreadPoolExecutor(max_workers=4, thread_name_prefix="gitreg-files")
    yield
    files.shutdown(wait=True)  # pin records and removals finish: nothing half-written


async def _git_pool(app: web.Application) -> AsyncIterator[None]:
    """The bounded pool every git call waits in (queued work is dropped by _queued_git)."""
    git = app[CONFIG].git
    pool = app[GIT_POOL] = GitPool(git.max_concurrency, git.max_queue, git.max_per_host)
    app[METRICS].watch_pool(pool)
    yield
    pool.shutdown()


async def _git(app: web.Application) -> AsyncIterator[None]:
    """The git adapter: the runner of every git process."""
    config = app[CONFIG]
    adapter = app[GIT] = GitAdapter(GitRunner(config.git, config.credentials, app[_HOME]))
    app[METRICS].watch_git(adapter.runner.running)
    yield
    # In-flight requests had their grace period (the runner's shutdown_timeout): git still
    # talking to a host now serves nobody (a background refresh, a cancelled request), so it
    # is killed with its helpers instead of holding shutdown up to [git] timeout_seconds.
    if killed := adapter.runner.kill_running():
        log.info("shutdown: stopped %d running git process(es)", killed)


async def _shared(app: web.Application) -> AsyncIterator[None]:
    """What replicas share: Redis when configured, else this process's memory.

    The index process has no Redis of its own: its serving process is the replica (indexer.py).
    """
    config = app[CONFIG]
    index_process = app[ROLE] is Role.INDEX
    shared = app[SHARED] = MemoryShared() if index_process else make_shared(config.cache, config.git.timeout_seconds)
    await shared.start()
    app[METRICS].watch_shared(shared)
    yield
    await shared.close()


async def _pins(app: web.Application) -> AsyncIterator[None]:
    """The commit each served tag was first served at; read (and compacted) off the event loop.

    The index process serves no download, so pins nothing: it must not compact the serving
    process's file, and has one of its own.
    """
    index_process = app[ROLE] is Role.INDEX
    path = Path(app[_HOME], "tagpins.jsonl") if index_process else _storage(app) / "tagpins.jsonl"
    files = app[_FILES]
    pins = app[_PINS] = await asyncio.get_running_loop().run_in_executor(files, TagPins, path, files)
    yield
    await pins.close()


async def _budget(app: web.Application) -> AsyncIterator[None]:
    """One [storage] max_bytes over mirrors and archives together."""
    budget = app[_BUDGET] = StorageBudget(app[CONFIG].storage.max_bytes)
    yield
    await budget.close()


async def _queued_git(app: web.Application) -> AsyncIterator[None]:
    """At shutdown, work still waiting for a git slot (archive builds, details) fails instead of
    starting: before the stores it would write to close, after the tag cache stopped."""
    yield
    if dropped := app[GIT_POOL].close():
        log.info("shutdown: dropped %d queued git call(s)", dropped)


async def _tags(app: web.Application) -> AsyncIterator[None]:
    """The tag cache: a miss goes through the git pool (with Redis, the other replicas' list first)."""
    config, pool, shared = app[CONFIG], app[GIT_POOL], app[SHARED]
    ls_remote = app[METRICS].instrument_ls_remote(app[GIT].ls_remote_tags)

    async def load(url: str, waiters: Waiters) -> TagList:
        return await pool.run(ls_remote, url, host=origin_label(url), waiters=waiters)

    # With Redis, a miss asks the other replicas' shared list first (one git call across all of them).
    cache = app[CACHE] = TagCache(
        config.cache, lambda url, waiters: shared.load_tags(url, lambda key: load(key, waiters)), app[CLOCK]
    )
    app[METRICS].watch_cache(cache)
    yield
    await cache.close()


async def _orgs(app: web.Application) -> AsyncIterator[None]:
    """The org listings; enumerated by _org_listings, or (index process) told by the serving process."""
    orgs = app[ORGS] = OrgCatalog(app[CONFIG], _storage(app) / ORGS_FILE)
    if app[ROLE] is Role.INDEX:  # the serving process enumerates, and tells it of each change
        orgs.follow(app[SEED].orgs, (), app[SEED].orgs_complete)
    else:  # with Redis, owners are shared like pins: the earliest holder on any replica wins
        shared = app[SHARED]
        if shared.is_shared:  # (alone: 30,000 new owners after a first listing, and no call for each)
            orgs.owners.on_held.connect(shared.publish_owner)
        shared.on_owner.connect(orgs.adopt_owner)
        orgs.on_loaded.connect(lambda: shared.share_owners(orgs.owners.entries))
    app[METRICS].watch_orgs(orgs)
    yield


async def _catalog(app: web.Application) -> AsyncIterator[None]:
    """The one resolver (what serves an address), and the catalog of listable modules and downloads.

    In Role.INDEX the catalog is not persisted: the serving process keeps it, and gives it the modules.
    """
    config, shared = app[CONFIG], app[SHARED]
    resolver = app[_RESOLVER] = Resolver(config, app[ORGS])
    catalog = app[CATALOG] = Catalog(config, _storage(app) / CATALOG_FILE, resolver, shared)
    shared.on_downloads.connect(catalog.downloads_changed)
    if app[ROLE] is Role.INDEX:  # the index process's catalog is given, never written
        for address in app[SEED].remembered:
            with contextlib.suppress(GitregError):
                catalog.remember(resolver.resolve(address))
        yield
        return
    async for _ in catalog.lifetime():
        yield


async def _hosts_http(app: web.Application) -> AsyncIterator[None]:
    """One HTTP session for every call toward the Git hosts and CI issuers on behalf of identities (who a
    token is, can it read, the login flows, refreshes, JWKS): opened on first use, closed here, after
    the identities and logins that use it."""
    sessions: list[aiohttp.ClientSession] = []

    def session() -> aiohttp.ClientSession:
        if not sessions:
            sessions.append(aiohttp.ClientSession(auto_decompress=True, trust_env=False))
        return sessions[0]

    app[_HOSTS_HTTP] = session
    yield
    for opened in sessions:
        await opened.close()


async def _identities(app: web.Application) -> AsyncIterator[None]:
    """Who a bearer token is and what it may read (asking the Git hosts through the hosts' HTTP session)."""
    config, login = app[CONFIG], app.get(LOGIN_TOKENS)
    identities = app[IDENTITIES] = Identities(
        config, app[AUTH], app[_RESOLVER], app[SHARED], app[_HOSTS_HTTP], login, app[CLOCK]
    )
    app[METRICS].watch_identities(identities.api_stats)
    yield


async def _registry(app: web.Application) -> AsyncIterator[None]:
    """The registry service (`terraform init`'s path) and the publisher of repository changes."""
    cache, shared, catalog = app[CACHE], app[SHARED], app[CATALOG]
    resolver = app[_RESOLVER]
    app[REGISTRY] = Registry(app[CONFIG], resolver, cache, app[_PINS], shared, catalog, app[ARCHIVES])
    publisher = app[PUBLISHER] = Publisher(app[CONFIG], cache, shared, app[ORGS])
    shared.on_invalidate.connect(publisher.changed_elsewhere)
    shared.on_reconnect.connect(publisher.reconnected)
    # The pins on disk are the truth: published again at every (re)connect, an earlier one adopted.
    shared.on_pin.connect(app[_PINS].adopt)
    shared.share_pins(app[_PINS].entries, app[CONFIG].git.allow_moved_tags)
    yield


async def _mirrors_and_archives(app: web.Application) -> AsyncIterator[None]:
    """Bare mirrors and archive builds, in [storage] path, within one budget."""
    config, pool, files = app[CONFIG], app[GIT_POOL], app[_FILES]
    storage = _storage(app)
    index_process = app[ROLE] is Role.INDEX
    pins = app[_PINS]
    mirrors = app[MIRRORS] = MirrorStore(
        storage / "mirrors",
        MirrorGit(app[GIT]),
        pool,
        files,
        app[_BUDGET],
        config.cache.error_retry_seconds,
        pins.commits,
        scratch_only=index_process,
    )
    await mirrors.prepare()  # a directory listing; the mirrors are cleaned and measured by _storage_scan
    archives = app[ARCHIVES] = ArchiveStore(
        storage / "archives", mirrors, ArchiveBuilder(mirrors.git), pool, config.storage.max_bytes, files
    )
    archive_mode = any(r.download == "archive" for r in config.modules) or any(
        o.download == "archive" for o in config.orgs
    )
    if archive_mode and not index_process:  # its prepare() removes builds cut short: the serving process's
        await archives.prepare()
    app[METRICS].registry.register(ArchiveCollector(archives, pins))
    yield


async def _org_listings(app: web.Application) -> AsyncIterator[None]:
    """Org listings: loaded from disk, then enumerated in the background until shutdown (not in the index process)."""
    async for _ in app[ORGS].lifetime():
        yield


async def _details(app: web.Application) -> AsyncIterator[None]:
    """Module details read from tagged trees, by parse worker processes."""
    mirrors = app[MIRRORS]
    details = app[DETAILS] = DetailsService(mirrors, mirrors.git, app[GIT_POOL])
    yield
    await details.close()  # its parse worker processes


async def _index(app: web.Application) -> AsyncIterator[None]:
    """The module index, and the browse API's facade over it.

    In Role.SERVE the index process builds the index (its IndexProcess is created here, started
    by _index_process); in Role.INDEX this is that process's index.
    """
    config, role, catalog, orgs, registry = app[CONFIG], app[ROLE], app[CATALOG], app[ORGS], app[REGISTRY]

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
    seed = app[SEED] if role is Role.INDEX else None
    commands = CommandPipe() if role is Role.SERVE else None  # to the index process
    index = app[INDEX] = ModuleIndex(
        _storage(app),
        sources=catalog.sources,
        resolve=catalog.listable,
        versions=registry.versions,
        details=app[DETAILS],
        refresh_seconds=config.cache.ttl_seconds,
        org_info=org_info,
        enabled=config.index.enabled,
        listed=orgs.complete,
        builds=role is not Role.SERVE,
        leading=(lambda: seed.leading) if seed is not None else app[SHARED].leading,
        changes=changes,
        on_wanted=commands.want if commands is not None else None,
    )
    process: IndexProcess | None = None
    if commands is not None:
        log_json = any(isinstance(h.formatter, JsonFormatter) for h in logging.getLogger().handlers)
        process = app[INDEX_PROCESS] = IndexProcess(
            config, index, catalog, orgs, app[CACHE], app[SHARED], commands, log_json=log_json
        )
    index.on_gone.connect(gone)
    _follow_changes(app, index, process)
    mirrors = app[MIRRORS]
    app[BROWSE] = BrowseService(index, catalog, registry, ModuleFiles(mirrors, mirrors.git, app[GIT_POOL]))
    app[METRICS].registry.register(IndexCollector(index, (lambda: process.starts) if process is not None else None))
    async for _ in index.lifetime():
        yield


def _follow_changes(app: web.Application, index: ModuleIndex, process: IndexProcess | None) -> None:
    """What the index (or, in Role.SERVE, the index process) is told of.

    A wildcard rule's module becomes listable when it is first served; any fetched tag list
    (a webhook, a `terraform init` after the TTL) may change what the index shows; an org's
    enumeration or repository webhook says which of its modules were added, pushed to or removed.
    """
    catalog, cache, orgs, shared = app[CATALOG], app[CACHE], app[ORGS], app[SHARED]
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


async def _index_process(app: web.Application) -> AsyncIterator[None]:
    """Role.SERVE: the index process, started once the index it feeds is up."""
    if not app[CONFIG].index.enabled:
        yield
        return
    async for _ in app[INDEX_PROCESS].lifetime():
        yield


async def _storage_scan(app: web.Application) -> AsyncIterator[None]:
    """The mirrors an earlier run left: cleaned up, measured and counted in [storage] max_bytes in the
    background, so the port opens at once (2,000 mirrors take seconds to walk)."""

    async def scan() -> None:
        try:
            await app[MIRRORS].scan()
        except Exception:
            log.exception("the scan of [storage] path/mirrors failed; mirrors it did not reach are not counted")

    task = asyncio.get_running_loop().create_task(scan())
    yield
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)


async def _logins(app: web.Application) -> AsyncIterator[None]:
    """`terraform login` and "Sign in with ...": the issued tokens (on disk, shared through Redis when
    configured) and the OAuth flows, talking to the Git hosts through the hosts' HTTP session."""
    config = app[CONFIG]
    key = config.auth.signing_key
    if key is None or not any(f.oauth for f in config.auth.forges):
        yield
        return
    http = app[_HOSTS_HTTP]()
    # Shared with the other replicas on the replicas' own Redis connection (None: this replica alone).
    tokens = IssuedTokens(config, _storage(app) / ISSUED_FILE, http, app[SHARED].logins)
    await tokens.load()
    app[LOGINS] = LoginFlows(config.auth.forges, key, tokens, http)
    app[LOGIN_TOKENS] = tokens  # what the Identities facade asks about a `gitreg_...` bearer token
    yield
    await tokens.close()


async def _readiness(app: web.Application) -> AsyncIterator[None]:
    """Last cleanup context: ready once everything before it started; first to go at shutdown."""
    keep_long_lived()  # index.json, orgs.json and the catalog, loaded: out of the collector's walks
    app[LIFECYCLE].up(app[INDEX], app[SHARED])
    yield
    app[LIFECYCLE].down()


async def _stopping(app: web.Application) -> None:
    """on_shutdown runs before in-flight requests finish: /readyz says 503 from here on."""
    app[LIFECYCLE].down()


def create_app(
    config: Config, clock: Callable[[], float] = time.monotonic, role: Role = Role.ALL, seed: Seed | None = None
) -> web.Application:
    """Build the aiohttp application for an already-validated config; `clock` is the tag cache's.

    `role`: Role.ALL builds the index in this process; `gitreg serve` uses Role.SERVE (the index
    process builds it, see indexer.py), which starts `python -m gitreg.indexer` in Role.INDEX (with its `seed`).
    """
    metrics = Metrics()  # this app's own registry: no process-wide state
    app = web.Application(
        client_max_size=64 * 1024,
        # A request aiohttp's HTTP parser refuses is logged as one line, not an ERROR with a traceback.
        handler_args={"logger": ServerLogger(logging.getLogger("aiohttp.server"))},
    )
    app[CONFIG] = config
    app[CLOCK] = clock
    app[ROLE] = role
    if seed is not None:
        app[SEED] = seed
    app[AUTH] = TokenChecker(config.auth)
    # Without a configured key (auth off: archive URLs need no signature) a random one will do.
    app[SIGNER] = UrlSigner(config.auth.signing_key or secrets.token_hex(32), config.auth.signed_url_ttl_seconds)
    app[METRICS] = metrics
    app[LIFECYCLE] = Lifecycle()
    # Dependency order; each closes (after `yield`) before those it was built with.
    contexts = [_git_home, _file_threads, _git_pool, _git, _shared, _pins, _budget, _queued_git, _tags, _orgs]
    contexts += [_mirrors_and_archives, _catalog, _hosts_http]
    if role is not Role.INDEX:  # the serving process signs people in (issued tokens before identities)
        contexts.append(_logins)
    contexts += [_identities, _registry]
    if role is not Role.INDEX:  # the serving process enumerates the orgs
        contexts.append(_org_listings)
    contexts += [_details, _index]
    if role is Role.SERVE:
        contexts.append(_index_process)
    if role is not Role.INDEX:  # the mirrors are the serving process's
        # After the slower ones so it does not slow them.
        contexts.append(_storage_scan)
    contexts.append(_readiness)  # keep last: ready only when every service above is up
    app.cleanup_ctx.extend(contexts)
    table = Routes(app, metrics, config.auth.enabled)  # each handler wrapped by its declared rule (routing.py)
    table.add(routes)
    table.add(browse_routes)  # after routes: `.../{system}/versions` must not become a {version}
    table.add(webhook_routes)
    table.add(oauth_routes)
    table.add(add_ui(app), page=True)
    table.add_unrouted()
    app.on_shutdown.append(_stopping)
    return app
