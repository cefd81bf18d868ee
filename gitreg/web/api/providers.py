"""HTTP handlers of the provider registry protocol (providers.v1), served from releases.

`versions` and `download` are asked with the registry token, as modules are (a Git host
identity reads a provider when it can read its repository); the three URLs a download answer
gives (the zip, SHA256SUMS, its signature) are gitreg-signed and expiring, because Terraform
fetches them without any credential, and `files` streams them from the Git host with gitreg's
own credential (SHA256SUMS and its signature from memory: they were read to verify the release).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import re
from urllib.parse import urlsplit

from aiohttp import web

from gitreg.config.model import PROVIDER_TYPE_RE
from gitreg.core.errors import BadRequest, GitregError, ModuleNotFound
from gitreg.git.pool import Priority
from gitreg.providers.fetches import NotKept
from gitreg.providers.release import Package
from gitreg.web.auth import caller, visibility
from gitreg.web.files import SEND_CHUNK, HeldFileResponse
from gitreg.web.keys import IDENTITY, PROVIDERS, SIGNER
from gitreg.web.origin import base_url
from gitreg.web.route_rules import Access

log = logging.getLogger(__name__)

provider_routes = web.RouteTableDef()

PROVIDERS_V1 = "/v1/providers/"
FILES_ROUTE = "/v1/providers/{namespace}/{type}/{version}/files/{filename}"
_PLATFORM_RE = re.compile(r"[a-z0-9]{1,32}", re.ASCII)
_ZIP_HEADERS = {"Content-Type": "application/zip", "Cache-Control": "private, max-age=3600, immutable"}


def _type(request: web.Request) -> str:
    type_ = request.match_info["type"]
    if not PROVIDER_TYPE_RE.fullmatch(type_):
        raise BadRequest(f"invalid provider type {type_[:64]!r}: expected lowercase letters, digits and '-'")
    return type_


async def _readable(request: web.Request, namespace: str, type_: str) -> None:
    """Forbidden unless the caller may read the provider (a Git host identity: its repository)."""
    source = request.app[PROVIDERS].source(namespace, type_)
    principal = caller(request)
    if principal is not None:
        await request.app[IDENTITY].check_read_repository(
            principal, namespace, source.repository, f"provider {namespace}/{type_}"
        )


@provider_routes.get("/v1/providers", access=Access.CREDENTIAL, priority=Priority.BROWSE)
async def provider_list(request: web.Request) -> web.Response:
    """The providers served (each rule's type, the types of `*` rules the orgs' repositories name, and
    those asked for so far) the caller may see, with their versions; `?namespace=` narrows it."""
    providers = request.app[PROVIDERS]
    seen = await visibility(request)
    wanted = request.query.get("namespace", "").lower()
    shown = [
        (namespace, type_)
        for namespace, type_ in providers.known()
        if (not wanted or namespace == wanted) and seen.allows(namespace, providers.source(namespace, type_).repository)
    ]
    found = []
    for (namespace, type_), listing in zip(shown, await providers.listings(shown), strict=True):
        versions = [] if isinstance(listing, GitregError) else [v.version for v in listing.versions]
        found.append({"id": f"{namespace}/{type_}", "namespace": namespace, "type": type_, "versions": versions})
    return web.json_response({"providers": found})


@provider_routes.get("/v1/providers/{namespace}/{type}/versions", access=Access.CREDENTIAL, priority=Priority.INSTALL)
async def provider_versions(request: web.Request) -> web.Response:
    """Every served version with its protocols and platforms."""
    namespace, type_ = request.match_info["namespace"], _type(request)
    await _readable(request, namespace, type_)
    listing = await request.app[PROVIDERS].listing(namespace, type_)
    versions = [
        {
            "version": v.version,
            "protocols": list(v.protocols),
            "platforms": [{"os": p.os, "arch": p.arch} for p in v.packages],
        }
        for v in listing.versions
    ]
    # Terraform shows the warnings to the person running `init`: why a release is not served.
    warnings = [f"release {r.tag} is not served: {r.reason}" for r in listing.refused] or None
    return web.json_response({"id": f"{namespace}/{type_}", "versions": versions, "warnings": warnings})


def _signed(request: web.Request, namespace: str, type_: str, version: str, filename: str) -> str:
    path = f"/v1/providers/{namespace}/{type_}/{version}/files/{filename}"
    query = request.app[SIGNER].sign(path)
    return f"{base_url(request) or ''}{path}?{query}"


@provider_routes.get(
    "/v1/providers/{namespace}/{type}/{version}/download/{os}/{arch}",
    access=Access.CREDENTIAL,
    priority=Priority.INSTALL,
)
async def provider_download(request: web.Request) -> web.Response:
    """One platform's package: the protocol's fields, its three URLs signed and expiring."""
    m = request.match_info
    namespace, type_, os_, arch = m["namespace"], _type(request), m["os"], m["arch"]
    if not (_PLATFORM_RE.fullmatch(os_) and _PLATFORM_RE.fullmatch(arch)):
        raise BadRequest(f"invalid platform {os_[:32]!r}/{arch[:32]!r}: expected lowercase letters and digits")
    await _readable(request, namespace, type_)
    providers = request.app[PROVIDERS]
    version = await providers.version(namespace, type_, m["version"])
    package = version.package(os_, arch)
    if package is None:
        raise ModuleNotFound(f"provider {namespace}/{type_} {version.version} has no package for {os_}_{arch}")
    key = providers.signer(namespace, type_, version)
    # The client asks for SHA256SUMS, its signature, then this zip: its fetch starts now (fetches.py).
    providers.prefetch(namespace, type_, package)
    body: dict[str, object] = {}
    if all(p.asset.size for p in version.packages):
        # OpenTofu 1.12's `packages`: every platform's hashes go into its lock file (`h1:` once computed).
        body["packages"] = {
            f"{p.os}_{p.arch}": {
                "hashes": [f"zh:{p.shasum}", *filter(None, [providers.hashes.known(p.shasum)])],
                "package_size": p.asset.size,
            }
            for p in version.packages
        }
    return web.json_response(
        {
            **body,
            "protocols": list(version.protocols),
            "os": os_,
            "arch": arch,
            "filename": package.filename,
            "download_url": _signed(request, namespace, type_, version.version, package.filename),
            "shasums_url": _signed(request, namespace, type_, version.version, version.sums_name),
            "shasums_signature_url": _signed(request, namespace, type_, version.version, version.sums_name + ".sig"),
            "shasum": package.shasum,
            "signing_keys": {"gpg_public_keys": [{"key_id": key.key_id, "ascii_armor": key.armored}]},
        }
    )


def _mirror_host(request: web.Request, hostname: str) -> None:
    """ModuleNotFound unless `hostname` is a name clients reach this registry by (`public_url`'s or the request's)."""
    names = {request.host.lower()}
    public = base_url(request)
    if public:
        names.add(urlsplit(public).netloc.lower())
    if hostname.lower() not in names:
        served = " and ".join(sorted(names))
        raise ModuleNotFound(f"this mirror serves the providers of {served}, not {hostname[:100]!r}")


@provider_routes.get(
    "/v1/mirror/{hostname}/{namespace}/{type}/{file}", access=Access.CREDENTIAL, priority=Priority.INSTALL
)
async def mirror(request: web.Request) -> web.Response:
    """The provider network mirror: `index.json` (the versions) and `<version>.json` (each platform's
    archive: a signed URL and its `h1:` and `zh:` hashes)."""
    m = request.match_info
    namespace, type_, file = m["namespace"], _type(request), m["file"]
    _mirror_host(request, m["hostname"])
    if not file.endswith(".json"):
        raise ModuleNotFound(f"no such mirror file {file[:100]!r}: expected index.json or <version>.json")
    await _readable(request, namespace, type_)
    providers = request.app[PROVIDERS]
    if file == "index.json":
        listing = await providers.listing(namespace, type_)
        return web.json_response({"versions": {v.version: {} for v in listing.versions}})
    version = await providers.version(namespace, type_, file.removesuffix(".json"))
    for package in version.packages:  # the client fetches one of them next (as many as the bound allows)
        providers.prefetch(namespace, type_, package)
    hashes = await providers.hashes_of(namespace, type_, version)
    archives = {}
    for package, found in hashes.items():
        path = f"/v1/providers/{namespace}/{type_}/{version.version}/files/{package.filename}"
        # A path without the host: resolved against this answer's URL, whichever name the client used.
        archives[f"{package.os}_{package.arch}"] = {"url": f"{path}?{request.app[SIGNER].sign(path)}", "hashes": found}
    return web.json_response({"archives": archives})


# OPEN: its handler checks the URL's signature itself (Terraform sends no token there).
@provider_routes.get(FILES_ROUTE, access=Access.OPEN, priority=Priority.INSTALL)
async def provider_file(request: web.Request) -> web.StreamResponse:
    """A package, SHA256SUMS or its signature (GET and HEAD), by a signed URL only."""
    request.app[SIGNER].verify(request.path, request.query)
    m = request.match_info
    namespace, type_, filename = m["namespace"], _type(request), m["filename"]
    providers = request.app[PROVIDERS]
    version = await providers.version(namespace, type_, m["version"])
    if filename in (version.sums_name, version.sums_name + ".sig"):
        body = version.sums if filename == version.sums_name else version.signature
        return web.Response(body=body, content_type="application/octet-stream")
    package = version.by_name(filename)
    if package is None:
        raise ModuleNotFound(f"provider {namespace}/{type_} {version.version} has no file {filename[:100]!r}")
    kept = providers.packages.open(package.shasum)
    if kept is not None:  # verified and kept on disk (providers/packages.py): no Git host request
        return HeldFileResponse(kept, lambda: providers.packages.release(kept), headers=_ZIP_HEADERS)
    location = await providers.location(namespace, type_, package)
    if location is not None:  # `download = "redirect"`: the client fetches it from the host's storage
        return web.Response(status=302, headers={"Location": location, "Cache-Control": "no-store"})
    if request.method == "HEAD":
        return _zip_response(package)
    return await _followed(request, namespace, type_, package)


def _zip_response(package: Package) -> web.StreamResponse:
    response = web.StreamResponse(headers=_ZIP_HEADERS)
    if package.asset.size is not None:
        response.content_length = package.asset.size
    return response


# long: the response's three ends (an error answer, a cut body, the client gone) beside the happy path
async def _followed(request: web.Request, namespace: str, type_: str, package: Package) -> web.StreamResponse:
    """The package as its one fetch writes it into the kept store (providers/fetches.py), sent from the
    temporary file as it grows (by the kernel when it can), its last bytes once the whole zip verified."""
    with request.app[PROVIDERS].follow(namespace, type_, package) as follower:
        async with contextlib.aclosing(follower.ranges()) as ranges:
            try:
                first = await anext(ranges, None)  # the host's failure before any byte is an error answer
            except NotKept:  # the disk cannot take it: streamed from the host, unkept
                return await _streamed(request, namespace, type_, package)
            response = _zip_response(package)
            await response.prepare(request)
            assert follower.fd is not None  # bytes were released: the follower has the file
            sender = _Sender(request, response, follower.fd)
            try:
                while first is not None:
                    await sender.send(*first)
                    first = await anext(ranges, None)
            except GitregError as e:
                log.warning("%s: %s; the download was cut short", request.path, e.message)
                if request.transport is not None:
                    request.transport.abort()
                return response
            except ConnectionError:  # the client hung up: the fetch goes on, for the next download
                return response
    await response.write_eof()
    return response


class _Sender:
    """Bytes of a file being written, into a response: `sendfile` (no copy through Python) where the
    event loop and the connection allow it (asyncio's loop, plain TCP, a known length), else read on a
    worker thread and written (uvloop, `gitreg serve`'s loop, has no `loop.sendfile`)."""

    def __init__(self, request: web.Request, response: web.StreamResponse, fd: int) -> None:
        self.request = request
        self.response = response
        self.fd = fd
        self.native = response.content_length is not None
        # The follower's descriptor as sendfile takes it (closefd=False: the follower closes it).
        self.file = open(fd, "rb", buffering=0, closefd=False)  # noqa: SIM115

    async def send(self, offset: int, count: int) -> None:
        transport = self.request.transport
        if transport is None or transport.is_closing():
            raise ConnectionResetError("the client went away")
        if self.native:
            try:
                await asyncio.get_running_loop().sendfile(transport, self.file, offset, count, fallback=False)
                return
            except RuntimeError:  # uvloop (NotImplementedError), TLS: raised before anything was sent
                self.native = False
        end = offset + count
        while offset < end:
            data = await asyncio.to_thread(os.pread, self.fd, min(SEND_CHUNK, end - offset), offset)
            if not data:
                raise ConnectionResetError("the file is shorter than released")
            await self.response.write(data)
            offset += len(data)


async def _streamed(request: web.Request, namespace: str, type_: str, package: Package) -> web.StreamResponse:
    """The package streamed from the Git host, its SHA-256 checked as it passes, not kept (no room on disk)."""
    response = _zip_response(package)
    async with contextlib.aclosing(request.app[PROVIDERS].stream(namespace, type_, package)) as stream:
        first = await anext(stream, b"")  # the host's failure, before anything is sent, is an error answer
        await response.prepare(request)
        try:
            if first:
                await response.write(first)
            async for chunk in stream:
                await response.write(chunk)
        except GitregError as e:
            # Headers and most of the bytes are gone: cut the connection, so the client sees a short body.
            log.warning("%s: %s; the download was cut short", request.path, e.message)
            if request.transport is not None:
                request.transport.abort()
            return response
    await response.write_eof()
    return response
