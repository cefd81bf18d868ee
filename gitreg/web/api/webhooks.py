"""Instant publishing: GitHub and GitLab webhooks invalidate and refresh cached tag lists.

`POST /webhooks/github` checks `X-Hub-Signature-256` (HMAC-SHA256 of the raw body with
`[webhooks] github_secret`); `POST /webhooks/gitlab` checks `X-Gitlab-Token` against
`[webhooks] gitlab_token`, both in constant time and before the body is parsed. A tag event
(GitHub `push` of `refs/tags/...`, `create`/`delete` of a tag; GitLab `Tag Push Hook`, or a
`Push Hook` of `refs/tags/...`) names its repository by several URLs (https, ssh, web page);
every configured repository that is the same repository (same host and path once `.git`,
trailing slashes, host case and scp-like vs ssh:// spelling are set aside) is invalidated in
the tag cache and refreshed in the background, so the next `terraform init` is fresh and fast.

Org mode (`[[orgs]]`): a GitHub organization webhook's `repository` event (created, deleted,
renamed, archived, unarchived, transferred, edited) and a GitLab system hook's (or group
hook's) project event (`project_create`, `project_destroy`, `project_rename`,
`project_transfer`, `project_update`) make gitreg read that repository again from the org's
API at once (orgs.OrgCatalog.apply).

Webhooks are hints, never data: a repository event makes gitreg read that one repository again
from the org's API, and a delivery received already (GitHub `X-GitHub-Delivery`, GitLab
`Idempotency-Key` or `X-Gitlab-Event-UUID`, else a digest of the body) within two hours is
answered 202 `duplicate` and does nothing.

These endpoints are not behind the registry's bearer tokens: the shared secret is their
authentication. Without a configured secret an endpoint does not exist (404).
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable

from aiohttp import web

from gitreg.config.model import PLACEHOLDERS, Config
from gitreg.config.rules import fill_template
from gitreg.core import urls
from gitreg.core.errors import GitregError
from gitreg.forges import github as github_host
from gitreg.forges import gitlab as gitlab_host
from gitreg.forges.hosts import HOSTS
from gitreg.forges.payloads import MalformedPayload, RepositoryEvent, TagEvent, json_payload
from gitreg.git.pool import Priority
from gitreg.registry.publish import Deliveries
from gitreg.web.keys import CONFIG, METRICS, PROVIDERS, PUBLISHER
from gitreg.web.route_rules import Access

log = logging.getLogger(__name__)

webhook_routes = web.RouteTableDef()

GITHUB_PATH = "/webhooks/github"
GITLAB_PATH = "/webhooks/gitlab"
# GitHub caps payloads at 25 MB, but a tag event is a few kilobytes; 1 MiB leaves room for a
# push with many commits and still bounds what an unauthenticated caller can make us read.
MAX_BODY_BYTES = 1024 * 1024


class WebhookDisabled(GitregError):
    """The endpoint's secret is not configured, so the endpoint does not exist."""

    status = 404


class BadSignature(GitregError):
    """The delivery's signature or token is missing or wrong."""

    status = 401


class PayloadTooLarge(GitregError):
    """The body is larger than MAX_BODY_BYTES."""

    status = 413


async def read_body(request: web.Request, limit: int = MAX_BODY_BYTES) -> bytes:
    """The raw body (signatures are over the exact bytes), refusing more than `limit` bytes."""
    if request.content_length is not None and request.content_length > limit:
        raise PayloadTooLarge(f"webhook payloads are limited to {limit} bytes")
    chunks: list[bytes] = []
    size = 0
    async for chunk in request.content.iter_chunked(64 * 1024):
        size += len(chunk)
        if size > limit:
            raise PayloadTooLarge(f"webhook payloads are limited to {limit} bytes")
        chunks.append(chunk)
    return b"".join(chunks)


async def _refresh(request: web.Request, provider: str, event: TagEvent) -> web.Response:
    """Invalidate and refresh every configured repository the event names."""
    publisher = request.app[PUBLISHER]
    keys = publisher.repositories_named(event.urls)
    shown = urls.mask(event.urls[0])[:200]
    if not keys:
        request.app[METRICS].webhook(provider, "unknown_repository")
        log.info("%s webhook: %s on %s: no configured repository matches; ignored", provider, event.ref[:200], shown)
        return web.json_response(
            {
                "result": "unknown_repository",
                "note": f"no repository configured in this registry matches {shown}; nothing was changed",
            },
            status=202,
        )
    await publisher.repositories_changed(keys)
    request.app[METRICS].webhook(provider, "refreshed")
    log.info("%s webhook: %s on %s: refreshing %d repository(ies)", provider, event.ref[:200], shown, len(keys))
    return web.json_response({"result": "refreshing", "repositories": len(keys), "ref": event.ref[:200]})


