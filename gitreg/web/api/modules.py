"""HTTP handlers of the registry protocol: parse the request, ask the registry service, shape the answer."""

from __future__ import annotations

import functools
import json

from aiohttp import web

from gitreg.core.content import ContentKey
from gitreg.git.pool import Priority
from gitreg.git.runner import GIT_MISSING, git_found
from gitreg.identity.door import LOGIN_V1
from gitreg.observability.metrics import check_metrics_token
from gitreg.registry.service import ARCHIVE_NAME
from gitreg.web.address import request_address
from gitreg.web.api.providers import PROVIDERS_V1
from gitreg.web.auth import caller
from gitreg.web.errors import error_response
from gitreg.web.files import HeldFileResponse
from gitreg.web.keys import (
    CONFIG,
    IDENTITY,
    INSTALLS,
    LIFECYCLE,
    METRICS,
    REGISTRY,
    SIGNER,
)
from gitreg.web.origin import base_url
from gitreg.web.route_rules import Access

routes = web.RouteTableDef()

DISCOVERY = {"modules.v1": "/v1/modules/"}
# A JSON answer's one header, as `web.json_response` sets it (for bodies made once, as bytes).
JSON_HEADERS = {"Content-Type": "application/json; charset=utf-8"}


# The first request of `terraform init` (and of `terraform login`): open, at install priority.
@routes.get("/.well-known/terraform.json", access=Access.OPEN, priority=Priority.INSTALL)
async def discovery(request: web.Request) -> web.Response:
    """Service discovery: where the module registry API lives, and `terraform login`'s endpoints
    when an `[[auth.forges]]` entry has an OAuth application."""
    services: dict[str, object] = dict(DISCOVERY)
    if request.app[CONFIG].providers:
        services["providers.v1"] = PROVIDERS_V1
    if request.app[IDENTITY].logins is not None:
        services["login.v1"] = LOGIN_V1
    return web.json_response(services)


@routes.get("/healthz", access=Access.OPEN, priority=Priority.BROWSE)
async def healthz(request: web.Request) -> web.Response:
    """Liveness: the server runs and answers."""
    return web.json_response({"status": "ok"})


@routes.get("/readyz", access=Access.OPEN, priority=Priority.BROWSE)
async def readyz(request: web.Request) -> web.Response:
    """Readiness: config loaded and the git pool and cache up; 503 while starting or stopping."""
    lifecycle = request.app[LIFECYCLE]
    # Ready after the last cleanup context started, not any more once shutdown begins (before
    # the git pool and cache are closed). Serving `terraform init` never waits for the index:
    # ready (200) either way, with its state.
    report = lifecycle.report()
    if report is None:
        return error_response(503, f"gitreg is not ready: {lifecycle.reason}")
    if not git_found():  # every module would answer 502: out of a load balancer's rotation (#33)
        return error_response(503, f"gitreg is not ready: {GIT_MISSING}")
    return web.json_response(report)


@routes.get("/metrics", access=Access.OPEN, priority=Priority.BROWSE)  # its own metrics_token
async def metrics(request: web.Request) -> web.Response:
    """Prometheus text format; needs `[auth] metrics_token` as a Bearer token when one is set."""
    check_metrics_token(request, request.app[CONFIG].auth.metrics_token)
    instruments = request.app[METRICS]
    return web.Response(body=instruments.render(), headers={"Content-Type": instruments.content_type})


@routes.get("/v1/modules/{namespace}/{name}/{system}/versions", access=Access.CREDENTIAL, priority=Priority.INSTALL)
async def versions(request: web.Request) -> web.Response:
    """The module's versions, as the single-element `modules` list clients expect."""
    body = await request.app[REGISTRY].versions_answer(request_address(request))
    return web.Response(body=body, headers=JSON_HEADERS)


@routes.get(
    "/v1/modules/{namespace}/{name}/{system}/{version}/download", access=Access.CREDENTIAL, priority=Priority.INSTALL
)
async def download(request: web.Request) -> web.Response:
    """Where to fetch a version: 200 with the JSON body (OpenTofu) AND X-Terraform-Get (Terraform)."""
    address = request_address(request)
    registry = request.app[REGISTRY]
    answer = await registry.download(address, request.match_info["version"])
    body: dict[str, object] = {}
    location = answer.location
    if answer.archive is not None:
        location = await _archive_location(request, answer.archive, location)
        if request.app[CONFIG].auth.enabled:
            # OpenTofu >= 1.12 then fetches the archive itself with the registry token.
            body["use_registry_credentials"] = True
    registry.downloaded(address, answer)
    job = who.job if (who := caller(request)) is not None else None
    if job is not None:  # a CI job's OIDC token: an observed install (memory only, see usage/installs.py)
        request.app[INSTALLS].record(job.project, job.repository, address, request.match_info["version"])
    text = json.dumps({"location": location, **body}) if body else _location_json(location)
    return web.json_response(text=text, headers={"X-Terraform-Get": location})


# The same few locations, asked again and again: buys 14.6 µs of CPU a download request (as
# `git_location` in registry/service.py measures it; 42 of 60 paired rounds faster with it).
@functools.lru_cache(maxsize=4096)
def _location_json(location: str) -> str:
    return json.dumps({"location": location})


async def _archive_location(request: web.Request, key: ContentKey, relative: str) -> str:
    """The archive's URL: signed (with registry auth on), with the checksum go-getter verifies.

    Absolute (`public_url`, else the origin the client reached us at): Terraform resolves a
    relative location, but Checkov, Trivy and other readers of the registry protocol do not.
    Only a `Host` that is not a `host[:port]` (and no `public_url`) leaves it relative.
    """
    digest = await request.app[REGISTRY].archive_checksum(key)
    config = request.app[CONFIG]
    path = request.path.rsplit("/", 1)[0] + "/" + ARCHIVE_NAME
    params = [request.app[SIGNER].sign(path)] if config.auth.enabled else []
    if digest is not None:
        params.append(f"checksum=sha256:{digest}")
    query = "?" + "&".join(params) if params else ""
    base = base_url(request)
    return f"{base}{path}{query}" if base else f"{relative}{query}"


# Signed: Terraform fetches the archive without its token (the download answer signs its URL).
@routes.get(
    "/v1/modules/{namespace}/{name}/{system}/{version}/" + ARCHIVE_NAME,
    name="archive",
    access=Access.SIGNED,
    priority=Priority.INSTALL,
)
async def archive(request: web.Request) -> web.StreamResponse:
    """The archive of an archive-mode version (GET and HEAD). Auth: a signed URL or the registry token."""
    m = request.match_info
    address = request_address(request)
    path, release = await request.app[REGISTRY].hold_archive(address, m["version"])
    return HeldFileResponse(
        path,
        release,
        headers={
            "Content-Type": "application/gzip",
            "Content-Disposition": f'attachment; filename="{address.name}-{address.system}-{m["version"]}.tar.gz"',
            "Cache-Control": "private, max-age=3600, immutable",
        },
    )
