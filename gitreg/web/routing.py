"""Route registration: each route's declared rules (`Access`, git `Priority`), the request
wrapper that applies them, and the one error renderer: every failure leaves as `{"errors": ["..."]}`.

Each route states its rules where it is defined (route_rules.py); `Routes.add` refuses a
route that declares none. Domain errors are raised deep (GitregError and its kinds)
and shaped here, once; pages get HTML errors and the security headers instead (pages/views.py
renders them).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Iterable

from aiohttp import hdrs, web
from aiohttp.typedefs import Handler

from gitreg.core.errors import DISK_FULL, OUT_OF_RESOURCES, GitregError, Overloaded, Unauthorized, disk_full
from gitreg.core.names import check_request
from gitreg.git.pool import GIT_PRIORITY
from gitreg.identity.door import Identities
from gitreg.observability.logs import WHO_KEY
from gitreg.observability.metrics import METHODS, OTHER_METHOD, UNMATCHED_ROUTE, Metrics
from gitreg.web.address import ADDRESS_KEY
from gitreg.web.auth import authorize, authorize_static
from gitreg.web.errors import error_response
from gitreg.web.keys import CONFIG, IDENTITY, SIGNER
from gitreg.web.pages.render import SECURITY_HEADERS, page_error
from gitreg.web.pages.session import guarded
from gitreg.web.route_rules import UNROUTED_RULE, Access, RouteRule, declared

log = logging.getLogger(__name__)

# The name of the route that answers every path no other route serves.
UNROUTED = "unrouted"


class Routes:
    """Registers the app's routes, each handler wrapped by its declared rule: timed and counted,
    checked (credential or session, then input), and every failure shaped (JSON for the API, an
    HTML page for the pages), never a traceback. A path no route serves reaches `unrouted` (404,
    or 405 with Allow), registered last. `rules` holds every registered route's rule.

    A wrapper per route, not an app middleware: aiohttp runs an app's middlewares through two
    more coroutine layers per request (a partial and its own `_fix_request_current_app`), and a
    route's facts (label, priority, whether it needs a token) are known here once instead of
    looked up per request (bench/warm_path.py --operator).
    """

    def __init__(self, app: web.Application, metrics: Metrics, auth_enabled: bool) -> None:
        self.app = app
        self.observe = metrics.observe_request
        self.credentials = metrics.credentials.counts
        self.auth_enabled = auth_enabled
        self.rules: dict[web.AbstractRoute, RouteRule] = {}
        # The identities (made by a cleanup context), kept once the app started: the warm path's
        # token check then looks nothing up in the app.
        self.identities: Identities | None = None
        app[ROUTES] = self
        app.on_startup.append(self._started)  # after every cleanup context's start

    async def _started(self, app: web.Application) -> None:
        self.identities = app.get(IDENTITY)

    def add(self, table: Iterable[web.AbstractRouteDef], page: bool = False) -> None:
        """Register `table`'s routes, each by the rule it declares (`page`: browser pages, with
        HTML errors and the security headers)."""
        for route in table:
            if not isinstance(route, web.RouteDef):
                raise TypeError(f"only plain routes are wrapped, not {route!r}")
            kwargs = dict(route.kwargs)
            rule = declared(route, kwargs, page)
            allow_head = kwargs.pop("allow_head", True)
            resource = self.app.router.add_resource(route.path, name=kwargs.pop("name", None))
            handler = self._wrap(route.handler, resource.canonical, rule, page)
            if route.method == hdrs.METH_GET and allow_head:
                self.rules[resource.add_route(hdrs.METH_HEAD, handler, **kwargs)] = rule
            self.rules[resource.add_route(route.method, handler, **kwargs)] = rule

    def add_unrouted(self) -> None:
        """The last route: any method on any path no other route serves (404, or 405 with Allow)."""
        # `[\s\S]`, not `.`: a path may hold a line break once decoded (`/a%0D%0Ab`).
        handler = self._wrap(_unrouted, UNMATCHED_ROUTE, UNROUTED_RULE, page=False)
        self.rules[self.app.router.add_route(hdrs.METH_ANY, r"/{path:[\s\S]*}", handler, name=UNROUTED)] = UNROUTED_RULE

    def _wrap(self, handler: Handler, label: str, rule: RouteRule, page: bool) -> Handler:
        git_priority = rule.priority
        signed = rule.access is Access.SIGNED
        # Needs a registry credential now: auth is on and the route said so. A page's session
        # guard decides for itself (it also records the visitor with auth off).
        needs_credential = self.auth_enabled and rule.access in (Access.CREDENTIAL, Access.SIGNED)
        if rule.access is Access.SESSION:
            handler = guarded(handler)
        observe, credentials = self.observe, self.credentials
        routes = self

        async def wrapped(request: web.Request) -> web.StreamResponse:
            started = time.perf_counter()
            priority = GIT_PRIORITY.set(git_priority)
            status = 500
            # The caller's credential kind once known; else (a page's visitor, a refused token) as
            # recorded on the request.
            credential = "none" if not needs_credential and not page else None
            try:
                if page:
                    response = await _page_answer(request, handler)
                else:
                    try:
                        parsed = None
                        if needs_credential:
                            credential = _authorize_now(request, signed, routes.identities)
                            if credential is None:
                                credential = await authorize(request)
                                parsed = request.get(ADDRESS_KEY)  # the check of what it may read parsed it
                        # Every path segment and query parameter, before any handler, rule or git
                        # call; the module address parsed once, handed to the handler on the request.
                        address = check_request(request, parsed)
                        if address is not None:
                            request[ADDRESS_KEY] = address
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
                method = request.method
                observe(label, method if method in METHODS else OTHER_METHOD, status, time.perf_counter() - started)
                credentials[credential or _kind(request)] += 1

        wrapped.__doc__ = handler.__doc__
        return wrapped


# The app's Routes: each registered route's declared rule (`rules`).
ROUTES = web.AppKey("routes", Routes)


def _kind(request: web.Request) -> str:
    """The credential kind of the caller recorded on `request`; "none" when none was."""
    who = request.get(WHO_KEY)
    return "none" if who is None else who.kind


async def _unrouted(request: web.Request) -> web.StreamResponse:
    """No route serves this path with this method: 405 with Allow when another method would be
    served (as aiohttp's router answers), else 404 (the HTML page when a browser asks)."""
    allowed: set[str] = set()
    for resource in request.app.router.resources():
        if resource.name != UNROUTED:
            allowed |= (await resource.resolve(request))[1]
    if allowed:
        raise web.HTTPMethodNotAllowed(request.method, allowed)
    if "text/html" in request.headers.get("Accept", "") and request.app[CONFIG].ui.enabled:
        # A browser (`/nothing-here` typed or followed): the pages' 404; API clients keep the JSON.
        page = page_error(request, 404, "There is no page at this address.")
        page.headers.update(SECURITY_HEADERS)
        return page
    raise web.HTTPNotFound()


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


async def _page_answer(request: web.Request, handler: Handler) -> web.StreamResponse:
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


def _authorize_now(request: web.Request, signed: bool, identities: Identities | None) -> str | None:
    """The credential kind of a request that needs one (a route declaring CREDENTIAL or SIGNED,
    registry auth on), when it is decided without asking anyone: a signed archive URL, a configured static
    token (the warm path, no coroutine); None when `authorize` has to (a 401 or 403 raised as
    they are).

    A path no route serves (404, or 405 for a method) is not asked: it holds nothing to protect,
    so a typo'd URL says "no such endpoint", not "needs a token".
    """
    if signed and "signature" in request.query:
        # Terraform fetches the archive without its token: the signed URL is the authorization.
        request.app[SIGNER].verify(request.path, request.query)
        return "none"
    return authorize_static(request, identities or request.app[IDENTITY])
