"""The application factory, its middlewares, and the resources it owns."""

from __future__ import annotations

import asyncio
import logging
import secrets
import tempfile
from collections.abc import AsyncIterator, Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from aiohttp import web

from .appkeys import ARCHIVES, AUTH, CACHE, CONFIG, EXECUTOR, GIT, LIFECYCLE, METRICS, MIRRORS, REGISTRY, SIGNER
from .archives import ArchiveBuilder, ArchiveCollector, ArchiveStore
from .auth import TokenChecker
from .browse import browse_routes, browse_services
from .cache import TagCache
from .config import Config
from .errors import OUT_OF_RESOURCES, GitregError, Overloaded, Unauthorized
from .git_adapter import GitAdapter, MirrorGit, TagList
from .metrics import Lifecycle, Metrics, metrics_middleware
from .logs import ServerLogger
from .names import check_request
from .mirrors import MirrorStore
from .registry import Registry
from .routes import routes
from .signing import UrlSigner
from .tagpins import TagPins
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
    try:
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
        return error_response(503, "gitreg is out of file descriptors or processes; try again in a few seconds",
                              {"Retry-After": "5"})
    except Exception:
        log.exception("unhandled error on %s %s", request.method, request.path)
        return error_response(500, "internal error in gitreg; the server log has details")


def authorize_request(request: web.Request) -> None:
    """Require a registry token on the API when `[auth] tokens` is set."""
    checker = request.app[AUTH]
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

    cache = TagCache(config.cache, app[METRICS].instrument_loader(load))
    app[METRICS].watch_cache(cache)
    app[METRICS].watch_git(adapter.running)
    app[EXECUTOR] = executor
    app[GIT] = adapter
    app[CACHE] = cache
    storage = Path(config.storage.path)
    pins = TagPins(storage / "tagpins.jsonl")
    app[REGISTRY] = Registry(config, cache, pins)
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


def create_app(config: Config) -> web.Application:
    """Build the aiohttp application for an already-validated config."""
    metrics = Metrics()  # this app's own registry: no process-wide state
    app = web.Application(
        middlewares=[metrics_middleware(metrics), errors_middleware],
        client_max_size=64 * 1024,
        # A request aiohttp's HTTP parser refuses is logged as one line, not an ERROR with a traceback.
        handler_args={"logger": ServerLogger(logging.getLogger("aiohttp.server"))},
    )
    app[CONFIG] = config
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
    app.cleanup_ctx.append(_readiness)  # keep last: ready only when every service above is up
    app.on_shutdown.append(_stopping)
    return app
