"""The application factory, its middlewares, and the resources it owns."""

from __future__ import annotations

import asyncio
import logging
import secrets
import tempfile
import time
from collections.abc import AsyncIterator, Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from aiohttp import web
from aiohttp.typedefs import Handler

from gitreg.config.model import Config
from gitreg.core.errors import OUT_OF_RESOURCES, GitregError, Overloaded, Unauthorized
from gitreg.core.names import check_request
from gitreg.core.urls import host_label as git_host
from gitreg.git.mirror import MirrorGit
from gitreg.git.pool import GIT_PRIORITY, GitPool, Priority, Waiters
from gitreg.git.remote import GitAdapter, TagList
from gitreg.git.runner import GitRunner
from gitreg.index.process import Role, Seed
from gitreg.observability.logs import ServerLogger
from gitreg.observability.metrics import Lifecycle, Metrics, metrics_middleware
from gitreg.orgs.catalog import FILE_NAME as ORGS_FILE
from gitreg.orgs.catalog import OrgCatalog
from gitreg.registry.service import ARCHIVE_NAME, Registry
from gitreg.registry.tags import TagCache
from gitreg.replicas.shared import SharedState, make_shared
from gitreg.storage.archives import ArchiveBuilder, ArchiveCollector, ArchiveStore
from gitreg.storage.budget import StorageBudget
from gitreg.storage.mirrors import MirrorStore
from gitreg.storage.pins import TagPins
from gitreg.web.api.browse import browse_routes, browse_services
from gitreg.web.api.modules import routes
from gitreg.web.api.webhooks import PATHS as WEBHOOK_PATHS
from gitreg.web.api.webhooks import webhook_routes
from gitreg.web.auth import TokenChecker
from gitreg.web.keys import (
    ARCHIVES,
    AUTH,
    CACHE,
    CLOCK,
    CONFIG,
    GIT,
    GIT_POOL,
    LIFECYCLE,
    METRICS,
    MIRRORS,
    ORGS,
    REGISTRY,
    ROLE,
    SEED,
    SHARED,
    SIGNER,
)
from gitreg.web.pages.views import SECURITY_HEADERS, add_ui, is_page, page_error
from gitreg.web.signing import UrlSigner

log = logging.getLogger(__name__)

# Paths that stay open when registry auth is on. /metrics has its own `[auth] metrics_token`,
# the webhooks their shared secrets: Git hosts cannot send a registry token.
OPEN_PATHS = frozenset({"/.well-known/terraform.json", "/healthz", "/readyz", "/metrics", *WEBHOOK_PATHS})
# The git priority of each route (gitpool.Priority): what `terraform init` asks for goes
# first; every other route (the rest of /v1, pages, webhooks) is BROWSE. Background work
# sets BACKGROUND itself (gitpool.background_task).
INSTALL_ROUTES = frozenset(
    {
        "/v1/modules/{namespace}/{name}/{system}/versions",
        "/v1/modules/{namespace}/{name}/{system}/{version}/download",
        "/v1/modules/{namespace}/{name}/{system}/{version}/" + ARCHIVE_NAME,
    }
)


def error_response(status: int, message: str, headers: dict[str, str] | None = None) -> web.Response:
    """The one error shape of the registry API: `{"errors": ["..."]}`."""
    return web.json_response({"errors": [message]}, status=status, headers=headers)


@web.middleware
async def errors_middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
    """Check the request (token, then input), run the handler; shape every failure as JSON, never a traceback.

    One middleware, not three: each layer costs a coroutine per request, which shows on the
    warm path (bench/warm_path.py).
    """
    resource = request.match_info.route.resource
    install = resource is not None and resource.canonical in INSTALL_ROUTES
    priority = GIT_PRIORITY.set(Priority.INSTALL if install else Priority.BROWSE)
    try:
        if is_page(request):
            return await _page(request, handler)
        authorize_request(request)
        # Every path segment and query parameter, before any handler, rule or git call.
        check_request(request)
        return await handler(request)
    except GitregError as e:
        # A Bearer challenge only for registry tokens, not for a webhook's bad signature.
        headers = {"WWW-Authenticate": 'Bearer realm="gitreg"'} if isinstance(e, Unauthorized) else None
        if isinstance(e, Overloaded):
            headers = {"Retry-After": str(e.retry_after)}  # Terraform waits this long, then retries once
        return error_response(e.status, e.message, headers)
    except web.HTTPException as e:
        if e.status < 400:
            raise
        message = {
            404: f"no such endpoint: {request.path[:200]}",
            405: f"method {request.method} is not allowed here",
        }.get(e.status, e.reason)
        headers = {k: v for k, v in e.headers.items() if k.lower() in ("allow", "www-authenticate", "retry-after")}
        return error_response(e.status, message, headers)
    except asyncio.CancelledError:
        raise
    except OSError as e:
        if e.errno not in OUT_OF_RESOURCES:
            log.exception("unhandled error on %s %s", request.method, request.path)
            return error_response(500, "internal error in gitreg; the server log has details")
        # Out of file descriptors or processes (opening a file, starting git): busy, not broken.
        log.warning("out of resources on %s %s: %s; answered 503", request.method, request.path, e.strerror)
        return error_response(
            503, "gitreg is out of file descriptors or processes; try again in a few seconds", {"Retry-After": "5"}
        )
    except Exception:
        log.exception("unhandled error on %s %s", request.method, request.path)
        return error_response(500, "internal error in gitreg; the server log has details")
    finally:
        GIT_PRIORITY.reset(priority)


