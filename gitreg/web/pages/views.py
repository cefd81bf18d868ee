"""The module browser's pages over the index (no git, no API call while rendering), and their routes.

Pages (fixed paths): `/` and `/modules/{namespace}/{name}` (listing.py),
`/modules/{namespace}/{name}/{system}[/{version}]` (sections: README, inputs, outputs,
dependencies, resources, submodules and examples; a version picker; copy-ready `module`
blocks), `/modules/{namespace}/{name}/{system}/{version}/files/{path}` (an image of the
module's folder: a README's diagram), with registry tokens configured `/login` and `/logout`
(session.py), and `/favicon.ico`. Any other path under `/modules/` is the HTML 404 page.

Everything comes from the index and the details it keeps on disk. Every page carries a
Content-Security-Policy without inline script, so a README can never run anything; the one
script (static/page.js: copy buttons, the section bar's mark, the reload of a page still being
read) is a static file and the pages work without it.
"""

from __future__ import annotations

import asyncio
import secrets
from collections.abc import AsyncIterator
from typing import Any

from aiohttp import hdrs, payload, web
from aiohttp.abc import AbstractStreamWriter
from aiohttp.typedefs import Handler

from gitreg.config.rules import match_rule
from gitreg.core.errors import GitregError, ModuleNotFound
from gitreg.core.names import ModuleAddress, check_version, parse_address
from gitreg.git.pool import Priority
from gitreg.identity.door import Visibility
from gitreg.index.details import ModuleDetails
from gitreg.index.files import checked_path
from gitreg.index.model import DetailsPending, IndexedVersion, IndexEntry, NotListedYet
from gitreg.web.auth import visibility
from gitreg.web.keys import BROWSE, CONFIG, REGISTRY
from gitreg.web.pages.listing import index_page, name_page, namespace_page, no_page
from gitreg.web.pages.markdown import Links
from gitreg.web.pages.providers import provider_page, providers_page
from gitreg.web.pages.readme import READMES as READMES  # (defined there: the provider pages use it too)
from gitreg.web.pages.readme import Readmes
from gitreg.web.pages.render import (
    HERE,
    host_note,
    not_found,
    page_error,
    registry_host,
    render,
    served_address,
    snippet,
)
from gitreg.web.pages.session import SESSIONS, Sessions, login, login_form, logout, sign_in
from gitreg.web.provenance import version_provenance
from gitreg.web.route_rules import Access
from gitreg.web.used_by import used_by

# The files endpoint's answers: a commit's files never change; an SVG can run no script, load
# nothing and is never read as another type (its own CSP wins over the pages', see routing.py).
FILE_HEADERS = {
    "Cache-Control": "private, max-age=31536000, immutable",
    "Content-Security-Policy": "default-src 'none'; style-src 'unsafe-inline'; sandbox",
    "X-Content-Type-Options": "nosniff",
}


def being_indexed(request: web.Request, address: ModuleAddress, why: NotListedYet) -> web.Response:
    """The 503 page of a module that is served but not listed yet: it says so, and reloads itself
    (page.js, after Retry-After seconds; a "Reload now" link without JavaScript)."""
    response = render(
        request,
        "error.html",
        status=503,
        heading="Being indexed",
        message=f"Module {address} is being indexed: its versions are being read from its repository. "
        "This page reloads in a moment.",
        reload_after=why.retry_after,
    )
    response.headers["Retry-After"] = str(why.retry_after)
    return response


