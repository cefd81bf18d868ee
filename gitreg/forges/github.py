"""GitHub (and GitHub Enterprise Server): its REST API, its webhooks' payloads and signatures.

Listing: "List organization repositories" (`GET /orgs/{org}/repos`), or, when the owner is a
user account, `GET /users/{user}/repos`; rate limits in `X-RateLimit-*`. Webhooks: a tag is
a `push` of `refs/tags/...` or a `create`/`delete` with `ref_type: tag`; an organization's
`repository` event (created, deleted, renamed, archived, unarchived, transferred, edited)
names a repository, which is then read again through `GET /repos/{owner}/{repo}` (the
payload's own repository object is never taken as data). Deliveries are signed: `X-Hub-Signature-256:
sha256=<hex HMAC-SHA256 of the raw body with [webhooks] github_secret>`.
"""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Mapping
from typing import Any
from urllib.parse import quote

import aiohttp

from gitreg.config.model import OrgConfig
from gitreg.core.secrets import digest, same_secret
from gitreg.forges.base import PER_PAGE, USER_AGENT, ForgeClient, ForgeError, ForgeNotFound, Host, OrgStats
from gitreg.forges.payloads import MalformedPayload, RepositoryEvent, TagEvent, dig, payload_urls
from gitreg.forges.records import OnPage, RecordFields, Release, ReleaseAsset, RepoRecord, read_record, text_field
from gitreg.forges.releases import asset_of, release_pages, text

API_VERSION = "2022-11-28"
INSTALLATION_PREFIX = "ghs_"  # a GitHub App installation access token
SIGNATURE_HEADER = "X-Hub-Signature-256"
EVENT_HEADER = "X-GitHub-Event"  # what a delivery is about (tag_event's `event`)
# Where a payload's repository object names the repository (https, ssh, web page, git://).
URL_FIELDS = ("clone_url", "ssh_url", "html_url", "git_url")
FIELDS = RecordFields("name", "full_name", 512, "clone_url", "ssh_url", "html_url")


def record(item: Any) -> RepoRecord | None:
    """A GitHub repository object (REST API or `repository` webhook payload); None when malformed."""
    if not isinstance(item, dict):
        return None
    return read_record(item, FIELDS, item.get("topics"), text_field(item, "pushed_at", 64))


class GitHubClient(ForgeClient):
    """Lists an organization's repositories, or a user's own."""

    RATE_HEADERS = "X-RateLimit-"

    def __init__(self, org: OrgConfig, session: aiohttp.ClientSession, stats: OrgStats | None = None) -> None:
        super().__init__(org, session, stats)
        self.is_user: bool | None = None  # learnt from the first listing

    def headers(self) -> dict[str, str]:
        headers = {
            "User-Agent": USER_AGENT,
            "Accept": "application/vnd.github+json",
            "X-GitHub-Api-Version": API_VERSION,
        }
        if self.org.token:
            headers["Authorization"] = f"Bearer {self.org.token}"
        return headers

    async def list_repositories(self, on_page: OnPage | None = None) -> list[RepoRecord]:
        """All repositories of the organization (or, when GitHub says it is a user, the user's own)."""
        owner = quote(self.org.group, safe="")
        # Oldest first: a repository created while we read the pages lands on the last page,
        # instead of pushing one we have not read yet onto a page we already have.
        org_url = f"{self.org.api_url}/orgs/{owner}/repos?per_page={PER_PAGE}&type=all&sort=created&direction=asc"
        user_url = f"{self.org.api_url}/users/{owner}/repos?per_page={PER_PAGE}&type=owner&sort=created&direction=asc"
        if self.is_user:
            return await self._pages(user_url, record, on_page)
        try:
            found = await self._pages(org_url, record, on_page)
        except ForgeNotFound:
            if self.is_user is False:
                raise
            # GitHub answers 404 for /orgs/<a user>: the group names a user account.
            found = await self._pages(user_url, record, on_page)
            self.is_user = True
            return found
        self.is_user = False
        return found

    @property
    def _installation(self) -> bool:
        """The token is a GitHub App installation's (`ghs_`): no user behind it, `GET /user` answers 403."""
        return (self.org.token or "").startswith(INSTALLATION_PREFIX)

    async def username(self) -> str | None:
        """`GET /user`'s `login`; None when GitHub refuses the token (revoked, expired, unknown).

        An App installation token is named by the account the app is installed on, as the first
        repository `GET /installation/repositories` lists says (`app:<login>`; `app` when none).
        """
        if not self._installation:
            return await self._username(f"{self.org.api_url}/user", "login")
        try:
            data, _ = await self.get_json(f"{self.org.api_url}/installation/repositories?per_page=1")
        except ForgeError as e:
            if e.reason == "unauthorized":
                return None
            raise
        owner = dig((data.get("repositories") or [{}])[0], "owner", "login") if isinstance(data, dict) else None
        return f"app:{owner}" if isinstance(owner, str) and owner else "app"

    async def member_repositories(self) -> list[RepoRecord]:
        """`GET /user/repos`: the repositories the token's user owns, collaborates on or sees as an org member
        (an App installation: `GET /installation/repositories`, the repositories it was given)."""
        if self._installation:
            url = f"{self.org.api_url}/installation/repositories?per_page={PER_PAGE}"
            return await self._pages(url, record, items="repositories")
        url = (
            f"{self.org.api_url}/user/repos?per_page={PER_PAGE}&affiliation=owner,collaborator,organization_member"
            "&sort=created&direction=asc"
        )
        return await self._pages(url, record)

    async def repository(self, key: str) -> RepoRecord | None:
        """One repository by full name (`GET /repos/{owner}/{repo}`); None when GitHub says it does not exist.

        (A renamed or transferred repository's old name answers a redirect: a ForgeError, so the
        caller enumerates again rather than take the old name as gone.)
        """
        owner, slash, name = key.partition("/")
        if not slash or not owner or not name or "/" in name:
            return None
        return await self.get_record(f"{self.org.api_url}/repos/{quote(owner, safe='')}/{quote(name, safe='')}", record)

    async def releases(self, full_name: str) -> list[Release]:
        """ "List releases" (`GET /repos/{owner}/{repo}/releases`), every page; drafts included, marked."""
        owner, _, name = full_name.partition("/")
        url = f"{self.org.api_url}/repos/{quote(owner, safe='')}/{quote(name, safe='')}/releases?per_page={PER_PAGE}"
        return await release_pages(self, url, release)

    def asset_headers(self) -> dict[str, str]:
        """What fetches an asset's bytes: the token, and `Accept: application/octet-stream` (else its JSON)."""
        return {**self.headers(), "Accept": "application/octet-stream"}