async def _page(request: web.Request, handler: Handler) -> web.StreamResponse:
    """A browser page: its own session check, HTML errors, and the security headers on every answer."""
    try:
        response: web.StreamResponse = await handler(request)
    except web.HTTPException as e:
        if e.status < 400:  # a redirect (to /login, after a login)
            e.headers.update(SECURITY_HEADERS)
            raise
        response = page_error(request, e.status, e.reason)
    except asyncio.CancelledError:
        raise
    except Exception:
        log.exception("unhandled error on %s %s", request.method, request.path)
        response = page_error(request, 500, "Something went wrong in gitreg; the server log has details.")
    response.headers.update(SECURITY_HEADERS)
    return response


def authorize_request(request: web.Request) -> None:
    """Require a registry token on the API when `[auth] tokens` is set."""
    checker = request.app[AUTH]
    # A path no route serves (404, or 405 for a method) holds nothing to protect: the router's
    # answer goes out as it is, so a typo'd URL says "no such endpoint", not "needs a token".
    if request.match_info.http_exception is not None:
        return
    if checker.enabled and request.path not in OPEN_PATHS:
        if request.match_info.route.name == "archive" and "signature" in request.query:
            # Terraform fetches the archive without its token: the signed URL is the authorization.
            request.app[SIGNER].verify(request.path, request.query)
        else:
            checker.authorize(request)