async def _shown_version(request: web.Request) -> tuple[IndexEntry, IndexedVersion] | web.Response:
    """The module and version a module page shows, or the 404 page saying which part is missing."""
    m = request.match_info
    try:
        address = parse_address(m["namespace"], m["name"], m["system"])
        if "version" in m:
            check_version(m["version"])
    except GitregError:
        return not_found(request, "There is no such module: the address is not a registry module address.")
    browse = request.app[BROWSE]
    entry = browse.find(address)
    seen = await visibility(request)
    if not seen.allows_namespace(address.namespace) or (
        entry is not None and not seen.allows(address.namespace, entry.repository)
    ):
        return not_found(request, f"No module {address} is listed by this registry.")
    if entry is None:
        why = browse.unlisted(address)
        if isinstance(why, NotListedYet):
            return being_indexed(request, address, why)
        if browse.untagged(address):
            return not_found(
                request,
                f"Module {address} has no SemVer tag yet: it is listed once its repository has a tag like v1.0.0.",
            )
        return not_found(request, unlisted_message(request, address))
    version = entry.latest if "version" not in m else entry.find(m["version"])
    if version is None:
        return not_found(request, f"Module {address} has no version {m['version']}.")
    return entry, version


def unlisted_message(request: web.Request, address: ModuleAddress) -> str:
    """What the 404 page says of a module the index does not list: a wildcard rule lists a module
    only once it served it (it cannot enumerate its repositories), which the page then says."""
    wildcards = tuple(rule for rule in request.app[CONFIG].modules if not rule.explicit)
    resolved = match_rule(wildcards, address)
    if resolved is None:
        return f"No module {address} is listed by this registry."
    return (
        f"Module {address} is not listed yet: the rule {resolved.rule.pattern} serves it, and lists a module "
        "after its first install (a rule with wildcards cannot list its repositories): `terraform init` with "
        f'source = "{registry_host(request)}/{address}" installs it (when that repository has a SemVer tag), '
        "and this page shows it from then on."
    )


async def _stored_details(
    request: web.Request, entry: IndexEntry, version: IndexedVersion
) -> tuple[ModuleDetails | None, int] | web.Response:
    """(details, reload_after) from memory or disk, never git while rendering; or the error page.

    A version not read yet is read in the background and the page says so and reloads itself
    after `reload_after` seconds (0: the details are there).
    """
    try:
        return await request.app[BROWSE].served_details(entry, version), 0
    except DetailsPending as e:
        return None, e.retry_after
    except ModuleNotFound:
        return not_found(request, f"No module {entry.address} is listed by this registry.")
    except GitregError as e:
        return render(request, "error.html", status=e.status, heading="Details unavailable", message=e.message)


def _linked(request: web.Request, part: dict[str, Any], seen: Visibility) -> dict[str, Any]:
    """`part` with each dependency this registry serves (and the visitor may see) given its page."""
    browse = request.app[BROWSE]
    dependencies = []
    for d in part.get("dependencies", []):
        address = served_address(request, d.get("source", ""))
        found = browse.find(address) if address is not None else None
        page = ""
        if found is not None and seen.allows(found.address.namespace, found.repository):
            page = f"/modules/{found.address}"
        dependencies.append({**d, "page": page})
    return {**part, "dependencies": dependencies}


def files_url(entry: IndexEntry, version: IndexedVersion) -> str:
    """The files endpoint of a module version (module_file): where its README's images come from."""
    return f"/modules/{entry.address}/{version.canonical}/files/"


async def _rendered(
    request: web.Request, part: dict[str, Any], entry: IndexEntry, version: IndexedVersion
) -> dict[str, Any]:
    """A module folder's details with its README (`readme_html`) and the descriptions of its inputs and
    outputs (`description_html`) as sanitized HTML; relative URLs from the folder's own place."""
    readmes, seen = request.app[READMES], await visibility(request)
    base = f"{entry.path}/{part.get('path', '')}".strip("/")
    links = Links(entry.source, version.tag, base, entry.path.strip("/"), files_url(entry, version))
    inputs, outputs = part.get("inputs", []), part.get("outputs", [])
    texts = [str(d.get("description", "")) for d in (*inputs, *outputs)]
    readme, described = await asyncio.gather(
        readmes.html(part.get("readme", ""), links, version.sha), readmes.descriptions(texts, links, version.sha)
    )
    if described is not None:
        html = iter(described)
        inputs = [{**d, "description_html": next(html)} for d in inputs]
        outputs = [{**d, "description_html": next(html)} for d in outputs]
    return {
        **_linked(request, part, seen),
        "inputs": inputs,
        "outputs": outputs,
        "readme_html": readme,
        "snippet": snippet(request, entry, version, part.get("path", "")),
    }