def release(item: Any) -> Release | None:
    """A GitHub release object; None when malformed. Assets by their API URL (works for private repositories)."""
    if not isinstance(item, dict) or text(item, "tag_name", 255) is None:
        return None
    assets: list[ReleaseAsset] = []
    listed = item.get("assets")
    for a in listed if isinstance(listed, list) else []:
        if isinstance(a, dict):
            found = asset_of(text(a, "name", 255), text(a, "url", 2048), a.get("size"), a.get("digest"))
            if found is not None:
                assets.append(found)
    return Release(
        tag=item["tag_name"],
        draft=item.get("draft") is True,
        prerelease=item.get("prerelease") is True,
        assets=tuple(assets),
    )


def owns(group: str, full_name: str) -> bool:
    """True when `full_name` (owner/name) is a repository of the organization or user `group`."""
    name = full_name.lower()
    return name.split("/", 1)[0] == group.lower() and name.count("/") == 1


def verify(secret: str, body: bytes, headers: Mapping[str, str]) -> bool:
    """`X-Hub-Signature-256: sha256=<hex HMAC-SHA256 of the body>`, compared in constant time."""
    expected = "sha256=" + hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()
    return same_secret(headers.get(SIGNATURE_HEADER), digest(expected))


def tag_event(event: str, payload: Mapping[str, Any]) -> TagEvent | None:
    """The tag event in a GitHub delivery (`X-GitHub-Event: event`), or None when it is about something else."""
    ref = payload.get("ref")
    if event == "push":
        if not isinstance(ref, str):
            raise MalformedPayload("a push payload needs a string 'ref'")
        if not ref.startswith("refs/tags/") and not _default_branch(payload, ref):
            return None
    elif event in ("create", "delete"):
        if payload.get("ref_type") != "tag":
            return None
        if not isinstance(ref, str):
            raise MalformedPayload(f"a {event} payload needs a string 'ref'")
        ref = f"refs/tags/{ref}"
    else:
        return None
    return TagEvent(payload_urls(payload.get("repository"), URL_FIELDS, "repository"), ref)


def _default_branch(payload: Mapping[str, Any], ref: str) -> bool:
    """A push to the repository's default branch: its `.gitreg.toml` may have changed (#35)."""
    branch = dig(payload, "repository", "default_branch")
    return isinstance(branch, str) and bool(branch) and ref == f"refs/heads/{branch}"


def release_event(payload: Mapping[str, Any]) -> TagEvent:
    """A GitHub `release` event (published, edited, deleted, ...): its repository and the release's tag."""
    tag = dig(payload, "release", "tag_name")
    if not isinstance(tag, str) or not tag:
        raise MalformedPayload("a release payload needs a 'release' with a 'tag_name'")
    return TagEvent(payload_urls(payload.get("repository"), URL_FIELDS, "repository"), f"refs/tags/{tag[:255]}")


def repository_event(payload: Mapping[str, Any]) -> RepositoryEvent | None:
    """A GitHub `repository` event (created, deleted, renamed, archived, unarchived, transferred, ...).

    None when the payload is not shaped like one.
    """
    action = payload.get("action")
    rec = record(payload.get("repository"))
    if not isinstance(action, str) or rec is None:
        return None
    old: str | None = None
    changes = payload.get("changes") if isinstance(payload.get("changes"), dict) else {}
    owner = rec.full_name.split("/", 1)[0]
    if action == "renamed":
        name_from = dig(changes, "repository", "name", "from")
        if isinstance(name_from, str) and name_from:
            old = f"{owner}/{name_from}"
    elif action == "transferred":
        frm = dig(changes, "owner", "from")
        login = None
        if isinstance(frm, dict):
            login = dig(frm, "organization", "login") or dig(frm, "user", "login")
        if isinstance(login, str) and login:
            old = f"{login}/{rec.name}"
    removed = action == "deleted"
    return RepositoryEvent("github", action, rec.full_name, old, removed=removed)


HOST = Host(
    name="github",
    client=GitHubClient,
    owns=owns,
    secret_key="github_secret",
    verify=verify,
    refused=f"missing or wrong {SIGNATURE_HEADER}: the webhook's secret must equal [webhooks] github_secret",
)
