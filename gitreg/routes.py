"""HTTP handlers: parse and check the request, ask the registry service, shape the answer."""

from __future__ import annotations

import json

from aiohttp import web

from .appkeys import CACHE, CATALOG, CONFIG, EXECUTOR, LIFECYCLE, METRICS, REGISTRY
from .metrics import check_metrics_token
from .names import parse_address

routes = web.RouteTableDef()

DISCOVERY = {"modules.v1": "/v1/modules/"}


@routes.get("/.well-known/terraform.json")
async def discovery(request: web.Request) -> web.Response:
    """Service discovery: where the module registry API lives."""
    return web.json_response(DISCOVERY)


@routes.get("/healthz")
async def healthz(request: web.Request) -> web.Response:
    """Liveness: the server runs and answers."""
    return web.json_response({"status": "ok"})


@routes.get("/readyz")
async def readyz(request: web.Request) -> web.Response:
    """Readiness: config loaded and the executor and cache up; 503 while starting or stopping."""
    lifecycle = request.app[LIFECYCLE]
    # The lifecycle flag turns true after the last cleanup context started and false on
    # shutdown, before the executor and cache are closed.
    if not (lifecycle.ready and CACHE in request.app and EXECUTOR in request.app):
        return web.json_response({"errors": [f"gitreg is not ready: {lifecycle.reason}"]}, status=503)
    return web.json_response({"status": "ready"})


@routes.get("/metrics")
async def metrics(request: web.Request) -> web.Response:
    """Prometheus text format; needs `[auth] metrics_token` as a Bearer token when one is set."""
    check_metrics_token(request, request.app[CONFIG].auth.metrics_token)
    instruments = request.app[METRICS]
    return web.Response(body=instruments.render(), headers={"Content-Type": instruments.content_type})


@routes.get("/v1/modules/{namespace}/{name}/{system}/versions")
async def versions(request: web.Request) -> web.Response:
    """The module's versions, as the single-element `modules` list clients expect."""
    m = request.match_info
    address = parse_address(m["namespace"], m["name"], m["system"])
    resolved, found = await request.app[REGISTRY].versions(address)
    if found.versions:
        request.app[CATALOG].remember(resolved)  # a wildcard rule's module becomes listable
    source = str(address)
    text = found.memo.get(source)
    if text is None:
        body = {"modules": [{"source": source, "versions": [{"version": tv.canonical} for tv in found.versions]}]}
        text = found.memo[source] = json.dumps(body)
    return web.json_response(text=text)


@routes.get("/v1/modules/{namespace}/{name}/{system}/{version}/download")
async def download(request: web.Request) -> web.Response:
    """Where to fetch a version: 200 with the JSON body (OpenTofu) AND X-Terraform-Get (Terraform)."""
    m = request.match_info
    address = parse_address(m["namespace"], m["name"], m["system"])
    location = await request.app[REGISTRY].download_location(address, m["version"])
    request.app[CATALOG].count_download(address)  # in memory; the catalog writes it in batches
    return web.json_response({"location": location}, headers={"X-Terraform-Get": location})