async def _version_dates(
    request: web.Request, entry: IndexEntry, version: IndexedVersion, published_at: str
) -> dict[str, str]:
    """canonical -> date of each version for the picker: the mirror's, and the latest's and the shown one's."""
    dates = await request.app[BROWSE].version_dates(entry)
    for canonical, known in ((entry.latest.canonical, entry.published_at), (version.canonical, published_at)):
        if known:
            dates[canonical] = known
    return dates


async def module_page(request: web.Request) -> web.Response:
    """One module at its latest version, or at `{version}`."""
    shown = await _shown_version(request)
    if isinstance(shown, web.Response):
        return shown
    entry, version = shown
    found = await _stored_details(request, entry, version)
    if isinstance(found, web.Response):
        return found
    details, reload_after = found
    address = entry.address
    parts = [details.root, *details.submodules, *details.examples] if details else []
    rendered = await asyncio.gather(*(_rendered(request, part, entry, version) for part in parts))
    root = rendered[0] if rendered else {}
    submodules = rendered[1 : 1 + len(details.submodules)] if details else []
    examples = rendered[1 + len(submodules) :] if details else []
    published_at = (details.published_at if details else "") or (entry.published_at if version == entry.latest else "")
    signature, refused = await request.app[BROWSE].signature(entry, version)
    declared = request.app[REGISTRY].declared_for(address)  # .gitreg.toml: banners and picker badges
    return render(
        request,
        "module.html",
        entry=entry,
        version=version,
        latest=entry.latest,
        versions=entry.versions,
        snippet=snippet(request, entry, version),
        host_note=host_note(request),
        readme=root.get("readme_html", ""),
        root=root,
        submodules=submodules,
        examples=examples,
        downloads=request.app[BROWSE].downloads(address),
        systems=request.app[BROWSE].systems(address),
        published_at=published_at,
        version_dates=await _version_dates(request, entry, version, published_at),
        # The version shown, never another's: the entry's (an org's description first) for the latest only.
        description=entry.description if version == entry.latest else (details.description if details else ""),
        details_missing=details is None,
        details_pending=bool(reload_after),
        reload_after=reload_after,
        used_by=await used_by(request, entry),
        signature=signature,  # [signing]: "Signed by <principal>", or why this version is not served
        refused=refused,
        refused_versions=request.app[BROWSE].refused_versions(entry),
        provenance=await version_provenance(request, entry, version, details),  # commit, archive sha256, moved tag
        lifecycle=declared.details(version),
        marks=declared.marks(entry.versions),
    )


async def module_file(request: web.Request) -> web.Response:
    """An image of the module's folder at that version (a README's diagram), immutable per commit."""
    shown = await _shown_version(request)
    if isinstance(shown, web.Response):
        return shown
    entry, version = shown
    headers = {**FILE_HEADERS, "ETag": f'"{version.sha}"'}
    try:
        checked_path(request.match_info["path"])
        if request.headers.get("If-None-Match") == headers["ETag"]:
            return web.Response(status=304, headers=headers)
        data, content_type = await request.app[BROWSE].image(entry, version, request.match_info["path"])
    except GitregError as e:
        return page_error(request, e.status, e.message)
    return web.Response(body=ImagePayload(data, content_type), headers=headers)


class ImagePayload(payload.Payload):
    """An image's bytes sent a piece at a time, each piece once the connection took the last: a
    slow reader's buffer holds a piece, never a copy of the image (issue 33)."""

    _value: memoryview
    PIECE = 64 << 10

    def __init__(self, value: memoryview, content_type: str) -> None:
        super().__init__(value, content_type=content_type)
        self._size = value.nbytes

    def decode(self, encoding: str = "utf-8", errors: str = "strict") -> str:
        return bytes(self._value).decode(encoding, errors)

    async def write(self, writer: AbstractStreamWriter) -> None:
        await self.write_with_length(writer, None)

    async def write_with_length(self, writer: AbstractStreamWriter, content_length: int | None) -> None:
        view = self._value if content_length is None else self._value[:content_length]
        for start in range(0, view.nbytes, self.PIECE):
            await writer.write(view[start : start + self.PIECE])  # waits while the connection's buffer is full


