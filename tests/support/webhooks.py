"""Webhook deliveries as GitHub and GitLab send them: payloads, signatures, tokens."""

from __future__ import annotations

import hashlib
import hmac
import json
import uuid
from pathlib import Path
from typing import Any

FIXTURES = Path(__file__).parent.parent / "fixtures" / "webhooks"
GITHUB_SECRET = "github-webhook-secret-5b1f0c"
GITLAB_TOKEN = "gitlab-webhook-token-93ad7e"


WEBHOOKS = {"github_secret": GITHUB_SECRET, "gitlab_token": GITLAB_TOKEN}


def fixture(name: str) -> dict[str, Any]:
    return json.loads((FIXTURES / name).read_text())


def pointed_at(payload: dict[str, Any], url: str) -> dict[str, Any]:
    """The GitHub payload with every repository URL naming `url` (a repository gitreg can reach)."""
    web = url.removesuffix(".git")
    payload["repository"].update(clone_url=url, html_url=web, git_url=web + ".git", ssh_url=web + ".git")
    return payload


def github_headers(
    body: bytes, event: str = "push", secret: str = GITHUB_SECRET, delivery: str | None = None
) -> dict[str, str]:
    """What GitHub sends: a new delivery GUID per event (the same one only on a redelivery)."""
    signature = "sha256=" + hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()
    return {
        "X-GitHub-Event": event,
        "X-GitHub-Delivery": delivery or str(uuid.uuid4()),
        "X-Hub-Signature-256": signature,
        "Content-Type": "application/json",
        "User-Agent": "GitHub-Hookshot/044aadd",
    }


def gitlab_headers(event: str = "Tag Push Hook", token: str = GITLAB_TOKEN, uuid_: str | None = None) -> dict[str, str]:
    """What GitLab sends: a new X-Gitlab-Event-UUID per event."""
    return {
        "X-Gitlab-Event": event,
        "X-Gitlab-Token": token,
        "X-Gitlab-Event-UUID": uuid_ or str(uuid.uuid4()),
        "Content-Type": "application/json",
        "User-Agent": "GitLab/17.5.0",
    }


async def post_github(client, payload: dict[str, Any], event: str = "push", **kw: Any):
    body = json.dumps(payload).encode()
    return await client.post("/webhooks/github", data=body, headers=github_headers(body, event, **kw))


async def post_gitlab(client, payload: dict[str, Any], event: str = "Tag Push Hook", **kw: Any):
    return await client.post("/webhooks/gitlab", data=json.dumps(payload).encode(), headers=gitlab_headers(event, **kw))
