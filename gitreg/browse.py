"""The browsing half of the registry HTTP API: list, search, latest version, module details.

Follows the public registry's API (`shared/protocol/registry-http-api.md`): paginated lists
with a `meta` block, module summaries, details from the tagged tree. Registered after the
protocol routes in routes.py, so `.../{system}/versions` and `.../{version}/download` keep
their handlers; within this table `search` comes before `{namespace}` and `.../download`
before `.../{version}` for the same reason.
"""

from __future__ import annotations

import asyncio
import logging
import re
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlencode, urlsplit

from aiohttp import web

from .appkeys import CATALOG, CONFIG, DETAILS, EXECUTOR, MIRRORS, REGISTRY
from .auth import allowed_namespaces
from .catalog import FILE_NAME, Catalog
from .details import DetailsService, ModuleDetails
from .errors import BadRequest, GitregError, ModuleNotFound, VersionNotFound
from .names import NAME_RE, SYSTEM_RE, ModuleAddress, parse_address
from .rules import ResolvedModule
from .versions import ModuleVersions, TaggedVersion

log = logging.getLogger(__name__)

browse_routes = web.RouteTableDef()

DEFAULT_LIMIT = 15
MAX_LIMIT = 100
MAX_QUERY_CHARS = 200
# Query parameters carried into `next_url` (anything else a client sent is dropped).
_PAGE_PARAMS = ("namespace", "provider", "q", "verified")
_SCP_RE = re.compile(r"^(?:[A-Za-z0-9._-]+@)?(?P<host>[A-Za-z0-9.-]+):(?P<path>(?!//).*)$")
_NAME_EXPECTED = "1-64 letters, digits, '-' or '_', starting and ending with a letter or digit"

Keep = Callable[[ModuleAddress, ResolvedModule], bool]


@dataclass(frozen=True)
class Page:
    """The `offset` and `limit` actually applied to a list."""

    offset: int
    limit: int


@dataclass(frozen=True)
class Entry:
    """A listable module with its versions (at least one) and the latest of them."""

    address: ModuleAddress
    resolved: ResolvedModule
    versions: ModuleVersions
    latest: TaggedVersion


# ---------------------------------------------------------------------------------------
# Request parsing and response shaping
# ---------------------------------------------------------------------------------------


def _non_negative(request: web.Request, key: str) -> int | None:
    raw = request.query.get(key)
    if raw is None:
        return None
    # Digits only: "-1", "1.5", "1e3" and "" are refused, and a huge value cannot cost us.
    if not raw.isascii() or not raw.isdigit() or len(raw) > 12:
        raise BadRequest(f"{key} must be a non-negative integer (at most 12 digits), not {raw[:40]!r}")
    return int(raw)


def parse_page(request: web.Request) -> Page:
    """`offset` (default 0) and `limit` (default 15; 0 means the default; above 100 means 100)."""
    offset = _non_negative(request, "offset") or 0
    limit = _non_negative(request, "limit") or DEFAULT_LIMIT
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


def _filter_value(request: web.Request, key: str, grammar: re.Pattern[str], expected: str) -> str | None:
    value = request.query.get(key)
    if value is None or value == "":
        return None
    if not grammar.fullmatch(value):
        raise BadRequest(f"invalid {key} filter {value[:80]!r}: expected {expected}")
    return value


def source_url(clone_url: str) -> str:
    """The repository's web URL: https for http(s)/ssh/scp/git clone URLs, no `.git`, no credentials."""
    scp = _SCP_RE.match(clone_url) if "://" not in clone_url else None
    if scp is not None:
        host, path = scp.group("host"), scp.group("path")
        scheme, port = "https", None
    else:
        parts = urlsplit(clone_url)
        if parts.scheme not in ("https", "http", "ssh", "git", "git+ssh", "ssh+git") or not parts.hostname:
            return ""  # file:// and the like have no web page
        host, path = parts.hostname, parts.path
        # An ssh or git port is not the web server's port; an http(s) one is.
        scheme = parts.scheme if parts.scheme in ("https", "http") else "https"
        try:
            port = parts.port if parts.scheme in ("https", "http") else None
        except ValueError:  # a port that is not a number: show the host alone
            port = None
    path = path.strip("/").removesuffix(".git").removesuffix("/")
    if ":" in host:
        host = f"[{host}]"  # an IPv6 address
    netloc = f"{host}:{port}" if port else host
    return f"{scheme}://{netloc}/{path}" if path else f"{scheme}://{netloc}"


