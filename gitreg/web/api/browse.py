"""The browsing half of the registry HTTP API: list, search, latest version, module details.

Follows the public registry's API (`shared/protocol/registry-http-api.md`): paginated lists
with a `meta` block, module summaries, details from the tagged tree. Registered after the
protocol routes in modules.py, so `.../{system}/versions` and `.../{version}/download` keep
their handlers; within this table `search` comes before `{namespace}` and `.../download`
before `.../{version}` for the same reason. The handlers ask one facade, BrowseService.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlencode

from aiohttp import web

from gitreg.core.errors import BadRequest, ModuleNotFound, VersionNotFound
from gitreg.git.pool import Priority
from gitreg.index.browse import BrowseService
from gitreg.index.details import ModuleDetails
from gitreg.index.model import IndexedVersion, IndexEntry
from gitreg.web.address import request_address
from gitreg.web.auth import visibility
from gitreg.web.keys import BROWSE, REGISTRY
from gitreg.web.provenance import version_provenance
from gitreg.web.route_rules import Access

browse_routes = web.RouteTableDef()

DEFAULT_LIMIT = 15
MAX_LIMIT = 100
# Query parameters carried into `next_url` (anything else a client sent is dropped).
_PAGE_PARAMS = ("namespace", "provider", "q", "verified")


@dataclass(frozen=True)
class Page:
    """The `offset` and `limit` actually applied to a list."""

    offset: int
    limit: int


# ---------------------------------------------------------------------------------------
# Request parsing and response shaping
# ---------------------------------------------------------------------------------------


def parse_page(request: web.Request) -> Page:
    """`offset` (default 0) and `limit` (default 15; 0 means the default; above 100 means 100).

    Both are already digits only: names.check_request refused anything else before any handler.
    """
    offset = int(request.query.get("offset") or 0)
    limit = int(request.query.get("limit") or 0) or DEFAULT_LIMIT
    return Page(offset, min(limit, MAX_LIMIT))


def page_meta(request: web.Request, page: Page, total: int) -> dict[str, Any]:
    """The spec's `meta`: `next_offset`/`next_url` only when more follow, `prev_offset` only past 0."""
    meta: dict[str, Any] = {"limit": page.limit, "current_offset": page.offset}
    if page.offset + page.limit < total:
        meta["next_offset"] = page.offset + page.limit
    if page.offset > 0:
        # Past the end, the previous page is the last one that has results.
        meta["prev_offset"] = max(0, min(page.offset, total) - page.limit)
    if "next_offset" in meta:
        params = {k: request.query[k] for k in _PAGE_PARAMS if k in request.query}
        params.update(limit=str(page.limit), offset=str(meta["next_offset"]))
        meta["next_url"] = f"{request.path}?{urlencode(sorted(params.items()))}"
    return meta


def summary(
    browse: BrowseService,
    entry: IndexEntry,
    version: IndexedVersion | None = None,
    details: ModuleDetails | None = None,
) -> dict[str, Any]:
    """One module as the list, search and details endpoints show it."""
    shown = version or entry.latest
    a = entry.address
    latest = shown == entry.latest
    return {
        "id": f"{a}/{shown.canonical}",
        "owner": "",
        "namespace": a.namespace,
        "name": a.name,
        "version": shown.canonical,
        "provider": a.system,
        "description": entry.description if latest or details is None else details.description,
        "source": entry.source,
        "published_at": entry.published_at if latest or details is None else details.published_at,
        "downloads": browse.downloads(a),
        "verified": entry.verified,
    }


# ---------------------------------------------------------------------------------------
# Shared lookups: everything below reads the index (no git, no API call)
# ---------------------------------------------------------------------------------------


async def _filters(
    request: web.Request, namespace: str | None = None, name: str | None = None
) -> tuple[Callable[[IndexEntry], bool], tuple[object, ...]]:
    """What the caller may see and asked for, as a predicate and a memo key."""
    provider = request.query.get("provider") or None  # grammar-checked by names.check_request
    verified_only = request.query.get("verified", "").lower() == "true"
    seen = await visibility(request)

    def keep(entry: IndexEntry) -> bool:
        a = entry.address
        return (
            (namespace is None or a.namespace == namespace)
            and (name is None or a.name == name)
            and (provider is None or a.system == provider)
            and (not verified_only or entry.verified)
            and seen.allows(a.namespace, entry.repository)
        )

    return keep, (namespace, name, provider, verified_only, seen)


def _list_response(request: web.Request, entries: list[IndexEntry]) -> web.Response:
    page = parse_page(request)
    shown = entries[page.offset : page.offset + page.limit]
    body = {
        "meta": page_meta(request, page, len(entries)),
        "modules": [summary(request.app[BROWSE], e) for e in shown],
    }
    return web.json_response(body)


