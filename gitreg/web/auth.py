"""Registry authentication on every `/v1/...` request, and what the caller may see.

`Authorization: Bearer <token>`: a static `[auth] tokens` entry, a `terraform login` token, a CI
job's OIDC JWT or a Git host's own token; identity/ (the `Identities` facade) says who it is and
what it may read. The request wrapper (routing.py) and the pages' session guard record the caller
with `admit`; list, search and the pages then ask `visibility(request)`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, cast

from aiohttp import hdrs, web

from gitreg.core.errors import Unauthorized
from gitreg.core.secrets import bearer_token
from gitreg.identity.model import Principal
from gitreg.identity.service import NO_TOKEN
from gitreg.identity.static import TokenChecker, token_id
from gitreg.identity.visibility import Visibility
from gitreg.observability.logs import WHO_KEY
from gitreg.web.address import request_address
from gitreg.web.keys import IDENTITIES

if TYPE_CHECKING:
    from gitreg.identity.service import Identities

__all__ = ["PRINCIPAL_KEY", "TokenChecker", "admit", "authorize", "authorize_static", "token_id", "visibility"]

# Who the caller is (identity/model.py); absent on an open registry. The access log's and the
# metrics' WHO_KEY, read as what this layer stores there: one entry, set once per request.
PRINCIPAL_KEY = cast("web.RequestKey[Principal]", WHO_KEY)
# What the caller sees in lists, search and pages (asked of the Git host once per recheck_seconds).
VISIBILITY_KEY = web.RequestKey[Visibility]("visibility")


async def admit(request: web.Request, principal: Principal | None) -> None:
    """Record who makes this request (API or page) and what it may see.

    The pages' session guard calls this for a signed-in visitor (any credential kind) before the
    page handler runs; None means an open registry (everything visible). Sets the principal, its
    namespaces, the access log's name, the metrics' credential kind, and the visibility (for a
    Git host identity, the host's listing of what its token sees: cached per recheck_seconds).
    """
    seen = None
    if principal is None or principal.kind in ("static", "oidc"):
        # No host to ask: decided now (namespaces only), so pages and lists never wait.
        seen = Visibility(namespaces=principal.namespaces if principal else None)
    _record(request, principal, seen)


def _record(request: web.Request, principal: Principal | None, seen: Visibility | None) -> None:
    if principal is not None:
        request[PRINCIPAL_KEY] = principal
    if seen is not None:
        request[VISIBILITY_KEY] = seen


async def visibility(request: web.Request) -> Visibility:
    """What the caller of this request may see (asked once per request, after `admit`)."""
    found = request.get(VISIBILITY_KEY)
    if found is None:
        found = request[VISIBILITY_KEY] = await request.app[IDENTITIES].visibility(request.get(PRINCIPAL_KEY))
    return found


def authorize_static(request: web.Request, identities: Identities) -> str | None:
    """`authorize` for a configured static token, without a coroutine (the warm path): the
    credential kind once the caller is recorded and its namespaces checked (403), or None when
    the header names no configured token (then `authorize` decides)."""
    header = request.headers.get(hdrs.AUTHORIZATION)
    if not header:
        return None
    principal = identities.static.by_header(header)
    if principal is None:
        return None
    # Made once per configured token; its reading is decided by namespace (a list asks
    # `visibility`, which the identities derive from those namespaces).
    request[PRINCIPAL_KEY] = principal
    _check_static(request, identities, principal)
    return principal.kind


async def authorize(request: web.Request) -> str:
    """Authenticate the request's bearer token, record the caller, and refuse what it may not read (403).

    A route naming a whole module address asks whether the caller can read that module (for a Git
    host identity: its repository, as the host says); one naming only a namespace checks a
    namespace-scoped token's namespaces (lists are filtered by `visibility`). Returns the
    caller's credential kind (for the metrics). The caller (routing.py) tried
    `authorize_static` first.
    """
    header = request.headers.get(hdrs.AUTHORIZATION, "")
    presented = bearer_token(header)
    if header and presented is None:
        raise Unauthorized("the Authorization header must be 'Bearer <token>'")
    if not presented:
        raise Unauthorized(NO_TOKEN)
    identities = request.app[IDENTITIES]
    principal = await identities.authenticate_dynamic(presented)
    await admit(request, principal)
    m = request.match_info
    namespace = m.get("namespace")
    if namespace is None:
        return principal.kind
    if "name" in m and "system" in m:
        await identities.check_read(principal, request_address(request))
    else:
        identities.check_namespace(principal, namespace)
    return principal.kind


def _check_static(request: web.Request, identities: Identities, principal: Principal) -> None:
    """`identities.check_read`/`check_namespace` for a static principal, without a coroutine."""
    if principal.namespaces is None:  # every namespace: nothing to refuse (check_request checks the segments)
        return
    m = request.match_info
    namespace = m.get("namespace")
    if namespace is None:
        return
    if "name" in m and "system" in m:
        request_address(request)  # a bad segment: 400 before any 403, as for the others
    identities.check_namespace(principal, namespace)