def summary(app: web.Application, entry: Entry, details: ModuleDetails | None, version: TaggedVersion | None = None) -> dict[str, Any]:
    """One module as the list, search and details endpoints show it."""
    shown = version or entry.latest
    a = entry.address
    return {
        "id": f"{a}/{shown.canonical}",
        "owner": "",
        "namespace": a.namespace,
        "name": a.name,
        "version": shown.canonical,
        "provider": a.system,
        "description": details.description if details else "",
        "source": source_url(entry.resolved.clone_url),
        "published_at": details.published_at if details else "",
        "downloads": app[CATALOG].downloads(a),
        "verified": entry.resolved.rule.verified,
    }


# ---------------------------------------------------------------------------------------
# Shared lookups
# ---------------------------------------------------------------------------------------


def _segment(request: web.Request, label: str) -> str:
    """A `{namespace}` or `{name}` path segment, checked against the registry grammar."""
    value = request.match_info[label]
    if not NAME_RE.fullmatch(value):
        raise BadRequest(f"invalid module {label} {value[:80]!r}: expected {_NAME_EXPECTED}")
    return value


def _visible(request: web.Request, address: ModuleAddress) -> bool:
    scope = allowed_namespaces(request)
    return scope is None or address.namespace in scope


async def _entry(app: web.Application, address: ModuleAddress) -> Entry | None:
    """The module with its versions, or None (logged) when its repository cannot be listed."""
    try:
        resolved, versions = await app[REGISTRY].versions(address)
    except ModuleNotFound as e:
        app[CATALOG].forget(address)
        log.info("not listing %s: %s", address, e.message)
        return None
    except GitregError as e:
        log.warning("not listing %s: %s", address, e.message)
        return None
    latest = versions.latest()
    return Entry(address, resolved, versions, latest) if latest is not None else None


async def _entries(request: web.Request, keep: Keep) -> list[Entry]:
    """Listed, visible modules for which `keep(address, resolved)` holds, with versions, sorted."""
    listed = request.app[CATALOG].listed()
    wanted = sorted(
        (a for a, r in listed.items() if _visible(request, a) and keep(a, r)),
        key=lambda a: (a.namespace.casefold(), a.name.casefold(), a.system, str(a)),
    )
    found = await asyncio.gather(*(_entry(request.app, a) for a in wanted))
    return [e for e in found if e is not None]


async def _details_for(app: web.Application, entries: list[Entry]) -> list[ModuleDetails | None]:
    return list(await asyncio.gather(*(app[DETAILS].try_get(e.resolved, e.latest) for e in entries)))


def _filters(request: web.Request, namespace: str | None = None) -> Keep:
    provider = _filter_value(request, "provider", SYSTEM_RE, "1-64 lowercase letters and digits")
    verified_only = request.query.get("verified", "").lower() == "true"

    def keep(address: ModuleAddress, resolved: ResolvedModule) -> bool:
        return (
            (namespace is None or address.namespace == namespace)
            and (provider is None or address.system == provider)
            and (not verified_only or resolved.rule.verified)
        )

    return keep


async def _list_response(request: web.Request, entries: list[Entry]) -> web.Response:
    page = parse_page(request)
    shown = entries[page.offset: page.offset + page.limit]
    details = await _details_for(request.app, shown)
    body = {
        "meta": page_meta(request, page, len(entries)),
        "modules": [summary(request.app, e, d) for e, d in zip(shown, details)],
    }
    return web.json_response(body)


async def _served(request: web.Request) -> tuple[ModuleAddress, ResolvedModule, ModuleVersions]:
    """The module a `{namespace}/{name}/{system}` path names, with its versions (remembered if listed by a wildcard)."""
    m = request.match_info
    address = parse_address(m["namespace"], m["name"], m["system"])
    resolved, versions = await request.app[REGISTRY].versions(address)
    if versions.versions:
        request.app[CATALOG].remember(resolved)
    return address, resolved, versions


async def _details_response(request: web.Request, address: ModuleAddress, resolved: ResolvedModule,
                            versions: ModuleVersions, shown: TaggedVersion) -> web.Response:
    latest = versions.latest()
    assert latest is not None  # `shown` is one of the versions
    entry = Entry(address, resolved, versions, latest)
    details = await request.app[DETAILS].get(resolved, shown)
    systems = {a.system for a in request.app[CATALOG].listed() if a.namespace == address.namespace and a.name == address.name}
    body = summary(request.app, entry, details, shown)
    body.update(
        root=details.root,
        submodules=details.submodules,
        providers=sorted(systems | {address.system}),
        versions=[tv.canonical for tv in versions.versions],
    )
    return web.json_response(body)


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
    return await _list_response(request, await _entries(request, _filters(request)))