def add_ui(app: web.Application) -> web.RouteTableDef:
    """Set up the pages (when `[ui] enabled`: the session signer, the README workers); their
    routes and the static files', each with its rule, for the app to register as pages (routing.Routes)."""
    pages = web.RouteTableDef()
    config = app[CONFIG]
    if not config.ui.enabled:
        return pages
    app[SESSIONS] = Sessions(config.auth.signing_key or secrets.token_hex(32))
    app[READMES] = Readmes()
    app.cleanup_ctx.append(_readme_workers)
    # Pages start git work only at BROWSE priority. SESSION: behind the page session (with registry
    # auth on; the visitor is recorded either way); OPEN: how one signs in, and the static files.
    GET, POST, OPEN, SESSION = hdrs.METH_GET, hdrs.METH_POST, Access.OPEN, Access.SESSION
    table: list[tuple[str, str, str, Access, Handler]] = [
        (GET, "/", "ui-index", SESSION, index_page),
        (GET, "/modules", "ui-modules", SESSION, namespace_page),
        (GET, "/modules/", "ui-modules-slash", SESSION, namespace_page),
        (GET, "/modules/{namespace}", "ui-namespace", SESSION, namespace_page),
        (GET, "/modules/{namespace}/{name}", "ui-name", SESSION, name_page),
        (GET, "/modules/{namespace}/{name}/{system}", "ui-module", SESSION, module_page),
        (GET, "/modules/{namespace}/{name}/{system}/{version}", "ui-version", SESSION, module_page),
        (GET, "/modules/{namespace}/{name}/{system}/{version}/files/{path:.+}", "ui-file", SESSION, module_file),
        (GET, "/login", "ui-login-form", OPEN, login_form),
        (POST, "/login", "ui-login", OPEN, login),
        (GET, "/login/with/{forge}", "ui-signin", OPEN, sign_in),
        (POST, "/logout", "ui-logout", OPEN, logout),
        (GET, "/static/{file:.+}", "ui-static", OPEN, _static),
        (GET, "/favicon.ico", "ui-favicon", OPEN, _favicon),
        # Registered last: any other path under /modules/ is the 404 page, never the API's JSON.
        (GET, "/modules/{rest:.+}", "ui-no-page", SESSION, no_page),
    ]
    if config.providers:  # providers from releases (pages/providers.py)
        table[-1:-1] = [
            (GET, "/providers", "ui-providers", SESSION, providers_page),
            (GET, "/providers/{namespace}/{type}", "ui-provider", SESSION, provider_page),
        ]
    for method, path, name, access, handler in table:
        pages.route(method, path, name=name, access=access, priority=Priority.BROWSE)(handler)
    return pages


# The static files, by name: nothing else under /static/ is served (no path is ever joined).
STATIC_FILES = frozenset(path.name for path in (HERE / "static").iterdir() if path.is_file())


async def _static(request: web.Request) -> web.FileResponse:
    """`/static/<file>`: the stylesheet, the script and the icons (ETag, Last-Modified, ranges: FileResponse's)."""
    name = request.match_info["file"]
    if name not in STATIC_FILES:
        raise web.HTTPNotFound()
    return web.FileResponse(HERE / "static" / name)


async def _favicon(request: web.Request) -> web.FileResponse:
    """`/favicon.ico`, which browsers ask for on their own (the pages link the SVG icon too)."""
    return web.FileResponse(HERE / "static" / "favicon.ico", headers={"Cache-Control": "public, max-age=86400"})


async def _readme_workers(app: web.Application) -> AsyncIterator[None]:
    """The README workers live as long as the app (started on first use, killed at cleanup)."""
    yield
    await app[READMES].close()
