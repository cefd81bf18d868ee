"""Registry authentication on every `/v1/...` request, and what the caller may see.

`Authorization: Bearer <token>`: a static `[auth] tokens` entry, a `terraform login` token, a CI
job's OIDC JWT or a Git host's own token; the identity door (identity/door.py, the one module of
`gitreg.identity` the web layer imports) says who it is and what it may read. The request
wrapper (routing.py) calls `authorize_static`, then `authorize`; the pages' session guard
records its visitor with `admit`; list, search and the pages then ask `visibility(request)`.
"""

from __future__ import annotations

from aiohttp import hdrs, web

from gitreg.core.errors import Forbidden
from gitreg.identity.door import Identities, Principal, Visibility
from gitreg.observability.logs import WHO_KEY
from gitreg.web.address import request_address
from gitreg.web.keys import IDENTITY

__all__ = ["admit", "authorize", "authorize_static", "caller", "visibility"]

# Who the caller is: the door's Principal, recorded once under the access log's and the metrics'
# WHO_KEY (typed as observability's `Who`, which a Principal is) and read back as a Principal by
# `caller`, checked, not cast. One entry, not a second key beside it: a request's `__setitem__`
# costs about 0.2 µs on the warm path (measured on the 2-core CI machine, loaded).

# What the caller sees in lists, search and pages (asked of the Git host once per recheck_seconds).
VISIBILITY_KEY = web.RequestKey[Visibility]("visibility")


def caller(request: web.Request) -> Principal | None:
    """Who makes this request, as recorded (None: an open registry, or not checked)."""
    who = request.get(WHO_KEY)
    return who if isinstance(who, Principal) else None


async def admit(request: web.Request, principal: Principal | None) -> None:
    """Record who makes this page request (the session guard's visitor; None: an open registry).

    Sets the principal (the access log's name, the metrics' credential kind) and, when the door
    decides it without asking anyone (an open registry, a namespace-scoped token), what it sees:
    pages and lists then never wait.
    """
    _admit(request, request.app[IDENTITY], principal)


def _admit(request: web.Request, identities: Identities, principal: Principal | None) -> None:
    if principal is not None:
        request[WHO_KEY] = principal
    seen = identities.visibility_now(principal)
    if seen is not None:
        request[VISIBILITY_KEY] = seen


async def visibility(request: web.Request) -> Visibility:
    """What the caller of this request may see (asked once per request, after `admit`)."""
    found = request.get(VISIBILITY_KEY)
    if found is None:
        found = request[VISIBILITY_KEY] = await request.app[IDENTITY].visibility(caller(request))
    return found


def authorize_static(request: web.Request, identities: Identities) -> str | None:
    """`authorize` for a caller the door knows without asking anyone (a configured static token),
    without a coroutine (the warm path): the credential kind once the caller is recorded and its
    namespace checked (403), or None when the door has to ask (then `authorize` decides)."""
    header = request.headers.get(hdrs.AUTHORIZATION)
    if not header:
        return None
    principal = identities.known_caller(header)
    if principal is None:
        return None
    request[WHO_KEY] = principal
    m = request.match_info
    namespace = m.get("namespace")
    if namespace is not None:  # (a static principal's reading is always decided now)
        try:
            identities.read_now(principal, namespace)
        except Forbidden:
            _bad_segment_first(request)
            raise
    return principal.kind


async def authorize(request: web.Request) -> str:
    """Authenticate the request's bearer token, record the caller, and refuse what it may not read (403).

    A route naming a whole module address asks whether the caller can read that module (for a Git
    host identity: its repository, as the host says); one naming only a namespace checks a
    namespace-scoped token's namespaces (lists are filtered by `visibility`). Returns the
    caller's credential kind (for the metrics). The caller (routing.py) tried
    `authorize_static` first.
    """
    identities = request.app[IDENTITY]
    principal = await identities.caller(request.headers.get(hdrs.AUTHORIZATION))
    _admit(request, identities, principal)
    if not _read_now(request, identities, principal):
        m = request.match_info
        if "name" in m and "system" in m:
            await identities.check_read(principal, request_address(request))
    return principal.kind


def _read_now(request: web.Request, identities: Identities, principal: Principal) -> bool:
    """True when the route's target is decided without asking anyone (no namespace: a listing,
    filtered by `visibility`; a namespace-scoped principal: its namespaces, Forbidden raised);
    False when the door asks the Git host (`check_read`)."""
    m = request.match_info
    namespace = m.get("namespace")
    if namespace is None:
        return True
    try:
        return identities.read_now(principal, namespace) or "name" not in m or "system" not in m
    except Forbidden:
        _bad_segment_first(request)
        raise


def _bad_segment_first(request: web.Request) -> None:
    """Before a 403 for a whole address: a bad segment is a 400 first, as for the others."""
    m = request.match_info
    if "name" in m and "system" in m:
        request_address(request)
