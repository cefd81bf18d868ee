"""`GET /v1/modules/{namespace}/{name}/{system}/consumers`: who calls a module ("Used by").

The consumers the usage scan found (gitreg/usage), as `consumers_view` shapes them for this
caller: the repositories the Git host says they can read by name, file, line and constraint
(paged like the list endpoints, `offset`/`limit` and `meta`); the others counted in `hidden`.
`installs` is the observed CI installs (gitreg/usage/installs.py) of the projects the caller may read
(`project`, its web page `url`, `version`, `at`), `installs_hidden` how many others there are.
"""

from __future__ import annotations

from typing import Any

from aiohttp import web

from gitreg.git.pool import Priority
from gitreg.usage.view import ConsumersView
from gitreg.web.address import request_address
from gitreg.web.api.browse import page_meta, parse_page
from gitreg.web.auth import visibility
from gitreg.web.keys import REGISTRY, USAGE
from gitreg.web.route_rules import Access
from gitreg.web.used_by import consumers_for, installs_for

usage_routes = web.RouteTableDef()


async def module_consumers(request: web.Request) -> ConsumersView:
    """The module the path names, its consumers as this caller may see them (404 for a module not served)."""
    address = request_address(request)
    _, found = await request.app[REGISTRY].versions(address)  # ModuleNotFound: a 404
    # Only a Git host's identity (its `hosts` set) is told names, and only of what it can read.
    return consumers_for(request, address, [v.canonical for v in found.versions], await visibility(request))


@usage_routes.get(
    "/v1/modules/{namespace}/{name}/{system}/consumers", access=Access.CREDENTIAL, priority=Priority.BROWSE
)
async def consumers(request: web.Request) -> web.Response:
    """The repositories whose `.tf` files call this module, with their constraints (see the module docstring)."""
    view = await module_consumers(request)
    page = parse_page(request)
    body: dict[str, Any] = {
        "meta": page_meta(request, page, len(view.shown)),
        "module": view.address,
        "latest": view.latest,
        "scanned": request.app[USAGE].enabled,
        "total": view.total,
        "repositories": view.repositories,
        "hidden": view.hidden,
        "consumers": [row.to_json() for row in view.shown[page.offset : page.offset + page.limit]],
        **await _installs(request),
    }
    return web.json_response(body)


async def _installs(request: web.Request) -> dict[str, Any]:
    """The observed CI installs of the module: by project where the caller may read it, else counted."""
    seen = await installs_for(request, request_address(request))
    return {"installs": [i.to_json() for i in seen.shown], "installs_hidden": seen.hidden}
