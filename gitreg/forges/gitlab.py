"""GitLab (gitlab.com and self-managed): its REST API, its webhooks' payloads and tokens.

Listing: "List a group's projects" with its subgroups (`GET /groups/{path}/projects`); rate
limits in `RateLimit-*`. Webhooks: a tag is a `Tag Push Hook` (or a `Push Hook`, or a system
hook's `tag_push`) of `refs/tags/...`; a system hook's (or group hook's) project event
(`project_create`, `project_destroy`, `project_rename`, `project_transfer`,
`project_update`) names the project, which is then read again through the API
(`GET /projects/:id`, or by its path): the payload is a hint, never data. Deliveries
carry `X-Gitlab-Token: <[webhooks] gitlab_token>` as it is.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any
from urllib.parse import quote

from gitreg.core.secrets import digest, same_secret
from gitreg.forges.base import PER_PAGE, USER_AGENT, ForgeClient, Host
from gitreg.forges.payloads import MalformedPayload, RepositoryEvent, TagEvent, payload_urls
from gitreg.forges.records import OnPage, RecordFields, Release, ReleaseAsset, RepoRecord, read_record, text_field
from gitreg.forges.releases import asset_of, release_pages, text

TOKEN_HEADER = "X-Gitlab-Token"
EVENT_HEADER = "X-Gitlab-Event"  # what a delivery is about (tag_event's `event`)
# GitLab throttles how often a push moves a project's timestamps (Event::REPOSITORY_UPDATED_AT_INTERVAL
# for `updated_at` via last_repository_updated_at, RESET_PROJECT_ACTIVITY_INTERVAL for `last_activity_at`).
UPDATED_AT_THROTTLE = 300
ACTIVITY_THROTTLE = 3600
# Where a payload's project (or repository) object names the repository.
URL_FIELDS = ("git_http_url", "git_ssh_url", "web_url", "http_url", "ssh_url", "url", "homepage")
FIELDS = RecordFields("path", "path_with_namespace", 1024, "http_url_to_repo", "ssh_url_to_repo", "web_url")
PROJECT_EVENTS = frozenset(
    {"project_create", "project_destroy", "project_rename", "project_transfer", "project_update"}
)


def record(item: Any) -> RepoRecord | None:
    """A GitLab project object (REST API); None when malformed."""
    if not isinstance(item, dict):
        return None
    # `topics` since GitLab 14.0; `tag_list` is the deprecated name of the same list.
    topics = item.get("topics") if isinstance(item.get("topics"), list) else item.get("tag_list")
    updated = text_field(item, "updated_at", 64)
    pushed_at = updated or text_field(item, "last_activity_at", 64)
    return read_record(item, FIELDS, topics, pushed_at, UPDATED_AT_THROTTLE if updated else ACTIVITY_THROTTLE)


class GitLabClient(ForgeClient):
    """Lists a group's projects, its subgroups' included."""

    RATE_HEADERS = "RateLimit-"

    def headers(self) -> dict[str, str]:
        headers = {"User-Agent": USER_AGENT, "Accept": "application/json"}
        if self.org.token and self.as_user:
            headers["Authorization"] = f"Bearer {self.org.token}"
        elif self.org.token:
            headers["PRIVATE-TOKEN"] = self.org.token
        return headers

    async def username(self) -> str | None:
        """`GET /user`'s `username`; None when GitLab refuses the token (revoked, expired, unknown)."""
        return await self._username(f"{self.org.api_url}/user", "username")

    async def member_repositories(self) -> list[RepoRecord]:
        """`GET /projects?membership=true`: the projects the token's user is a member of."""
        url = f"{self.org.api_url}/projects?membership=true&simple=true&per_page={PER_PAGE}&order_by=id&sort=asc"
        return await self._pages(url, record)

    async def list_repositories(self, on_page: OnPage | None = None) -> list[RepoRecord]:
        """All projects of the group and its subgroups (not projects merely shared with it)."""
        group = quote(self.org.group, safe="")
        url = (
            f"{self.org.api_url}/groups/{group}/projects?include_subgroups=true&with_shared=false"
            f"&per_page={PER_PAGE}&order_by=id&sort=asc"
        )
        return await self._pages(url, record, on_page)

    async def repository(self, key: str) -> RepoRecord | None:
        """One project by id or full path; None when GitLab says it does not exist."""
        return await self.get_record(f"{self.org.api_url}/projects/{quote(key, safe='')}", record)

    async def releases(self, full_name: str) -> list[Release]:
        """ "List releases" (`GET /projects/:id/releases`), every page; an upcoming release counts as a draft."""
        url = f"{self.org.api_url}/projects/{quote(full_name, safe='')}/releases?per_page={PER_PAGE}"
        return await release_pages(self, url, release)

    def asset_headers(self) -> dict[str, str]:
        """What fetches a link's bytes on the API's host (a generic package): the token."""
        return self.headers()