async def _apply_repository_event(request: web.Request, event: RepositoryEvent) -> web.Response:
    """A repository was created, deleted, renamed, transferred or (un)archived: update the org listings now."""
    concerned = await request.app[PUBLISHER].repository_event(event)
    shown = event.full_name[:200]
    if not concerned:
        request.app[METRICS].webhook(event.provider, "unknown_org")
        return web.json_response(
            {"result": "unknown_org", "note": f"no [[orgs]] entry of this registry lists {shown}; nothing was changed"},
            status=202,
        )
    request.app[METRICS].webhook(event.provider, "org_updated")
    return web.json_response({"result": "org_updated", "action": event.action[:40], "repository": shown})


def _released(request: web.Request, provider: str, event: TagEvent) -> web.Response:
    """A release was published, edited or deleted: the providers served from that repository read it again."""
    count = request.app[PROVIDERS].released(event.urls)
    if not count:
        return _ignored(request, provider, "no provider of this registry is served from that repository")
    request.app[METRICS].webhook(provider, "refreshed")
    return web.json_response({"result": "refreshing", "providers": count, "ref": event.ref[:200]})


def _ignored(request: web.Request, provider: str, why: str) -> web.Response:
    request.app[METRICS].webhook(provider, "ignored")
    return web.json_response({"result": "ignored", "note": why}, status=202)


async def _authenticated_body(request: web.Request, provider: str, secret: str | None) -> bytes:
    """The body of a delivery whose secret checks out; counts and raises otherwise.

    (A replay is told apart after this: only authenticated deliveries are remembered.)
    """
    metrics = request.app[METRICS]
    forge = HOSTS[provider]
    if secret is None:
        metrics.webhook(provider, "disabled")
        raise WebhookDisabled(
            f"the {provider} webhook is not enabled on this registry: set [webhooks] {forge.secret_key}"
        )
    try:
        body = await read_body(request)
    except PayloadTooLarge:
        metrics.webhook(provider, "too_large")
        raise
    if not forge.verify(secret, body, request.headers):
        metrics.webhook(provider, "bad_signature")
        log.warning("%s webhook from %s refused: bad signature", provider, request.remote)
        raise BadSignature(forge.refused)
    return body


async def _once(
    request: web.Request, provider: str, body: bytes, handle: Callable[[web.Request, bytes], Awaitable[web.Response]]
) -> web.Response:
    """Handle an authenticated delivery once: a replay within DELIVERY_MEMORY_SECONDS does nothing."""
    deliveries = request.app[PUBLISHER].deliveries
    key = Deliveries.key(provider, request.headers, body)
    if not deliveries.first(key):
        request.app[METRICS].webhook(provider, "duplicate")
        log.info("%s webhook: delivery %s was received already; ignored", provider, key.rsplit(":", 1)[-1][:80])
        return web.json_response(
            {"result": "duplicate", "note": "this delivery was received already; nothing was done again"}, status=202
        )
    try:
        return await handle(request, body)
    except BaseException:
        deliveries.forget(key)  # not acted upon (malformed, or our failure): a redelivery is tried again
        raise


@webhook_routes.post(GITHUB_PATH, access=Access.OPEN, priority=Priority.BROWSE)  # its shared secret
async def github(request: web.Request) -> web.Response:
    """A GitHub webhook delivery (content type application/json or form-encoded)."""
    body = await _authenticated_body(request, "github", request.app[CONFIG].webhooks.github_secret)
    return await _once(request, "github", body, _github)


