"""What an org listing is made of: its repositories that are modules, changes, reports, per-org state.

`evaluate` is the one rule that turns a host's repository records into modules (name pattern,
archived, topic, allowed transport, one repository per address); everything else here is data.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import datetime

from gitreg.config.model import KNOWN_PROTOCOLS, OrgConfig
from gitreg.core.errors import UpstreamUnavailable
from gitreg.core.names import ModuleAddress
from gitreg.core.urls import mask, transport
from gitreg.forges.base import ForgeClient, OrgStats, RepoRecord

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


Subscriber = Callable[[OrgChanges], None]


@dataclass
class OrgState:
    """One `[[orgs]]` entry's listing and the state of its enumeration (event loop only)."""

    index: int
    config: OrgConfig
    stats: OrgStats = field(default_factory=OrgStats)
    client: ForgeClient | None = None
    records: dict[str, RepoRecord] | None = None  # full_name.lower() -> record; None: no listing yet
    modules: dict[ModuleAddress, OrgRepo] = field(default_factory=dict)
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


# What evaluate() finds: the modules (address -> OrgRepo), and the repositories ignored (full_name -> why).
Evaluated = tuple[dict[ModuleAddress, OrgRepo], dict[str, str]]


def evaluate(
    org: OrgConfig, index: int, records: Iterable[RepoRecord], protocols: tuple[str, ...]
) -> tuple[dict[ModuleAddress, OrgRepo], dict[str, str]]:
    """Which repositories are modules (address -> OrgRepo) and which are ignored (full_name -> why)."""
    modules: dict[ModuleAddress, OrgRepo] = {}
    ignored: dict[str, str] = {}
    pattern = org.pattern
    topic = org.topic.casefold() if org.topic else None
    for rec in sorted(records, key=lambda r: r.full_name.lower()):  # sorted: a clash resolves the same way every time
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
        scheme = transport(rec.https_url)
        if scheme not in protocols or rec.https_url.startswith("-"):
            ignored[rec.full_name] = (
                f"its clone URL {mask(rec.https_url)[:200]!r} uses a transport [git] protocols does not allow"
            )
            continue
        clone_url = rec.ssh_url if org.clone == "ssh" and rec.ssh_url else rec.https_url
        # (The https URL's transport is known already: parsing a URL is most of this loop's time.)
        clone_scheme = scheme if clone_url == rec.https_url else transport(clone_url)
        if clone_scheme not in KNOWN_PROTOCOLS or clone_url.startswith("-"):
            clone_url = rec.https_url
        address = ModuleAddress(org.namespace, m.group("name"), m.group("system"))
        if address in modules:
            ignored[rec.full_name] = f"{address} is already served by {modules[address].full_name}"
            continue
        modules[address] = OrgRepo(
            address=address,
            repository=rec.https_url,
            clone_url=clone_url,
            web_url=rec.web_url,
            description=rec.description,
            topics=rec.topics,
            archived=rec.archived,
            pushed_at=rec.pushed_at,
            full_name=rec.full_name,
            org=index,
        )
    return modules, ignored


def patch(records: dict[str, RepoRecord], dropped: tuple[str, ...], record: RepoRecord | None) -> None:
    """Drop repositories by full name, then add `record` (a webhook's change to a listing)."""
    for name in dropped:
        records.pop(name.lower(), None)
    if record is not None:
        records[record.full_name.lower()] = record


def timestamp(text: str) -> float | None:
    """An API's ISO 8601 time as epoch seconds; None when it is not one."""
    try:
        return datetime.fromisoformat(text).timestamp()
    except ValueError:
        return None
