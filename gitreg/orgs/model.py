"""What an org listing is made of: its repositories that are modules, changes, reports, per-org state.

`evaluate` is the one rule that turns a host's repository records into modules (name pattern,
archived, topic, clone URLs on the API's own Git host over an allowed transport); which of
several claims to one address is served is the catalog's (its first owner keeps it).
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any
from urllib.parse import urlsplit

from gitreg.config.model import OrgConfig
from gitreg.core.errors import UpstreamUnavailable
from gitreg.core.names import ModuleAddress
from gitreg.core.urls import mask, parse
from gitreg.forges.base import ForgeClient, OrgStats
from gitreg.forges.hosts import host
from gitreg.forges.payloads import RepositoryEvent
from gitreg.forges.records import RepoRecord

# Reasons a repository is not a module, as `report()` and `gitreg check --probe` show them.
NAME_MISMATCH = "name does not match repository_pattern {pattern!r}"
ARCHIVED = "archived (set include_archived = true to serve it)"
NO_TOPIC = "no topic {topic!r}"


class OrgListingPending(UpstreamUnavailable):
    """The namespace is served from an org whose first listing has not arrived yet."""

    status = 503


@dataclass(frozen=True)
class OrgRepo:
    """A repository of an org that is a module."""

    address: ModuleAddress
    repository: str  # the https clone URL gitreg lists tags of ([[credentials]] apply by URL prefix)
    clone_url: str  # what download answers give clients: https or ssh, per the org's `clone`
    web_url: str
    description: str
    topics: tuple[str, ...]
    archived: bool
    pushed_at: str  # the change marker (GitHub pushed_at; GitLab updated_at or last_activity_at)
    full_name: str
    org: int  # index into Config.orgs

    def __reduce__(self) -> tuple[type[OrgRepo], tuple[Any, ...]]:
        # Pickled from its fields, as ModuleAddress: by default the index process's parts (or its
        # seed) of a 230,000-module listing left 460,000 new dicts in the serving process, and
        # each full collection walked them (0.1-0.3 s of the loop, #22).
        fields = (self.repository, self.clone_url, self.web_url, self.description, self.topics, self.archived)
        return OrgRepo, (self.address, *fields, self.pushed_at, self.full_name, self.org)


@dataclass(frozen=True)
class OrgChanges:
    """What one enumeration or webhook changed in the listing."""

    added: frozenset[ModuleAddress] = frozenset()
    changed: frozenset[ModuleAddress] = frozenset()  # still listed, some field differs
    removed: frozenset[ModuleAddress] = frozenset()
    # Listed addresses whose tags may have changed (new push marker, a tag webhook, or a
    # GitLab marker too recent to trust): the ones that need a new ls-remote. Added ones too.
    pushed: frozenset[ModuleAddress] = frozenset()

    def __bool__(self) -> bool:
        return bool(self.added or self.changed or self.removed or self.pushed)

    @property
    def all(self) -> frozenset[ModuleAddress]:
        """Every address concerned."""
        return self.added | self.changed | self.removed | self.pushed


@dataclass(frozen=True)
class OrgReport:
    """One org's last listing: what was found, what became a module, what was ignored and why."""

    org: OrgConfig
    index: int
    found: int | None  # repositories in the listing; None when there is no listing yet
    modules: tuple[OrgRepo, ...]
    ignored: tuple[tuple[str, str], ...]  # (full_name, reason)
    enumerated_at: float | None  # wall clock of the listing's enumeration
    loaded: bool  # the listing came from orgs.json, not (yet) from the API
    error: str | None  # the last enumeration's failure, when it failed


@dataclass
class OrgState:
    """One `[[orgs]]` entry's listing and the state of its enumeration (event loop only)."""

    index: int
    config: OrgConfig
    stats: OrgStats = field(default_factory=OrgStats)
    client: ForgeClient | None = None
    records: dict[str, RepoRecord] | None = None  # full_name.lower() -> record; None: no listing yet
    claims: list[OrgRepo] = field(default_factory=list)  # every repository that is a module, by the rule
    modules: dict[ModuleAddress, OrgRepo] = field(default_factory=dict)  # the addresses this org owns
    ignored: dict[str, str] = field(default_factory=dict)
    enumerated_at: float | None = None
    loaded: bool = False
    error: str | None = None
    failures: int = 0
    # Webhook changes applied while an enumeration runs: its pages may predate them, so they
    # are applied again on top of its result.
    journal: list[tuple[tuple[str, ...], RepoRecord | None]] = field(default_factory=list)
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    wake: asyncio.Event = field(default_factory=asyncio.Event)
    attempted: asyncio.Event = field(default_factory=asyncio.Event)  # a first enumeration ended (either way)


def git_hosts(org: OrgConfig) -> frozenset[str]:
    """The hosts whose clone URLs org `org`'s API may name: its own Git host, and `clone_hosts`.

    The API's Git host is `api_url`'s host, and without a leading `api.` too (api.github.com
    serves github.com; GitLab and GitHub Enterprise Server serve the API on the Git host).
    """
    api = (urlsplit(org.api_url).hostname or "").lower()
    return frozenset({api, api.removeprefix("api."), *org.clone_hosts} - {""})


def link(url: str) -> str:
    """`url` when it is an http(s) URL with a host (a page link may be followed); else ""."""
    found = parse(url)
    return url if found is not None and found.scheme in ("http", "https") and found.host else ""