def _indexed(request: web.Request) -> IndexEntry:
    """The indexed module a `{namespace}/{name}/{system}` path names; 404 when it is not listed."""
    return request.app[BROWSE].indexed(request_address(request))


async def _details_response(request: web.Request, entry: IndexEntry, shown: IndexedVersion) -> web.Response:
    browse = request.app[BROWSE]
    details, systems = await browse.details(entry, shown)
    body = summary(browse, entry, shown, details)
    signature, refused = await browse.signature(entry, shown)
    body.update(
        root=details.root,
        submodules=details.submodules,
        examples=details.examples,
        providers=systems,
        versions=[v.canonical for v in entry.versions],
        # [signing]: who signed this version, and why it is not served where signatures are required
        signature=signature,
        signature_refused=refused,
        refused_versions=sorted(browse.refused_versions(entry)),
    )
    body.update((await version_provenance(request, entry, shown, details)).to_json())  # commit, archive_sha256, moved
    # .gitreg.toml: `deprecation`, `revoked` (each null or with its reason) and `declaration_problem`
    body.update(request.app[REGISTRY].declared_for(entry.address).details(shown))
    return web.json_response(body)


# ---------------------------------------------------------------------------------------
# Handlers (order matters: see the module docstring)
# ---------------------------------------------------------------------------------------


@browse_routes.get("/v1/modules", access=Access.CREDENTIAL, priority=Priority.BROWSE)
@browse_routes.get("/v1/modules/", access=Access.CREDENTIAL, priority=Priority.BROWSE)
async def list_modules(request: web.Request) -> web.Response:
    """Every listed module the caller may see, filtered by `provider` and `verified`."""
    keep, memo_key = await _filters(request)
    seen = await visibility(request)
    return _list_response(request, request.app[BROWSE].listed(keep, memo_key, seen.namespaces))


@browse_routes.get("/v1/modules/search", access=Access.CREDENTIAL, priority=Priority.BROWSE)
async def search_modules(request: web.Request) -> web.Response:
    """Search namespace, name, system, description, topics and README words; best matches first."""
    query = request.query.get("q", "").strip()
    if not query:
        raise BadRequest("search needs a query: /v1/modules/search?q=<words>")
    namespace = request.query.get("namespace") or None  # grammar-checked by names.check_request
    keep, memo_key = await _filters(request, namespace)
    return _list_response(request, request.app[BROWSE].search(query, keep, memo_key))


@browse_routes.get("/v1/modules/{namespace}", access=Access.CREDENTIAL, priority=Priority.BROWSE)
async def list_namespace(request: web.Request) -> web.Response:
    """The listed modules of one namespace."""
    namespace = request.match_info["namespace"]
    keep, memo_key = await _filters(request, namespace)
    return _list_response(request, request.app[BROWSE].listed(keep, memo_key, [namespace]))


@browse_routes.get("/v1/modules/{namespace}/{name}", access=Access.CREDENTIAL, priority=Priority.BROWSE)
async def list_systems(request: web.Request) -> web.Response:
    """The latest version of a module for every system (provider) it is listed for."""
    namespace, name = request.match_info["namespace"], request.match_info["name"]
    seen = await visibility(request)

    def keep(entry: IndexEntry) -> bool:  # every system: this endpoint takes no filters
        return entry.address.name == name and seen.allows(namespace, entry.repository)

    entries = request.app[BROWSE].listed(keep, ("systems", namespace, name, seen), [namespace])
    if not entries:
        raise ModuleNotFound(f"no module {namespace}/{name} is listed by this registry (for any system)")
    return _list_response(request, entries)


@browse_routes.get("/v1/modules/{namespace}/{name}/{system}", access=Access.CREDENTIAL, priority=Priority.BROWSE)
async def latest_module(request: web.Request) -> web.Response:
    """The latest version of a module, with its details."""
    entry = _indexed(request)
    return await _details_response(request, entry, entry.latest)


@browse_routes.get(
    "/v1/modules/{namespace}/{name}/{system}/download", access=Access.CREDENTIAL, priority=Priority.BROWSE
)
async def download_latest(request: web.Request) -> web.Response:
    """302 to the download endpoint of the latest version."""
    address = request_address(request)
    latest = await request.app[BROWSE].latest(address)
    raise web.HTTPFound(f"/v1/modules/{address}/{latest.canonical}/download")


@browse_routes.get(
    "/v1/modules/{namespace}/{name}/{system}/{version}", access=Access.CREDENTIAL, priority=Priority.BROWSE
)
async def module_version(request: web.Request) -> web.Response:
    """One version of a module, with its details."""
    entry = _indexed(request)
    requested = request.match_info["version"]
    found = entry.find(requested)
    if found is None:
        listed = ", ".join(v.canonical for v in entry.versions[:5])
        raise VersionNotFound(f"module {entry.address} has no version {requested}; the highest listed: {listed}")
    return await _details_response(request, entry, found)