def release(item: Any) -> Release | None:
    """A GitLab release object; None when malformed. Assets are its links (`direct_asset_url`, else `url`)."""
    if not isinstance(item, dict) or text(item, "tag_name", 255) is None:
        return None
    links = item.get("assets", {}).get("links") if isinstance(item.get("assets"), dict) else None
    assets: list[ReleaseAsset] = []
    for link in links if isinstance(links, list) else []:
        if isinstance(link, dict):
            url = text(link, "direct_asset_url", 2048) or text(link, "url", 2048)
            found = asset_of(text(link, "name", 255), url)
            if found is not None:
                assets.append(found)
    # GitLab has no prerelease flag: a SemVer prerelease tag says it (the caller reads the version).
    return Release(
        tag=item["tag_name"], draft=item.get("upcoming_release") is True, prerelease=False, assets=tuple(assets)
    )


def owns(group: str, full_name: str) -> bool:
    """True when `full_name` (a path with namespace) is in the group `group` or one of its subgroups."""
    return full_name.lower().startswith(group.lower() + "/")


def verify(token: str, body: bytes, headers: Mapping[str, str]) -> bool:
    """`X-Gitlab-Token` equals the configured token (constant time); the body is not signed."""
    return same_secret(headers.get(TOKEN_HEADER), digest(token))


def tag_event(event: str, payload: Mapping[str, Any]) -> TagEvent | None:
    """The tag event in a GitLab delivery (`X-Gitlab-Event: event`; project or system hook), or None."""
    kind = payload.get("object_kind") or payload.get("event_name")
    if event not in ("Tag Push Hook", "Push Hook", "System Hook") or kind not in ("tag_push", "push"):
        return None
    ref = payload.get("ref")
    if not isinstance(ref, str):
        raise MalformedPayload(f"a {kind} payload needs a string 'ref'")
    section = payload.get("project") if isinstance(payload.get("project"), dict) else payload.get("repository")
    branch = section.get("default_branch") if isinstance(section, dict) else None
    if not ref.startswith("refs/tags/") and not (isinstance(branch, str) and branch and ref == f"refs/heads/{branch}"):
        return None  # another branch's push changes neither the tag list nor the default branch's .gitreg.toml
    return TagEvent(payload_urls(section, URL_FIELDS, "project"), ref)


def release_event(payload: Mapping[str, Any]) -> TagEvent | None:
    """A GitLab `Release Hook` (`object_kind: release`: create, update, delete): its project and tag; else None."""
    if payload.get("object_kind") != "release":
        return None
    tag = payload.get("tag")
    if not isinstance(tag, str) or not tag:
        raise MalformedPayload("a release payload needs a 'tag'")
    return TagEvent(payload_urls(payload.get("project"), URL_FIELDS, "project"), f"refs/tags/{tag[:255]}")


def repository_event(payload: Mapping[str, Any]) -> RepositoryEvent | None:
    """A GitLab system hook (or group hook project event) about a project; None otherwise."""
    name = payload.get("event_name")
    path = payload.get("path_with_namespace")
    # `name` is checked to be a string first: a list or an object cannot be looked up in a set.
    if not isinstance(name, str) or name not in PROJECT_EVENTS:
        return None
    if not isinstance(path, str) or not path or len(path) > 1024:
        return None
    old = payload.get("old_path_with_namespace")
    project_id = payload.get("project_id")
    return RepositoryEvent(
        "gitlab",
        str(name),
        path,
        old if isinstance(old, str) and old else None,
        project_id=str(project_id) if isinstance(project_id, int) and not isinstance(project_id, bool) else None,
        removed=name == "project_destroy",
    )


HOST = Host(
    name="gitlab",
    client=GitLabClient,
    owns=owns,
    secret_key="gitlab_token",
    verify=verify,
    refused=f"missing or wrong {TOKEN_HEADER}: the webhook's secret token must equal [webhooks] gitlab_token",
)
