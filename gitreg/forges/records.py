"""A repository (and its releases) as a Git host's API describes it, provider-neutral: `RepoRecord`, and how a host's
object becomes one (`read_record`). The record is also what orgs.json stores (`to_json`/`from_json`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class RepoRecord:
    """One repository as its host's API describes it, provider-neutral."""

    id: str
    name: str  # GitHub `name`; GitLab `path` (the URL slug, not the display name)
    full_name: str  # GitHub `full_name`; GitLab `path_with_namespace`
    https_url: str  # GitHub `clone_url`; GitLab `http_url_to_repo`
    ssh_url: str  # GitHub `ssh_url`; GitLab `ssh_url_to_repo`
    web_url: str  # GitHub `html_url`; GitLab `web_url`
    description: str = ""
    topics: tuple[str, ...] = ()
    archived: bool = False
    # The change marker: GitHub `pushed_at`; GitLab `updated_at` (else `last_activity_at`).
    pushed_at: str = ""
    # Seconds within which a later push may leave `pushed_at` unchanged (GitLab throttles it).
    pushed_throttle: int = 0

    def to_json(self) -> dict[str, Any]:
        """The record as stored in orgs.json."""
        return {
            "id": self.id,
            "name": self.name,
            "full_name": self.full_name,
            "https_url": self.https_url,
            "ssh_url": self.ssh_url,
            "web_url": self.web_url,
            "description": self.description,
            "topics": list(self.topics),
            "archived": self.archived,
            "pushed_at": self.pushed_at,
            "pushed_throttle": self.pushed_throttle,
        }

    @classmethod
    def from_json(cls, data: Any) -> RepoRecord | None:
        """A record read back from orgs.json, or None when the entry is damaged."""
        if not isinstance(data, dict):
            return None
        strings = ("id", "name", "full_name", "https_url", "ssh_url", "web_url", "description", "pushed_at")
        if not all(isinstance(data.get(k), str) for k in strings):
            return None
        topics = data.get("topics")
        throttle = data.get("pushed_throttle", 0)
        if not isinstance(topics, list) or not all(isinstance(t, str) for t in topics):
            return None
        if not isinstance(data.get("archived"), bool) or not isinstance(throttle, int) or isinstance(throttle, bool):
            return None
        if not data["name"] or not data["full_name"] or not data["https_url"]:
            return None
        return cls(
            **{k: data[k] for k in strings}, topics=tuple(topics), archived=data["archived"], pushed_throttle=throttle
        )


# Given each page of a listing as it arrives (OrgCatalog: an org listed for the first time is
# served and indexed page by page).
OnPage = Callable[[list[RepoRecord]], None]


def text_field(item: Mapping[str, Any], key: str, limit: int = 2048) -> str:
    """A string field of an API object, cut at `limit`; "" when missing or not a string."""
    value = item.get(key)
    return value[:limit] if isinstance(value, str) else ""


def topics_field(value: Any) -> tuple[str, ...]:
    """A list of topics, bounded (100 of at most 100 characters); () when not a list."""
    if not isinstance(value, list):
        return ()
    return tuple(t[:100] for t in value[:100] if isinstance(t, str) and t)


@dataclass(frozen=True)
class RecordFields:
    """Where one host's repository object keeps the fields every RepoRecord has."""

    name: str
    full_name: str
    full_name_limit: int
    https_url: str
    ssh_url: str
    web_url: str


def read_record(
    item: Mapping[str, Any], fields: RecordFields, topics: Any, pushed_at: str, pushed_throttle: int = 0
) -> RepoRecord | None:
    """A RepoRecord from a host's object (the host reads topics and the change marker its own way);
    None when the name, full name or HTTPS URL is missing."""
    rec = RepoRecord(
        id=str(item.get("id", "")),
        name=text_field(item, fields.name, 255),
        full_name=text_field(item, fields.full_name, fields.full_name_limit),
        https_url=text_field(item, fields.https_url),
        ssh_url=text_field(item, fields.ssh_url),
        web_url=text_field(item, fields.web_url),
        description=text_field(item, "description", 1000),
        topics=topics_field(topics),
        archived=item.get("archived") is True,
        pushed_at=pushed_at,
        pushed_throttle=pushed_throttle,
    )
    return rec if rec.name and rec.full_name and rec.https_url else None


@dataclass(frozen=True)
class ReleaseAsset:
    """One file of a release: its name, where its bytes are fetched, and what the host says of it."""

    name: str
    url: str  # GitHub: the API asset URL (`Accept: application/octet-stream`); GitLab: the link's URL
    size: int | None = None
    digest: str | None = None  # "sha256:<hex>" when the host says (GitHub since 2025)


@dataclass(frozen=True)
class Release:
    """One release: its tag, whether it is a draft (never served) or a prerelease, and its assets."""

    tag: str
    draft: bool
    prerelease: bool
    assets: tuple[ReleaseAsset, ...]

    def asset(self, name: str) -> ReleaseAsset | None:
        """The asset called `name`, if the release has one."""
        return next((a for a in self.assets if a.name == name), None)