async def _services(app: web.Application) -> AsyncIterator[None]:
    """Create the git pool, git adapter, cache and registry; close them on shutdown."""
    config = app[CONFIG]
    pool = GitPool(config.git.max_concurrency, config.git.max_queue, config.git.max_per_host)
    home = tempfile.TemporaryDirectory(prefix="gitreg-home-")
    adapter = GitAdapter(GitRunner(config.git, config.credentials, home.name))
    ls_remote = app[METRICS].instrument_ls_remote(adapter.ls_remote_tags)

    async def load(url: str, waiters: Waiters) -> TagList:
        return await pool.run(ls_remote, url, host=git_host(url), waiters=waiters)

    # With Redis, a miss asks the other replicas' shared list first (one git call across all of them).
    # The index process has no Redis of its own: its serving process is the replica (indexer.py).
    index_process = app[ROLE] is Role.INDEX
    shared = app[SHARED] = SharedState() if index_process else make_shared(config.cache, config.git.timeout_seconds)
    await shared.start()
    cache = TagCache(
        config.cache, lambda url, waiters: shared.load_tags(url, lambda key: load(key, waiters)), app[CLOCK]
    )

    def invalidated_elsewhere(key: str) -> None:
        # A webhook reached another replica: refreshed through the shared lock, so one git call in all.
        if cache.invalidate(key):
            cache.refresh_in_background(key)

    def reconnected() -> None:
        # Invalidations published while Redis was away never arrived: catch up with the shared lists.
        for key in cache.keys():  # noqa: SIM118 - TagCache is not a mapping; keys() is a snapshot
            cache.refresh_in_background(key)

    shared.on_invalidate = invalidated_elsewhere
    shared.on_reconnect = reconnected
    app[METRICS].watch_shared(shared)
    app[METRICS].watch_cache(cache)
    app[METRICS].watch_git(adapter.runner.running)
    app[METRICS].watch_pool(pool)
    app[GIT_POOL] = pool
    app[GIT] = adapter
    app[CACHE] = cache
    storage = Path(config.storage.path)
    # gitreg's own file work (pin records, sizes, renames, removals): a few threads of its own,
    # apart from the git pool's slots and from the default executor aiohttp opens files in.
    files = ThreadPoolExecutor(max_workers=4, thread_name_prefix="gitreg-files")
    # Read (and compacted) off the event loop. The index process serves no download, so pins
    # nothing: it must not compact the serving process's file, and has one of its own.
    pins_file = Path(home.name, "tagpins.jsonl") if index_process else storage / "tagpins.jsonl"
    pins = await asyncio.get_running_loop().run_in_executor(files, TagPins, pins_file, files)
    orgs = OrgCatalog(config, storage / ORGS_FILE)  # started by _org_listings
    if index_process:  # the serving process enumerates, and tells it of each change
        orgs.follow(app[SEED].orgs, (), app[SEED].orgs_complete)
    app[ORGS] = orgs
    app[METRICS].watch_orgs(orgs)
    app[REGISTRY] = Registry(config, cache, pins, orgs)
    # One [storage] max_bytes over mirrors and archives together.
    budget = StorageBudget(config.storage.max_bytes)
    mirrors = MirrorStore(
        storage / "mirrors", MirrorGit(adapter), pool, files, budget, config.cache.error_retry_seconds, pins.commits
    )
    mirrors.scratch_only = index_process
    await mirrors.prepare()  # a directory listing; the mirrors are cleaned and measured by _storage_scan
    app[REGISTRY].shared = shared
    app[MIRRORS] = mirrors
    archives = ArchiveStore(
        storage / "archives", mirrors, ArchiveBuilder(mirrors.git), pool, config.storage.max_bytes, files
    )
    archive_mode = any(r.download == "archive" for r in config.modules) or any(
        o.download == "archive" for o in config.orgs
    )
    if archive_mode and not index_process:  # its prepare() removes builds cut short: the serving process's
        await archives.prepare()
    app[ARCHIVES] = archives
    app[METRICS].registry.register(ArchiveCollector(archives, pins))
    yield
    await cache.close()
    # Work still waiting for a slot (archive builds, details) fails now instead of starting.
    if dropped := pool.close():
        log.info("shutdown: dropped %d queued git call(s)", dropped)
    await budget.close()
    await pins.close()
    await shared.close()
    # In-flight requests had their grace period (the runner's shutdown_timeout): git still
    # talking to a host now serves nobody (a background refresh, a cancelled request), so it
    # is killed with its helpers instead of holding shutdown up to [git] timeout_seconds.
    if killed := adapter.runner.kill_running():
        log.info("shutdown: stopped %d running git process(es)", killed)
    pool.shutdown()
    files.shutdown(wait=True)  # pin records and removals finish: nothing half-written
    home.cleanup()


async def _org_listings(app: web.Application) -> AsyncIterator[None]:
    """Org listings: loaded from disk, then enumerated in the background until shutdown (not in the index process)."""
    if app[ROLE] is Role.INDEX:
        yield
        return
    async for _ in app[ORGS].lifetime():
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


async def _readiness(app: web.Application) -> AsyncIterator[None]:
    """Last cleanup context: ready once everything before it started; first to go at shutdown."""
    lifecycle = app[LIFECYCLE]
    lifecycle.ready, lifecycle.reason = True, "ready"
    yield
    lifecycle.ready, lifecycle.reason = False, "stopping"


async def _stopping(app: web.Application) -> None:
    """on_shutdown runs before in-flight requests finish: /readyz says 503 from here on."""
    app[LIFECYCLE].ready, app[LIFECYCLE].reason = False, "stopping"


def create_app(
    config: Config, clock: Callable[[], float] = time.monotonic, role: Role = Role.ALL, seed: Seed | None = None
) -> web.Application:
    """Build the aiohttp application for an already-validated config; `clock` is the tag cache's.

    `role`: Role.ALL builds the index in this process; `gitreg serve` uses Role.SERVE (the index
    process builds it, see indexer.py), which starts `python -m gitreg.index.process` in Role.INDEX (with its `seed`).
    """
    metrics = Metrics()  # this app's own registry: no process-wide state
    app = web.Application(
        middlewares=[metrics_middleware(metrics), errors_middleware],
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
    app.cleanup_ctx.append(_services)
    app.cleanup_ctx.append(_org_listings)  # needs the services above
    app.cleanup_ctx.append(browse_services)  # needs the services above
    app.add_routes(routes)
    app.add_routes(browse_routes)  # after routes: `.../{system}/versions` must not become a {version}
    app.add_routes(webhook_routes)
    add_ui(app)
    if role is not Role.INDEX:  # the mirrors are the serving process's
        # Needs the services above; after the slower ones so it does not slow them.
        app.cleanup_ctx.append(_storage_scan)
    app.cleanup_ctx.append(_readiness)  # keep last: ready only when every service above is up
    app.on_shutdown.append(_stopping)
    return app