async def _github(request: web.Request, body: bytes) -> web.Response:
    event = request.headers.get(github_host.EVENT_HEADER, "")
    try:
        payload = json_payload(body, request.content_type)
        if event == "ping":
            request.app[METRICS].webhook("github", "ping")
            return web.json_response({"result": "pong"})
        if event == "repository":
            repository_event = github_host.repository_event(payload)
            if repository_event is None:
                raise MalformedPayload(
                    "a repository payload needs an 'action' and a 'repository' with name, full_name and clone_url"
                )
            return await _apply_repository_event(request, repository_event)
        if event == "release":
            return _released(request, "github", github_host.release_event(payload))
        found = github_host.tag_event(event, payload)
    except MalformedPayload:
        request.app[METRICS].webhook("github", "malformed")
        raise
    if found is None:
        return _ignored(request, "github", f"event {event[:40]!r} is not a tag push, create or delete")
    return await _refresh(request, "github", found)


@webhook_routes.post(GITLAB_PATH, access=Access.OPEN, priority=Priority.BROWSE)  # its secret token
async def gitlab(request: web.Request) -> web.Response:
    """A GitLab webhook delivery (project hook or system hook)."""
    body = await _authenticated_body(request, "gitlab", request.app[CONFIG].webhooks.gitlab_token)
    return await _once(request, "gitlab", body, _gitlab)


async def _gitlab(request: web.Request, body: bytes) -> web.Response:
    event = request.headers.get(gitlab_host.EVENT_HEADER, "")
    try:
        payload = json_payload(body, request.content_type)
        # System hooks, and group hooks' project events, say what happened to a project by
        # `event_name` (the X-Gitlab-Event header differs between them).
        repository_event = gitlab_host.repository_event(payload)
        if repository_event is not None:
            return await _apply_repository_event(request, repository_event)
        release = gitlab_host.release_event(payload)
        if release is not None:
            return _released(request, "gitlab", release)
        found = gitlab_host.tag_event(event, payload)
    except MalformedPayload:
        request.app[METRICS].webhook("gitlab", "malformed")
        raise
    if found is None:
        return _ignored(request, "gitlab", f"event {event[:40]!r} is not a tag push")
    return await _refresh(request, "gitlab", found)


def webhook_hosts(config: Config) -> dict[str, list[str]]:
    """host -> repositories (masked) configured on it, for `gitreg check` (local file:// repos left out)."""
    hosts: dict[str, list[str]] = {}
    for rule in config.modules:
        host_path = urls.host_path(fill_template(rule.repository, dict.fromkeys(PLACEHOLDERS, "x")))
        if host_path is None or host_path.startswith("file:"):
            continue
        hosts.setdefault(host_path.split("/", 1)[0], []).append(urls.mask(rule.repository))
    return hosts


def webhook_instructions(config: Config) -> list[str]:
    """Lines telling an operator which webhook URL to configure for each Git host."""
    hosts = webhook_hosts(config)
    if not hosts and not config.orgs:
        return ["webhooks: no repository on a remote Git host; nothing to configure"]
    base = config.server.public_url or "https://<this registry>"
    names = {"github": "GitHub", "gitlab": "GitLab"}
    events = {"github": "push, create and delete events", "gitlab": "tag push events"}
    secrets = {
        "github": ("github_secret", config.webhooks.github_secret is not None),
        "gitlab": ("gitlab_token", config.webhooks.gitlab_token is not None),
    }
    lines = ["webhooks (a pushed tag is then listed at once, not after [cache] ttl_seconds):"]
    for host in sorted(hosts):
        if "github" in host:
            providers = ["github"]
        elif "gitlab" in host:
            providers = ["gitlab"]
        else:
            providers = ["github", "gitlab"]  # the name does not say which: show both
        for provider in providers:
            key, is_set = secrets[provider]
            state = "set" if is_set else "NOT SET, the endpoint answers 404"
            path = GITHUB_PATH if provider == "github" else GITLAB_PATH
            lines.append(
                f"  {host} ({names[provider]}): {base}{path}; {events[provider]}; secret [webhooks] {key}: {state}"
            )
    for org in config.orgs:
        key, is_set = secrets[org.provider]
        state = "set" if is_set else "NOT SET, the endpoint answers 404"
        if org.provider == "github":
            where = (
                f"organization webhook of {org.group}: {base}{GITHUB_PATH}; events: repositories, pushes, "
                "branch or tag creation and deletion"
            )
        else:
            where = f"group webhook of {org.group} (tag push and project events), or a system hook: {base}{GITLAB_PATH}"
        lines.append(f"  org {org.label}: {where}; secret [webhooks] {key}: {state}")
    if config.server.public_url is None:
        lines.append("  (set [server] public_url to see the registry's real address here)")
    return lines
