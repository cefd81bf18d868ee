"""What a route declares where it is defined: who may call it (`Access`) and the priority of
the git work it starts (`gitreg.git.pool.Priority`).

A route table entry carries both as keywords
(`@routes.get(path, access=Access.CREDENTIAL, priority=Priority.INSTALL)`); the request
wrapper (routing.py) applies them, and refuses a route that declares none. No table of paths
elsewhere to keep in step.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from aiohttp import web

from gitreg.git.pool import Priority


class Access(enum.Enum):
    """Who may call a route when registry auth is on (with it off, every route is open; a
    SESSION page still records its visitor)."""

    # No registry credential: what has its own check (/metrics its `[auth] metrics_token`, the
    # webhooks their shared secrets: Git hosts cannot send a registry token), what a client needs
    # before it has one (discovery, `terraform login`'s endpoints, the login pages), and health.
    OPEN = "open"
    CREDENTIAL = "credential"  # a registry credential (`Authorization: Bearer`): the registry API
    # A URL this registry signed, or a registry credential: Terraform sends no token on the
    # package fetch (shared/protocol/CLIENTS.md), so the download answer's archive URL is signed.
    SIGNED = "signed"
    SESSION = "session"  # a browser page behind the page session (pages/session.py's `guarded`)


@dataclass(frozen=True)
class RouteRule:
    """What a route declared: who may call it, and the priority of the git work it starts
    (INSTALL: what `terraform init` waits for; BROWSE: everything else a person waits for).
    Background work sets BACKGROUND itself (gitpool.background_task)."""

    access: Access
    priority: Priority


# The rule of the catch-all route (a path no route serves holds nothing to protect, so a
# typo'd URL says "no such endpoint", not "needs a token").
UNROUTED_RULE = RouteRule(Access.OPEN, Priority.BROWSE)
_PAGE_ACCESS = (Access.OPEN, Access.SESSION)


def declared(route: web.RouteDef, kwargs: dict[str, object], page: bool) -> RouteRule:
    """The rule `route` declares (its `access` and `priority` keywords, taken out of `kwargs`);
    ValueError when it declares none or one its kind cannot have (pages are open or behind the
    session, API routes never behind it)."""
    access, priority = kwargs.pop("access", None), kwargs.pop("priority", None)
    where = f"route {route.method} {route.path}"
    if not isinstance(access, Access) or not isinstance(priority, Priority) or priority is Priority.BACKGROUND:
        raise ValueError(f"{where} must declare access=Access.<...> and priority=Priority.INSTALL or BROWSE")
    if (access in _PAGE_ACCESS) != page and access is not Access.OPEN:
        raise ValueError(f"{where}: {access} is for {'API routes' if page else 'pages'} only")
    return RouteRule(access, priority)
