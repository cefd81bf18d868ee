"""The browsing half of the registry HTTP API: list, search, latest version, module details.

Follows the public registry's API (`shared/protocol/registry-http-api.md`): paginated lists
with a `meta` block, module summaries, details from the tagged tree. Registered after the
protocol routes in routes.py, so `.../{system}/versions` and `.../{version}/download` keep
their handlers; within this table `search` comes before `{namespace}` and `.../download`
before `.../{version}` for the same reason.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

from aiohttp import web

from gitreg.config.rules import ResolvedModule
from gitreg.core import urls
from gitreg.core.errors import BadRequest, GitregError, ModuleNotFound, VersionNotFound
from gitreg.core.names import ModuleAddress, parse_address
from gitreg.core.versions import ModuleVersions, TaggedVersion
from gitreg.index.details import DetailsService, ModuleDetails
from gitreg.index.model import ChangeLog, IndexedVersion, IndexEntry, OrgInfo
from gitreg.index.process import CommandPipe, IndexProcess, Role
from gitreg.index.store import ModuleIndex
from gitreg.observability.collectors import IndexCollector
from gitreg.observability.logs import JsonFormatter
from gitreg.registry.catalog import FILE_NAME, Catalog
from gitreg.web.auth import allowed_namespaces
from gitreg.web.keys import (
    CACHE,
    CATALOG,
    CONFIG,
    DETAILS,
    GIT_POOL,
    INDEX,
    INDEX_PROCESS,
    METRICS,
    MIRRORS,
    ORGS,
    REGISTRY,
    ROLE,
    SEED,
    SHARED,
)

log = logging.getLogger(__name__)

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


# Kept for callers of the old name; the one implementation is urls.web_url.
source_url = urls.web_url


def summary(
    app: web.Application, entry: IndexEntry, version: IndexedVersion | None = None, details: ModuleDetails | None = None
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
        "downloads": app[CATALOG].downloads(a),
        "verified": entry.verified,
    }


# ---------------------------------------------------------------------------------------
# Shared lookups: everything below reads the index (no git, no API call)
# ---------------------------------------------------------------------------------------


def _filters(
    request: web.Request, namespace: str | None = None, name: str | None = None
) -> tuple[Callable[[IndexEntry], bool], tuple[object, ...]]:
    """What the caller may see and asked for, as a predicate and a memo key."""
    provider = request.query.get("provider") or None  # grammar-checked by names.check_request
    verified_only = request.query.get("verified", "").lower() == "true"
    scope = allowed_namespaces(request)

    def keep(entry: IndexEntry) -> bool:
        a = entry.address
        return (
            (scope is None or a.namespace in scope)
            and (namespace is None or a.namespace == namespace)
            and (name is None or a.name == name)
            and (provider is None or a.system == provider)
            and (not verified_only or entry.verified)
        )

    return keep, (namespace, name, provider, verified_only, scope)


def _list_response(request: web.Request, entries: list[IndexEntry]) -> web.Response:
    page = parse_page(request)
    shown = entries[page.offset : page.offset + page.limit]
    body = {
        "meta": page_meta(request, page, len(entries)),
        "modules": [summary(request.app, e) for e in shown],
    }
    return web.json_response(body)


def _indexed(request: web.Request) -> tuple[IndexEntry, ResolvedModule]:
    """The indexed module a `{namespace}/{name}/{system}` path names; 404 when it is not listed."""
    m = request.match_info
    address = parse_address(m["namespace"], m["name"], m["system"])
    entry = request.app[INDEX].get(address)
    resolved = request.app[REGISTRY].resolve(address)  # 404 when nothing serves it (any more)
    if entry is None:
        raise ModuleNotFound(
            f"module {address} is not listed by this registry (yet): a module is listed once it has a SemVer "
            "tag and the index has seen it (a wildcard rule's modules after their first `terraform init`)"
        )
    return entry, resolved


async def _details_response(
    request: web.Request, entry: IndexEntry, resolved: ResolvedModule, shown: IndexedVersion
) -> web.Response:
    index = request.app[INDEX]
    # From memory or disk, never git: a version not read yet is a 503 (Retry-After) while the
    # index reads it in the background (the latest's are read when the module is indexed).
    details = await index.stored_details(entry, shown)
    a = entry.address
    systems = {
        e.address.system
        for e in index.listed(lambda e: e.address.namespace == a.namespace and e.address.name == a.name)
    }
    body = summary(request.app, entry, shown, details)
    body.update(
        root=details.root,
        submodules=details.submodules,
        examples=details.examples,
        providers=sorted(systems | {a.system}),
        versions=[v.canonical for v in entry.versions],
    )
    return web.json_response(body)


async def _served(request: web.Request) -> tuple[ModuleAddress, ResolvedModule, ModuleVersions]:
    """The module a path names, with its versions from the tag cache (the download redirect only)."""
    m = request.match_info
    address = parse_address(m["namespace"], m["name"], m["system"])
    resolved, versions = await request.app[REGISTRY].versions(address)
    if versions.versions:
        request.app[CATALOG].remember(resolved)
    return address, resolved, versions


def _latest_of(address: ModuleAddress, versions: ModuleVersions) -> TaggedVersion:
    latest = versions.latest()
    if latest is None:
        raise VersionNotFound(f"module {address} has no versions: no tag is a SemVer version")
    return latest


# ---------------------------------------------------------------------------------------
# Handlers (order matters: see the module docstring)
# ---------------------------------------------------------------------------------------


@browse_routes.get("/v1/modules")
@browse_routes.get("/v1/modules/")
async def list_modules(request: web.Request) -> web.Response:
    """Every listed module the caller may see, filtered by `provider` and `verified`."""
    keep, memo_key = _filters(request)
    return _list_response(request, request.app[INDEX].listed(keep, memo_key, allowed_namespaces(request)))


@browse_routes.get("/v1/modules/search")
async def search_modules(request: web.Request) -> web.Response:
    """Search namespace, name, system, description, topics and README words; best matches first."""
    query = request.query.get("q", "").strip()
    if not query:
        raise BadRequest("search needs a query: /v1/modules/search?q=<words>")
    namespace = request.query.get("namespace") or None  # grammar-checked by names.check_request
    keep, memo_key = _filters(request, namespace)
    catalog = request.app[CATALOG]
    found = request.app[INDEX].search(query, keep, (*memo_key, catalog.downloads_version), catalog.downloads)
    return _list_response(request, found)


@browse_routes.get("/v1/modules/{namespace}")
async def list_namespace(request: web.Request) -> web.Response:
    """The listed modules of one namespace."""
    namespace = request.match_info["namespace"]
    keep, memo_key = _filters(request, namespace)
    return _list_response(request, request.app[INDEX].listed(keep, memo_key, [namespace]))


@browse_routes.get("/v1/modules/{namespace}/{name}")
async def list_systems(request: web.Request) -> web.Response:
    """The latest version of a module for every system (provider) it is listed for."""
    namespace, name = request.match_info["namespace"], request.match_info["name"]
    scope = allowed_namespaces(request)

    def keep(entry: IndexEntry) -> bool:  # every system: this endpoint takes no filters
        return entry.address.name == name and (scope is None or namespace in scope)

    entries = request.app[INDEX].listed(keep, ("systems", namespace, name, scope), [namespace])
    if not entries:
        raise ModuleNotFound(f"no module {namespace}/{name} is listed by this registry (for any system)")
    return _list_response(request, entries)


@browse_routes.get("/v1/modules/{namespace}/{name}/{system}")
async def latest_module(request: web.Request) -> web.Response:
    """The latest version of a module, with its details."""
    entry, resolved = _indexed(request)
    return await _details_response(request, entry, resolved, entry.latest)


@browse_routes.get("/v1/modules/{namespace}/{name}/{system}/download")
async def download_latest(request: web.Request) -> web.Response:
    """302 to the download endpoint of the latest version."""
    address, _, versions = await _served(request)
    raise web.HTTPFound(f"/v1/modules/{address}/{_latest_of(address, versions).canonical}/download")


@browse_routes.get("/v1/modules/{namespace}/{name}/{system}/{version}")
async def module_version(request: web.Request) -> web.Response:
    """One version of a module, with its details."""
    entry, resolved = _indexed(request)
    requested = request.match_info["version"]
    found = entry.find(requested)
    if found is None:
        listed = ", ".join(v.canonical for v in entry.versions[:5])
        raise VersionNotFound(f"module {entry.address} has no version {requested}; the highest listed: {listed}")
    return await _details_response(request, entry, resolved, found)


# ---------------------------------------------------------------------------------------
# Resources
# ---------------------------------------------------------------------------------------


async def browse_services(app: web.Application) -> AsyncIterator[None]:
    """Cleanup context (after the core services): the catalog, the details service and the index.

    In Role.SERVE the index process builds the index (its process is started here); in Role.INDEX
    (that process) the catalog is not persisted: the serving process keeps it, and gives it the modules.
    """
    config = app[CONFIG]
    role = app[ROLE]
    storage = Path(config.storage.path)
    catalog = Catalog(config, storage / FILE_NAME)
    app[CATALOG] = catalog
    mirrors = app[MIRRORS]
    details = app[DETAILS] = DetailsService(mirrors, mirrors.git, app[GIT_POOL])
    registry = app[REGISTRY]
    orgs = app[ORGS]
    if role is Role.INDEX:
        for address in app[SEED].remembered:
            with contextlib.suppress(GitregError):
                catalog.remember(registry.resolve(address))

    def listable(address: ModuleAddress) -> ResolvedModule | None:
        """What serves `address` when it is listed: a rule naming it, an org's module, or a module
        a wildcard rule has served; resolved as a request would be (explicit, org, wildcard)."""
        try:
            resolved = registry.resolve(address)
        except GitregError:
            return None
        return resolved if resolved.rule.explicit or catalog.remembers(address) else None

    def sources() -> dict[ModuleAddress, ResolvedModule]:
        found = {}
        for address in (*catalog.listed(), *orgs.modules()):
            resolved = listable(address)
            if resolved is not None:
                found[address] = resolved
        return found

    def org_info(address: ModuleAddress) -> OrgInfo | None:
        repo = orgs.get(address)
        if repo is None:
            return None
        return OrgInfo(source=repo.web_url, description=repo.description, topics=repo.topics, marker=repo.pushed_at)

    # In the index process, from the start: the serving process is sent every change, and
    # forgets what is gone too.
    changes = ChangeLog() if role is Role.INDEX else None

    def gone(address: ModuleAddress) -> None:
        catalog.forget(address)
        if changes is not None:
            changes.forget(address)

    # With Redis: one replica indexes (the lease) and publishes; the others load what it wrote.
    # (The index process has no Redis: the serving process holds its place, see indexer.py.)
    seed = app[SEED] if role is Role.INDEX else None
    commands = CommandPipe() if role is Role.SERVE else None  # to the index process
    index = app[INDEX] = ModuleIndex(
        storage,
        sources=sources,
        resolve=listable,
        versions=registry.versions,
        details=details,
        refresh_seconds=config.cache.ttl_seconds,
        org_info=org_info,
        on_gone=gone,
        enabled=config.index.enabled,
        listed=orgs.complete,
        builds=role is not Role.SERVE,
        leading=(lambda: seed.leading) if seed is not None else app[SHARED].leading,
        changes=changes,
        on_wanted=commands.want if commands is not None else None,
    )
    # A wildcard rule's module becomes listable when it is first served; any fetched tag list
    # (a webhook, a `terraform init` after the TTL) may change what the index shows; an org's
    # enumeration or repository webhook says which of its modules were added, pushed to or removed.
    shared = catalog.shared = app[SHARED]
    process: IndexProcess | None = None
    if role is Role.SERVE:  # ... all of which the index process is told
        log_json = any(isinstance(h.formatter, JsonFormatter) for h in logging.getLogger().handlers)
        process = app[INDEX_PROCESS] = IndexProcess(
            config, index, catalog, orgs, app[CACHE], shared, commands, log_json=log_json
        )
        catalog.on_new = process.remember
        app[CACHE].on_fetched.append(process.fetched)
        orgs.subscribe(process.orgs_changed)
    if role is not Role.SERVE:
        catalog.on_new = lambda address: index.notice([address])
        app[CACHE].on_fetched.append(index.notice_repository)
        orgs.subscribe(lambda changes: index.notice(changes.all))
    index.on_written.append(shared.publish_index)
    shared.follow_index(process.adopt if process is not None else index.adopt)

    def downloads_changed() -> None:
        catalog.downloads_version += 1  # search ranks ties by downloads: remembered answers are void

    shared.on_downloads = downloads_changed
    app[METRICS].registry.register(IndexCollector(index, (lambda: process.starts) if process is not None else None))
    try:
        async with contextlib.AsyncExitStack() as stack:
            if role is not Role.INDEX:  # the index process's catalog is given, never written
                await stack.enter_async_context(contextlib.asynccontextmanager(catalog.lifetime)())
            await stack.enter_async_context(contextlib.asynccontextmanager(index.lifetime)())
            if process is not None and config.index.enabled:
                await stack.enter_async_context(contextlib.asynccontextmanager(process.lifetime)())
            yield
    finally:
        await details.close()  # its parse worker processes