@browse_routes.get("/v1/modules/search")
async def search_modules(request: web.Request) -> web.Response:
    """Search namespace, name, system and description; best matches first."""
    query = request.query.get("q", "").strip()
    if not query:
        raise BadRequest("search needs a query: /v1/modules/search?q=<words>")
    if len(query) > MAX_QUERY_CHARS:
        raise BadRequest(f"the search query is longer than {MAX_QUERY_CHARS} characters")
    namespace = _filter_value(request, "namespace", NAME_RE, _NAME_EXPECTED)
    entries = await _entries(request, _filters(request, namespace))
    details = await _details_for(request.app, entries)
    ranked = []
    for entry, detail in zip(entries, details):
        rank = search_rank(query, entry.address, detail.description if detail else "")
        if rank is not None:
            downloads = request.app[CATALOG].downloads(entry.address)
            ranked.append(((rank, -downloads, str(entry.address)), entry))
    ranked.sort(key=lambda pair: pair[0])
    return await _list_response(request, [entry for _, entry in ranked])


@browse_routes.get("/v1/modules/{namespace}")
async def list_namespace(request: web.Request) -> web.Response:
    """The listed modules of one namespace."""
    namespace = _segment(request, "namespace")
    return await _list_response(request, await _entries(request, _filters(request, namespace)))


@browse_routes.get("/v1/modules/{namespace}/{name}")
async def list_systems(request: web.Request) -> web.Response:
    """The latest version of a module for every system (provider) it is listed for."""
    namespace, name = _segment(request, "namespace"), _segment(request, "name")
    entries = await _entries(request, lambda a, r: a.namespace == namespace and a.name == name)
    if not entries:
        raise ModuleNotFound(f"no module {namespace}/{name} is listed by this registry (for any system)")
    return await _list_response(request, entries)


@browse_routes.get("/v1/modules/{namespace}/{name}/{system}")
async def latest_module(request: web.Request) -> web.Response:
    """The latest version of a module, with its details."""
    address, resolved, versions = await _served(request)
    return await _details_response(request, address, resolved, versions, _latest_of(address, versions))


@browse_routes.get("/v1/modules/{namespace}/{name}/{system}/download")
async def download_latest(request: web.Request) -> web.Response:
    """302 to the download endpoint of the latest version."""
    address, _, versions = await _served(request)
    raise web.HTTPFound(f"/v1/modules/{address}/{_latest_of(address, versions).canonical}/download")


@browse_routes.get("/v1/modules/{namespace}/{name}/{system}/{version}")
async def module_version(request: web.Request) -> web.Response:
    """One version of a module, with its details."""
    address, resolved, versions = await _served(request)
    _, found = await request.app[REGISTRY].find_version(address, request.match_info["version"])
    return await _details_response(request, address, resolved, versions, found)


# ---------------------------------------------------------------------------------------
# Search ranking
# ---------------------------------------------------------------------------------------


def search_rank(query: str, address: ModuleAddress, description: str) -> int | None:
    """Lower is better; None when the module does not match.

    0 the name is the query; 1 the name starts with it; 2 the name contains it (or every
    word of it); 3 the namespace or system is it, or `namespace/name/system` contains it;
    4 the description contains it; 5 every word appears somewhere.
    """
    q = query.casefold()
    name, namespace, system = address.name.casefold(), address.namespace.casefold(), address.system
    words = [w for w in re.split(r"[\s/]+", q) if w]
    if name == q:
        return 0
    if name.startswith(q):
        return 1
    if q in name or (len(words) > 1 and all(w in name for w in words)):
        return 2
    if q in (namespace, system) or q in f"{namespace}/{name}/{system}":
        return 3
    text = description.casefold()
    if q in text:
        return 4
    haystack = f"{namespace}/{name}/{system} {text}"
    if words and all(w in haystack for w in words):
        return 5
    return None


# ---------------------------------------------------------------------------------------
# Resources
# ---------------------------------------------------------------------------------------


async def browse_services(app: web.Application) -> AsyncIterator[None]:
    """Cleanup context (after the core services): the catalog and the details service."""
    config = app[CONFIG]
    catalog = Catalog(config, Path(config.storage.path) / FILE_NAME)
    app[CATALOG] = catalog
    mirrors = app[MIRRORS]
    details = DetailsService(mirrors, mirrors.git, app[EXECUTOR])
    app[DETAILS] = details
    try:
        async for _ in catalog.lifetime():
            yield
    finally:
        await details.close()  # its parse worker processes
