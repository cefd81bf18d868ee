"""The request middleware and the one error renderer: every failure leaves as `{"errors": ["..."]}`.

Domain errors are raised deep (GitregError and its kinds) and shaped here, once; pages get
HTML errors and the security headers instead (pages/views.py renders them).
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import NamedTuple

from aiohttp import web
from aiohttp.typedefs import Handler, Middleware
from aiohttp.web_urldispatcher import AbstractRoute

from gitreg.core.errors import DISK_FULL, OUT_OF_RESOURCES, GitregError, Overloaded, Unauthorized, disk_full
from gitreg.core.names import check_request
from gitreg.git.pool import GIT_PRIORITY, Priority
from gitreg.observability.logs import CREDENTIAL_KEY
from gitreg.observability.metrics import METHODS, OTHER_METHOD, UNMATCHED_ROUTE, Metrics
from gitreg.registry.service import ARCHIVE_NAME
from gitreg.web.api.oauth import OAUTH_PATHS
from gitreg.web.api.webhooks import PATHS as WEBHOOK_PATHS
from gitreg.web.auth import authorize
from gitreg.web.errors import error_response
from gitreg.web.keys import CONFIG, SIGNER
from gitreg.web.pages.render import SECURITY_HEADERS, page_error
from gitreg.web.pages.views import is_page

log = logging.getLogger(__name__)

# Paths that stay open when registry auth is on. /metrics has its own `[auth] metrics_token`,
# the webhooks their shared secrets: Git hosts cannot send a registry token; `terraform login`'s
# endpoints are how one is had.
OPEN_PATHS = frozenset({"/.well-known/terraform.json", "/healthz", "/readyz", "/metrics", *WEBHOOK_PATHS, *OAUTH_PATHS})
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


class _Route(NamedTuple):
    """What the middleware needs of a route, worked out once per route (the warm path)."""

    label: str  # the metrics' route label: the route's template
    priority: Priority
    page: bool
    archive: bool
    # Needs a registry credential when auth is on: a route of the app's (a 404/405 holds
    # nothing to protect) that is not open (OPEN_PATHS).
    guarded: bool


def _route(route: AbstractRoute, known: dict[AbstractRoute, _Route]) -> _Route:
    resource = route.resource
    label = resource.canonical if resource is not None else UNMATCHED_ROUTE
    priority = Priority.INSTALL if label in INSTALL_ROUTES else Priority.BROWSE
    guarded = resource is not None and label not in OPEN_PATHS
    found = _Route(label, priority, is_page(route), route.name == "archive", guarded)
    if resource is not None:  # not a 404/405's route, made anew for each request: the app's routes are few
        known[route] = found
    return found


def request_middleware(metrics: Metrics, auth_enabled: bool) -> Middleware:
    """The one middleware: time and count every request, check it (token, then input), run the
    handler, and shape every failure as JSON, never a traceback.

    One middleware, not one per concern: each layer costs a coroutine and a call per request,
    which shows on the warm path (bench/warm_path.py --operator).
    """
    routes: dict[AbstractRoute, _Route] = {}
    credentials = metrics.credentials.counts
    observe = metrics.observe_request

    @web.middleware
    async def middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
        started = time.perf_counter()
        route = request.match_info.route
        info = routes.get(route) or _route(route, routes)
        priority = GIT_PRIORITY.set(info.priority)
        status = 500
        # The caller's credential kind once known; else (a page, a refused token) as recorded on the request.
        credential = None
        try:
            if info.page:
                response = await _page(request, handler)
            else:
                try:
                    if auth_enabled and info.guarded:
                        credential = await authorize_request(request, info)
                    else:
                        credential = "none"
                    # Every path segment and query parameter, before any handler, rule or git call.
                    check_request(request)
                    response = await handler(request)
                except Exception as e:  # CancelledError is no Exception: it goes on, counted below
                    answer = _error_answer(request, e)
                    if answer is None:
                        log.exception("unhandled error on %s %s", request.method, request.path)
                        answer = error_response(500, "internal error in gitreg; the server log has details")
                    response = answer
            status = response.status
            return response
        except web.HTTPException as e:  # redirects (3xx) are raised, not returned
            status = e.status
            raise
        except asyncio.CancelledError:
            status = 499  # the client went away (nginx's convention)
            raise
        finally:
            GIT_PRIORITY.reset(priority)
            method = request.method if request.method in METHODS else OTHER_METHOD
            observe(info.label, method, status, time.perf_counter() - started)
            credentials[credential or request.get(CREDENTIAL_KEY, "none")] += 1

    return middleware


def _error_answer(request: web.Request, e: Exception) -> web.StreamResponse | None:
    """The JSON answer to a failed API request; None for a bug (500, logged by the caller with
    its traceback); a redirect (HTTPException < 400) is raised again."""
    if isinstance(e, GitregError):
        # A Bearer challenge only for registry tokens, not for a webhook's bad signature.
        headers = {"WWW-Authenticate": 'Bearer realm="gitreg"'} if isinstance(e, Unauthorized) else None
        if isinstance(e, Overloaded):
            headers = {"Retry-After": str(e.retry_after)}  # Terraform waits this long, then retries once
        return error_response(e.status, e.message, headers)
    if isinstance(e, web.HTTPException):
        if e.status < 400:
            raise e
        message = {
            404: f"no such endpoint: {request.path[:200]}",
            405: f"method {request.method} is not allowed here",
        }.get(e.status, e.reason)
        headers = {k: v for k, v in e.headers.items() if k.lower() in ("allow", "www-authenticate", "retry-after")}
        return error_response(e.status, message, headers)
    if isinstance(e, OSError) and e.errno in DISK_FULL:  # a write no storage class turned into a DiskFull itself
        full = disk_full(request.app[CONFIG].storage.path, "what this request needed")
        log.warning("%s %s: %s", request.method, request.path, full.message)
        return error_response(full.status, full.message)
    if isinstance(e, OSError) and e.errno in OUT_OF_RESOURCES:
        # Out of file descriptors or processes (opening a file, starting git): busy, not broken.
        log.warning("out of resources on %s %s: %s; answered 503", request.method, request.path, e.strerror)
        return error_response(
            503, "gitreg is out of file descriptors or processes; try again in a few seconds", {"Retry-After": "5"}
        )
    return None


async def _page(request: web.Request, handler: Handler) -> web.StreamResponse:
    """A browser page: its own session check, HTML errors, and the security headers on every answer."""
    try:
        response: web.StreamResponse = await handler(request)
    except web.HTTPException as e:
        if e.status < 400:  # a redirect (to /login, after a login)
            e.headers.update(SECURITY_HEADERS)
            raise
        response = page_error(request, e.status, e.reason)
    except GitregError as e:  # the Git host that says what a visitor may see cannot answer (503), ...
        response = page_error(request, e.status, e.message)
        if isinstance(e, Overloaded):
            response.headers["Retry-After"] = str(e.retry_after)
    except asyncio.CancelledError:
        raise
    except Exception:
        log.exception("unhandled error on %s %s", request.method, request.path)
        response = page_error(request, 500, "Something went wrong in gitreg; the server log has details.")
    for name, value in SECURITY_HEADERS.items():  # a stricter policy of the handler's own stays (files)
        response.headers.setdefault(name, value)
    return response


async def authorize_request(request: web.Request, route: _Route) -> str:
    """Require a registry credential on an API route that is not open, when registry auth is on
    (tokens, forges or oidc); the caller's credential kind.

    A path no route serves (404, or 405 for a method) is not asked: it holds nothing to protect,
    and the router's answer goes out as it is, so a typo'd URL says "no such endpoint", not
    "needs a token".
    """
    if route.archive and "signature" in request.query:
        # Terraform fetches the archive without its token: the signed URL is the authorization.
        request.app[SIGNER].verify(request.path, request.query)
        return "none"
    return await authorize(request)
