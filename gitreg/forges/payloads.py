"""Webhook payloads, provider-neutral: what a host module makes of a delivery's body.

A payload is a hint: `TagEvent` names a repository by its URLs (the tag cache refreshes it),
`RepositoryEvent` by its name (the org listing reads it again from the host's API). A body that
is not the JSON the host sends is a `MalformedPayload` (400). Each host module (`github`,
`gitlab`) turns its own payloads into these and checks its deliveries' signatures.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import parse_qs

from gitreg.core.errors import GitregError


class MalformedPayload(GitregError):
    """A webhook body is not the JSON document the host sends."""

    status = 400


@dataclass(frozen=True)
class TagEvent:
    """A tag was pushed, created or deleted: which repository (by its URLs) and which tag ref."""

    urls: tuple[str, ...]
    ref: str


@dataclass(frozen=True)
class RepositoryEvent:
    """A repository webhook, provider-neutral: which repository to read again from the API.

    It carries names only, never a record: what a payload says a repository is (its clone URL,
    archived or not, gone or not) is a hint; the host's API answers it (orgs.OrgCatalog.apply).
    """

    provider: str
    action: str
    full_name: str  # the repository's name now (owner/name, or GitLab's path_with_namespace)
    old_full_name: str | None = None  # before a rename or transfer
    project_id: str | None = None  # GitLab: the project's id (what is fetched from the API)
    removed: bool = False  # the payload says the repository is gone (deleted, destroyed): the API decides


def json_payload(body: bytes, content_type: str) -> Mapping[str, Any]:
    """The payload as a JSON object; GitHub may also send it form-encoded as `payload=...`."""
    try:
        text = body.decode("utf-8")
        if content_type == "application/x-www-form-urlencoded":
            text = parse_qs(text, strict_parsing=True).get("payload", [""])[0]
        data = json.loads(text)
    except (UnicodeDecodeError, ValueError, RecursionError) as e:  # RecursionError: `[[[[...` nested deeply
        raise MalformedPayload(f"the webhook body is not a JSON document: {str(e)[:100]}") from None
    if not isinstance(data, dict):
        raise MalformedPayload("the webhook body must be a JSON object")
    return data


def payload_urls(section: Any, fields: tuple[str, ...], what: str) -> tuple[str, ...]:
    """The repository URLs a payload's `section` names in `fields` (at least one, or MalformedPayload)."""
    if not isinstance(section, dict):
        raise MalformedPayload(f"the payload has no {what} object")
    # No real repository URL is longer; bounded, they are safe to memoize in urls.host_path.
    found = tuple(v for f in fields if isinstance(v := section.get(f), str) and 0 < len(v) <= 2048)
    if not found:
        raise MalformedPayload(f"the payload's {what} has none of {', '.join(fields)}")
    return found


def dig(data: Any, *keys: str) -> Any:
    """`data[k1][k2]...`, or None where a level is missing or not an object."""
    for key in keys:
        if not isinstance(data, dict):
            return None
        data = data.get(key)
    return data