def unusable(url: str, hosts: frozenset[str], allowed: Iterable[str], what: str) -> str | None:
    """Why the clone URL `url` from an org's API is not used (host, transport), or None when it is fine."""
    found = parse(url)
    shown = mask(url)[:200]
    if found is None:
        return f"its {what} clone URL {shown!r} is not a Git URL gitreg accepts"
    if found.host not in hosts:
        where = ", ".join(sorted(hosts))
        return f"its {what} clone URL {shown!r} is not on the API's Git host ({where}; see clone_hosts)"
    if found.transport not in allowed:
        return f"its {what} clone URL {shown!r} uses a transport [git] protocols does not allow"
    return None


# What evaluate() finds: the repositories claiming an address, and those ignored (full_name -> why).
Evaluated = tuple[list[OrgRepo], dict[str, str]]


def evaluate(
    org: OrgConfig, index: int, records: Iterable[RepoRecord], protocols: tuple[str, ...]
) -> tuple[list[OrgRepo], dict[str, str]]:
    """Which repositories claim a module address, and which are ignored (full_name -> why).

    Several may claim one address: which of them serves it (its owner) is the catalog's call.
    """
    claims: list[OrgRepo] = []
    ignored: dict[str, str] = {}
    pattern = org.pattern
    topic = org.topic.casefold() if org.topic else None
    hosts = git_hosts(org)
    for rec in records:
        m = pattern.match(rec.name)
        if m is None:
            ignored[rec.full_name] = NAME_MISMATCH.format(pattern=org.repository_pattern)
            continue
        if rec.archived and not org.include_archived:
            ignored[rec.full_name] = ARCHIVED
            continue
        if topic is not None and topic not in {t.casefold() for t in rec.topics}:
            ignored[rec.full_name] = NO_TOPIC.format(topic=org.topic)
            continue
        clone_url = rec.ssh_url if org.clone == "ssh" and rec.ssh_url else rec.https_url
        why = unusable(rec.https_url, hosts, protocols, "https")
        if why is None and clone_url != rec.https_url:
            why = unusable(clone_url, hosts, ("ssh",), "ssh")
        if why is not None:
            ignored[rec.full_name] = why
            continue
        claims.append(
            OrgRepo(
                address=ModuleAddress(org.namespace, m.group("name"), m.group("system")),
                repository=rec.https_url,
                clone_url=clone_url,
                web_url=link(rec.web_url),
                description=rec.description,
                topics=rec.topics,
                archived=rec.archived,
                pushed_at=rec.pushed_at,
                full_name=rec.full_name,
                org=index,
            )
        )
    return claims, ignored


def by_name(records: Iterable[RepoRecord]) -> dict[str, RepoRecord]:
    """A listing's records by lowercased full name (how OrgState.records holds them)."""
    return {r.full_name.lower(): r for r in records}


def patch(records: dict[str, RepoRecord], dropped: tuple[str, ...], record: RepoRecord | None) -> list[str]:
    """Drop repositories by full name, then put `record` in (a webhook's change to a listing, as the API
    described the repository): under its name now, its old name (the same id) dropped. The names
    whose record it removed, or replaced with a different one."""
    gone = [name.lower() for name in dropped if records.pop(name.lower(), None) is not None]
    if record is not None:
        key = record.full_name.lower()
        if record.id:
            for old in [k for k, rec in records.items() if rec.id == record.id and k != key]:
                del records[old]
                gone.append(old)
        before = records.get(key)
        if before is not None and before != record:
            gone.append(key)
        records[key] = record
    return gone


def patched(
    s: OrgState, records: Mapping[str, RepoRecord], event: RepositoryEvent, found: RepoRecord | None
) -> tuple[dict[str, RepoRecord], RepoRecord | None]:
    """A copy of org `s`'s listing `records` with what the API's answer `found` about a webhook's
    repository does to it, and the record it put in. Run on a thread: its by-id scans of a
    230,000-repository listing held the loop for 40-80 ms (#22)."""
    dropped, record = change(s, records, event, found)
    copy = dict(records)
    patch(copy, dropped, record)
    return copy, record


def change(
    s: OrgState, records: Mapping[str, RepoRecord], event: RepositoryEvent, found: RepoRecord | None
) -> tuple[tuple[str, ...], RepoRecord | None]:
    """What the API's answer about `event`'s repository does to org `s`'s listing `records`: the
    names it drops, and the record it puts in (None when the repository is not the org's)."""
    if found is not None and not owns(s, found.full_name):
        # Moved out of the org (as the API says): its record, by id, leaves the listing.
        return tuple(key for key, rec in records.items() if found.id and rec.id == found.id), None
    return confirmed_gone(records, event, found), found


def confirmed_gone(
    records: Mapping[str, RepoRecord], event: RepositoryEvent, found: RepoRecord | None
) -> tuple[str, ...]:
    """The listed names the API's answer about `event`'s repository removes.

    Found: none by name (patch() drops the record of the same id, its old name). Not found
    (404): what the event asked about, by project id when it was asked by id, else by name.
    """
    if found is not None:
        return ()
    if event.project_id is not None:
        return tuple(key for key, rec in records.items() if rec.id == event.project_id)
    return (event.full_name.lower(),) if event.full_name.lower() in records else ()


def owns(s: OrgState, full_name: str) -> bool:
    """True when the repository `full_name` is one org `s` lists (by its host's rule)."""
    return host(s.config.provider).owns(s.config.group, full_name)


def timestamp(text: str) -> float | None:
    """An API's ISO 8601 time as epoch seconds; None when it is not one."""
    try:
        return datetime.fromisoformat(text).timestamp()
    except ValueError:
        return None
