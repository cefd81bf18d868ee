"""The provider pages: `/providers` (the providers served from releases, a namespace filter) and
`/providers/{namespace}/{type}` (versions, platforms, the signing key, a copy-ready
`required_providers` block, the README of the latest release's tag). Rendered from the verified
release lists (providers/service.py); the README is read with git (providers/readme.py) and
rendered as a module's (readme.py: parse workers, the nh3 allow-list)."""

from __future__ import annotations

from dataclasses import dataclass

from aiohttp import web
from markupsafe import Markup

from gitreg.core.errors import GitregError
from gitreg.providers.release import ProviderVersion
from gitreg.web.auth import visibility
from gitreg.web.keys import PROVIDERS
from gitreg.web.pages.markdown import Links
from gitreg.web.pages.readme import READMES
from gitreg.web.pages.render import not_found, registry_host, render


@dataclass(frozen=True)
class ProviderRow:
    """One provider as a page lists it."""

    namespace: str
    type: str
    latest: ProviderVersion | None
    error: str | None = None


async def _rows(request: web.Request, namespace: str | None) -> list[ProviderRow]:
    providers = request.app[PROVIDERS]
    seen = await visibility(request)
    shown = [
        (ns, type_)
        for ns, type_ in providers.known()
        if (not namespace or ns == namespace.lower()) and seen.allows(ns, providers.source(ns, type_).repository)
    ]
    rows = []
    for (ns, type_), listing in zip(shown, await providers.listings(shown), strict=True):
        if isinstance(listing, GitregError):
            rows.append(ProviderRow(ns, type_, None, listing.message))
        else:
            rows.append(ProviderRow(ns, type_, listing.versions[0] if listing.versions else None))
    return rows


async def providers_page(request: web.Request) -> web.Response:
    """`/providers[?namespace=...]`: every provider served, with its latest version."""
    namespace = request.query.get("namespace", "")[:64]
    rows = await _rows(request, namespace or None)
    namespaces = sorted({ns for ns, _ in request.app[PROVIDERS].known()})
    return render(request, "providers.html", providers=rows, namespaces=namespaces, namespace=namespace)


def required_providers(host: str, namespace: str, type_: str, version: ProviderVersion) -> str:
    """A `required_providers` block ready to paste (`~> MAJOR.MINOR`, or the exact prerelease)."""
    text = version.version.split("+", 1)[0]
    major, minor, _ = text.split("-", 1)[0].split(".")
    wanted = text if "-" in text else f"~> {major}.{minor}"
    return (
        "terraform {\n  required_providers {\n"
        f'    {type_.replace("-", "_")} = {{\n      source  = "{host}/{namespace}/{type_}"\n'
        f'      version = "{wanted}"\n    }}\n  }}\n}}\n'
    )


async def provider_page(request: web.Request) -> web.Response:
    """`/providers/{namespace}/{type}`: versions, platforms, protocols, the signing key, the block to paste."""
    namespace, type_ = request.match_info["namespace"].lower(), request.match_info["type"]
    providers = request.app[PROVIDERS]
    try:
        source = providers.source(namespace, type_)
        if not (await visibility(request)).allows(namespace, source.repository):
            return not_found(request, f"There is no provider {namespace}/{type_} here.")
        listing = await providers.listing(namespace, type_)
    except GitregError as e:
        return not_found(request, e.message)
    if not listing.versions:
        return not_found(request, f"Provider {namespace}/{type_} has no release served yet.")
    latest = listing.versions[0]
    return render(
        request,
        "provider.html",
        namespace=namespace,
        type=type_,
        versions=listing.versions,
        refused=listing.refused,
        latest=latest,
        key=providers.signer(namespace, type_, latest),
        snippet=required_providers(registry_host(request), namespace, type_, latest),
        readme=await _readme(request, namespace, type_, latest),
    )


async def _readme(request: web.Request, namespace: str, type_: str, version: ProviderVersion) -> Markup:
    """The README at `version`'s tag as sanitized HTML, relative links into the repository at that tag ("" for none)."""
    found = await request.app[PROVIDERS].readme(namespace, type_, version)
    if found is None:
        return Markup("")
    return await request.app[READMES].html(found.text, Links(found.web_url, version.tag), found.commit)
