"""The application factory, its middlewares, and the resources it owns."""

from __future__ import annotations

import asyncio
import logging
import secrets
import tempfile
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from aiohttp import web

from .appkeys import ARCHIVES, AUTH, CACHE, CLOCK, CONFIG, EXECUTOR, GIT, LIFECYCLE, METRICS, MIRRORS, REGISTRY, SHARED, SIGNER
from .archives import ArchiveBuilder, ArchiveCollector, ArchiveStore
from .auth import TokenChecker
from .browse import browse_routes, browse_services
from .cache import TagCache
from .config import Config
from .errors import GitregError, Unauthorized
from .git_adapter import GitAdapter, MirrorGit, TagList
from .metrics import Lifecycle, Metrics, metrics_middleware
from .logs import ServerLogger
from .names import check_request
from .mirrors import MirrorStore
from .registry import Registry
from .routes import routes
from .shared import make_shared
from .signing import UrlSigner
from .tagpins import TagPins
from .ui import SECURITY_HEADERS, add_ui, is_page, page_error
from .webhooks import PATHS as WEBHOOK_PATHS
from .webhooks import webhook_routes

log = logging.getLogger(__name__)

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]

# Paths that stay open when registry auth is on. /metrics has its own `[auth] metrics_token`,
# the webhooks their shared secrets: Git hosts cannot send a registry token.
OPEN_PATHS = frozenset({"/.well-known/terraform.json", "/healthz", "/readyz", "/metrics", *WEBHOOK_PATHS})


def error_response(status: int, message: str, headers: dict[str, str] | None = None) -> web.Response:
    """The one error shape of the registry API: `{"errors": ["..."]}`."""
    return web.json_response({"errors": [message]}, status=status, headers=headers)


@web.middleware
async def errors_middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
    """Check the request (token, then input), run the handler; shape every failure as JSON, never a traceback.

    One middleware, not three: each layer costs a coroutine per request, which shows on the
    warm path (bench/warm_path.py).
    """
    if is_page(request):
        return await _page(request, handler)
    try:
        authorize_request(request)
        # Every path segment and query parameter, before any handler, rule or git call.
        check_request(request)
        return await handler(request)
    except GitregError as e:
        # A Bearer challenge only for registry tokens, not for a webhook's bad signature.
        headers = {"WWW-Authenticate": 'Bearer realm="gitreg"'} if isinstance(e, Unauthorized) else None
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
    except Exception:
        log.exception("unhandled error on %s %s", request.method, request.path)
        return error_response(500, "internal error in gitreg; the server log has details")


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
    """Create the executor, git adapter, cache and registry; close them on shutdown."""
    config = app[CONFIG]
    executor = ThreadPoolExecutor(max_workers=config.git.max_concurrency, thread_name_prefix="gitreg-git")
    home = tempfile.TemporaryDirectory(prefix="gitreg-home-")
    adapter = GitAdapter(config.git, config.credentials, home.name)

    async def load(url: str) -> TagList:
        return await asyncio.get_running_loop().run_in_executor(executor, adapter.ls_remote_tags, url)

    # With Redis, a miss asks the other replicas' shared list first (one git call across all of them).
    shared = app[SHARED] = make_shared(config.cache, config.git.timeout_seconds)
    await shared.start()
    instrumented = app[METRICS].instrument_loader(load)
    cache = TagCache(config.cache, lambda url: shared.load_tags(url, instrumented), app[CLOCK])

    def invalidated_elsewhere(key: str) -> None:
        # A webhook reached another replica: refreshed through the shared lock, so one git call in all.
        if cache.invalidate(key):
            cache.refresh_in_background(key)

    def reconnected() -> None:
        # Invalidations published while Redis was away never arrived: catch up with the shared lists.
        for key in cache.keys():
            cache.refresh_in_background(key)

    shared.on_invalidate = invalidated_elsewhere
    shared.on_reconnect = reconnected
    app[METRICS].watch_shared(shared)
    app[METRICS].watch_cache(cache)
    app[METRICS].watch_git(adapter.running)
    app[EXECUTOR] = executor
    app[GIT] = adapter
    app[CACHE] = cache
    storage = Path(config.storage.path)
    pins = TagPins(storage / "tagpins.jsonl")
    app[REGISTRY] = Registry(config, cache, pins)
    app[REGISTRY].shared = shared
    mirrors = MirrorStore(storage / "mirrors", MirrorGit(adapter), executor)
    mirrors.prepare()
    app[MIRRORS] = mirrors
    archives = ArchiveStore(storage / "archives", mirrors, ArchiveBuilder(mirrors.git), executor, config.storage.max_bytes)
    if any(rule.download == "archive" for rule in config.modules):
        archives.prepare()
    app[ARCHIVES] = archives
    app[METRICS].registry.register(ArchiveCollector(archives, pins))
    yield
    await cache.close()
    await shared.close()
    # In-flight requests had their grace period (the runner's shutdown_timeout): git still
    # talking to a host now serves nobody (a background refresh, a cancelled request), so it
    # is killed with its helpers instead of holding shutdown up to [git] timeout_seconds.
    if killed := adapter.kill_running():
        log.info("shutdown: stopped %d running git process(es)", killed)
    executor.shutdown(wait=False, cancel_futures=True)
    home.cleanup()


async def _readiness(app: web.Application) -> AsyncIterator[None]:
    """Last cleanup context: ready once everything before it started; first to go at shutdown."""
    lifecycle = app[LIFECYCLE]
    lifecycle.ready, lifecycle.reason = True, "ready"
    yield
    lifecycle.ready, lifecycle.reason = False, "stopping"


async def _stopping(app: web.Application) -> None:
    """on_shutdown runs before in-flight requests finish: /readyz says 503 from here on."""
    app[LIFECYCLE].ready, app[LIFECYCLE].reason = False, "stopping"


def create_app(config: Config, clock: Callable[[], float] = time.monotonic) -> web.Application:
    """Build the aiohttp application for an already-validated config; `clock` is the tag cache's."""
    metrics = Metrics()  # this app's own registry: no process-wide state
    app = web.Application(
        middlewares=[metrics_middleware(metrics), errors_middleware],
        client_max_size=64 * 1024,
        # A request aiohttp's HTTP parser refuses is logged as one line, not an ERROR with a traceback.
        handler_args={"logger": ServerLogger(logging.getLogger("aiohttp.server"))},
    )
    app[CONFIG] = config
    app[CLOCK] = clock
    app[AUTH] = TokenChecker(config.auth)
    # Without a configured key (auth off: archive URLs need no signature) a random one will do.
    app[SIGNER] = UrlSigner(config.auth.signing_key or secrets.token_hex(32), config.auth.signed_url_ttl_seconds)
    app[METRICS] = metrics
    app[LIFECYCLE] = Lifecycle()
    app.cleanup_ctx.append(_services)
    app.cleanup_ctx.append(browse_services)  # needs the services above
    app.add_routes(routes)
    app.add_routes(browse_routes)  # after routes: `.../{system}/versions` must not become a {version}
    app.add_routes(webhook_routes)
    add_ui(app)
    app.cleanup_ctx.append(_readiness)  # keep last: ready only when every service above is up
    app.on_shutdown.append(_stopping)
    return app
