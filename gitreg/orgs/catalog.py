"""Org mode: the repositories of GitLab groups and GitHub organizations, served as modules.

`OrgCatalog` holds the current listing of every `[[orgs]]` entry (module address -> `OrgRepo`),
enumerates each org in the background (at start, then every `refresh_seconds`, jittered),
applies repository webhooks at once, and persists the last good listing to
`<[storage] path>/orgs.json` (atomically), loading it at start so a restart serves the known
modules before the API answers. An API failure never empties a listing: the last good one
stays. Requests only read memory; the registry asks `resolve()` for an org module, built as a
`ResolvedModule` with a synthetic `ModuleRule`, so org modules are served exactly like rule
modules. Subscribers (the module index) hear of every added, changed or removed address.
Everything here runs on the event loop, except the file write.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import random
import time
from collections.abc import AsyncIterator, Callable, Iterable, Mapping
from concurrent.futures import Executor
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import aiohttp

from gitreg.config.model import KNOWN_PROTOCOLS, Config, ModuleRule, OrgConfig
from gitreg.config.rules import ResolvedModule
from gitreg.core.errors import ModuleNotFound, UpstreamUnavailable
from gitreg.core.names import ModuleAddress
from gitreg.core.urls import mask, transport
from gitreg.forges.client import (
    ForgeClient,
    ForgeError,
    GitLabClient,
    OnPage,
    OrgStats,
    RepoRecord,
    client_for,
    github_record,
)
from gitreg.storage.files import collector_paused, json_document, remove_leftovers, write_atomically

log = logging.getLogger(__name__)

FILE_NAME = "orgs.json"
FORMAT = 1
# A request for an org namespace whose first listing is still being fetched waits this long
# for it (only before the very first listing; after that, requests never wait).
FIRST_LISTING_WAIT = 8.0
# After a failed enumeration the next try comes sooner than refresh_seconds: 15 s, doubling.
FAILURE_RETRY_SECONDS = 15.0
# How long a GitLab webhook waits for the one project it names (GitLab gives up after 10 s).
WEBHOOK_FETCH_SECONDS = 8.0
_JITTER = 0.1
_TMP_PREFIX = ".orgs-"  # temp files of write_atomically (`.orgs-*.tmp`)

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


@dataclass(frozen=True)
class RepositoryEvent:
    """A repository webhook, provider-neutral: what to drop and what to (re)load."""

    provider: str
    action: str
    full_name: str  # the repository's name now (owner/name, or GitLab's path_with_namespace)
    old_full_name: str | None = None  # before a rename or transfer
    record: RepoRecord | None = None  # GitHub: the payload's repository object
    project_id: str | None = None  # GitLab: fetched from the API (system hooks carry no URLs)
    removed: bool = False  # the repository is gone (deleted, destroyed)


Subscriber = Callable[[OrgChanges], None]


@dataclass
class _Org:
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


def _timestamp(text: str) -> float | None:
    try:
        return datetime.fromisoformat(text).timestamp()
    except ValueError:
        return None


class OrgCatalog:
    """The listings of every `[[orgs]]` entry; touched from the event loop only."""

    def __init__(self, config: Config, path: Path | None, executor: Executor | None = None) -> None:
        self.config = config
        self.path = path  # None: not persisted (gitreg check --probe)
        self.executor = executor
        self._orgs = [_Org(i, org) for i, org in enumerate(config.orgs)]
        self._namespaces: dict[str, list[_Org]] = {}
        for state in self._orgs:
            self._namespaces.setdefault(state.config.namespace, []).append(state)
        self._listing: dict[ModuleAddress, OrgRepo] = {}
        self._by_repository: dict[str, set[ModuleAddress]] = {}
        self._identities: dict[str, set[str]] | None = None  # built on the first webhook after a change
        self._resolved: dict[ModuleAddress, tuple[OrgRepo, ResolvedModule]] = {}
        self._shadowed: dict[int, dict[str, str]] = {}  # org index -> full_name -> why (a clash across orgs)
        self._clashes_logged: set[tuple[ModuleAddress, str]] = set()
        self._subscribers: list[Subscriber] = []
        self._dirty = False
        self._write_lock = asyncio.Lock()
        self._tasks: set[asyncio.Task[Any]] = set()
        self.writes = 0

    # ---- reading (requests) -----------------------------------------------------------

    def resolve(self, address: ModuleAddress) -> ResolvedModule | None:
        """The org module at `address` as a ResolvedModule (a synthetic rule), or None."""
        repo = self._listing.get(address)
        if repo is None:
            return None
        memo = self._resolved.get(address)
        if memo is not None and memo[0] is repo:
            return memo[1]
        org = self.config.orgs[repo.org]
        rule = ModuleRule(
            repository=repo.repository,
            namespace=address.namespace,
            name=address.name,
            system=address.system,
            clone_url=repo.clone_url,
            ref="tag",
            download=org.download,
        )
        resolved = ResolvedModule(address, rule, repo.repository, repo.clone_url)
        self._resolved[address] = (repo, resolved)
        return resolved

    def get(self, address: ModuleAddress) -> OrgRepo | None:
        """The org repository serving `address`, or None."""
        return self._listing.get(address)

    def modules(self) -> Mapping[ModuleAddress, OrgRepo]:
        """Every org module now (a read-only view; replaced, never mutated, on change)."""
        return self._listing

    def serves_namespace(self, namespace: str) -> bool:
        """True when an org serves `namespace` (so a name it does not list is a 404, without git)."""
        return namespace in self._namespaces

    def not_found(self, address: ModuleAddress) -> ModuleNotFound:
        """The 404 for a name the org listing of its namespace does not have."""
        labels = ", ".join(s.config.label for s in self._namespaces.get(address.namespace, ()))
        return ModuleNotFound(
            f"module {address} is not served by this registry: namespace {address.namespace} "
            f"lists the repositories of {labels}, and none of them is this module"
        )

    async def wait_listed(self, namespace: str, timeout: float = FIRST_LISTING_WAIT) -> None:
        """Return once every org of `namespace` has a listing; 503 (OrgListingPending) when one has none.

        Only before an org's first enumeration has ended does this wait (at most `timeout`).
        """
        pending = [s for s in self._namespaces.get(namespace, ()) if s.records is None]
        if not pending:
            return
        waiting = [s.attempted.wait() for s in pending if not s.attempted.is_set()]
        if waiting:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(asyncio.gather(*waiting), timeout)
        pending = [s for s in pending if s.records is None]
        if pending:
            errors = "; ".join(s.error for s in pending if s.error) or "the first listing is still being fetched"
            raise OrgListingPending(
                f"namespace {namespace} is served from an org whose repositories are not listed "
                f"yet ({errors}); try again shortly"
            )

    def repositories_named(self, urls: Iterable[str], identity: Callable[[str], str | None]) -> list[str]:
        """The org repositories (cache keys) that any of `urls` names, by `identity` (urls.identity).

        A module's https, clone and web URLs all name its repository. The index is built once
        per listing change, not per webhook.
        """
        index = self._identities
        if index is None:
            index = {}
            for repo in self._listing.values():
                for url in (repo.repository, repo.clone_url, repo.web_url):
                    key = identity(url) if url else None
                    if key is not None:
                        index.setdefault(key, set()).add(repo.repository)
            self._identities = index
        found: dict[str, None] = {}
        for url in urls:
            key = identity(url)
            for repository in sorted(index.get(key, ())) if key is not None else ():
                found[repository] = None
        return list(found)

    def complete(self) -> bool:
        """True when every org has a listing (enumerated, or loaded from orgs.json)."""
        return all(s.records is not None for s in self._orgs)

    def report(self) -> list[OrgReport]:
        """Per org: repositories found, the modules they became, the ones ignored and why."""
        out = []
        for s in self._orgs:
            ignored = {**s.ignored, **self._shadowed.get(s.index, {})}
            modules = tuple(repo for address, repo in sorted(s.modules.items()) if repo.full_name not in ignored)
            out.append(
                OrgReport(
                    org=s.config,
                    index=s.index,
                    found=len(s.records) if s.records is not None else None,
                    modules=modules,
                    ignored=tuple(sorted(ignored.items(), key=lambda kv: kv[0].lower())),
                    enumerated_at=s.enumerated_at,
                    loaded=s.loaded,
                    error=s.error,
                )
            )
        return out

    def stats(self) -> list[tuple[OrgConfig, OrgStats]]:
        """Each org's API counters, for the metrics collector."""
        return [(s.config, s.stats) for s in self._orgs]

    def subscribe(self, callback: Subscriber) -> Callable[[], None]:
        """Call `callback(changes)` on the event loop after each change; returns the unsubscribe function.

        Read `modules()` right after subscribing for the listing as it is now.
        """
        self._subscribers.append(callback)
        return lambda: self._subscribers.remove(callback) if callback in self._subscribers else None

    # ---- changing -----------------------------------------------------------------------

    def open(self, session: aiohttp.ClientSession) -> None:
        """Make each org's API client on `session` (done by lifetime(); by hand for a probe)."""
        for s in self._orgs:
            s.client = client_for(s.config, session, s.stats)

    async def enumerate(self, index: int) -> bool:
        """List org `index` through its API now; False (and the last listing kept) when that fails."""
        s = self._orgs[index]
        assert s.client is not None, "open() first"
        async with s.lock:
            s.journal.clear()
            # Listed for the first time: each page's modules are served and indexed as it arrives
            # (an org of thousands of repositories takes many pages, seconds each on a busy host).
            # Nothing is dropped before the last page; later listings apply whole.
            early = self._first_pages(s) if s.records is None else None
            try:
                records = await s.client.list_repositories(early)
            except ForgeError as e:
                s.error = e.message
                s.failures += 1
                kept = (
                    f"keeping the last listing ({len(s.records)} repositories)"
                    if s.records is not None
                    else "no listing yet"
                )
                log.warning("org %s: listing failed: %s; %s", s.config.label, e.message, kept)
                return False
            finally:
                s.attempted.set()
            since = s.enumerated_at
            s.enumerated_at = time.time()
            s.stats.last_success = s.enumerated_at
            s.error, s.failures, s.loaded = None, 0, False
            if not records and s.records:
                log.warning(
                    "org %s: the API now lists no repositories at all (it listed %d)", s.config.label, len(s.records)
                )
            listing = {r.full_name.lower(): r for r in records}
            for dropped, record in s.journal:
                _patch(listing, dropped, record)
            s.journal.clear()
            self._set_records(s, listing, since)
        log.info("org %s: %d repositories, %d modules", s.config.label, len(records), len(s.modules))
        await self.flush()
        return True

    def _first_pages(self, s: _Org) -> OnPage:
        """What takes each page of org `s`'s first listing: its modules join the listing at once."""

        def take(page: list[RepoRecord]) -> None:
            if s.records is not None:  # a webhook's listing, or orgs.json, came first
                return
            modules, _ = evaluate(s.config, s.index, page, self.config.git.protocols)
            for address, repo in modules.items():
                s.modules.setdefault(address, repo)  # the last page's evaluation settles any clash
            self._rebuild()

        return take

    def refresh_soon(self, index: int) -> None:
        """Ask the org's background loop to enumerate now (coalesced with one already running)."""
        self._orgs[index].wake.set()

    async def apply(self, event: RepositoryEvent) -> int:
        """Apply a repository webhook to every org it concerns; how many orgs it concerned."""
        concerned = 0
        for s in self._orgs:
            if s.config.provider != event.provider:
                continue
            now_here = self._owns(s.config, event.full_name)
            before_here = event.old_full_name is not None and self._owns(s.config, event.old_full_name)
            if not (now_here or before_here):
                continue
            concerned += 1
            if s.records is None:
                self.refresh_soon(s.index)  # no listing to patch: the first enumeration will see it
                continue
            record: RepoRecord | None = None
            if now_here and not event.removed:
                if event.record is not None:
                    record = event.record
                elif isinstance(s.client, GitLabClient):
                    try:
                        # Within GitLab's webhook timeout (10 s); past it, the next enumeration will do.
                        record = await asyncio.wait_for(
                            s.client.get_project(event.project_id or event.full_name), WEBHOOK_FETCH_SECONDS
                        )
                    except (TimeoutError, ForgeError) as e:
                        why = e.message if isinstance(e, ForgeError) else "no answer in time"
                        log.warning(
                            "org %s: webhook for %s: cannot fetch the project (%s); enumerating again",
                            s.config.label,
                            event.full_name[:200],
                            why,
                        )
                        self.refresh_soon(s.index)
                        continue
            if record is not None and not self._owns(s.config, record.full_name):
                record = None
            dropped = tuple(name for name in (event.old_full_name, event.full_name) if name is not None)
            if s.lock.locked():
                s.journal.append((dropped, record))
            records = dict(s.records)
            _patch(records, dropped, record)
            log.info(
                "org %s: %s webhook: %s %s", s.config.label, event.provider, event.action[:40], event.full_name[:200]
            )
            self._set_records(s, records, None)
        if concerned:
            self._schedule_flush()
        return concerned

    def notify_pushed(self, repositories: Iterable[str]) -> frozenset[ModuleAddress]:
        """A tag webhook refreshed these repositories (cache keys): tell subscribers which org modules."""
        pushed = frozenset(a for url in repositories for a in self._by_repository.get(url, ()))
        if pushed:
            self._notify(OrgChanges(pushed=pushed))
        return pushed

    @staticmethod
    def _owns(org: OrgConfig, full_name: str) -> bool:
        name = full_name.lower()
        group = org.group.lower()
        if org.provider == "github":
            return name.split("/", 1)[0] == group and name.count("/") == 1
        return name.startswith(group + "/")

    def _set_records(self, s: _Org, records: dict[str, RepoRecord], since: float | None) -> None:
        """Take a new listing for org `s`, rebuild the combined listing, tell subscribers."""
        first = s.records is None
        s.records = records
        s.modules, s.ignored = evaluate(s.config, s.index, records.values(), self.config.git.protocols)
        s.stats.repositories = len(records)
        recent: set[ModuleAddress] = set()
        if since is not None:
            # GitLab moves its timestamps at most every few minutes per project: a push soon
            # after the one we last saw leaves the marker as it was. Look again at those.
            for address, repo in s.modules.items():
                rec = records.get(repo.full_name.lower())
                marker = _timestamp(repo.pushed_at) if rec is not None and rec.pushed_throttle else None
                if marker is not None and rec is not None and since - marker < rec.pushed_throttle:
                    recent.add(address)
        self._rebuild(frozenset(recent), announce=first and self.complete())

    def _rebuild(self, pushed_hint: frozenset[ModuleAddress] = frozenset(), announce: bool = False) -> None:
        """Combine the orgs' modules into the listing; tell subscribers what changed (and, with
        `announce`, that every org is listed now, even when its last page changed nothing)."""
        old = self._listing
        new: dict[ModuleAddress, OrgRepo] = {}
        shadowed: dict[int, dict[str, str]] = {}
        for s in self._orgs:  # config order: the earlier org wins a clash
            for address, repo in s.modules.items():
                winner = new.get(address)
                if winner is None:
                    new[address] = repo
                    continue
                why = f"{address} is already served by {winner.full_name} of {self.config.orgs[winner.org].label}"
                shadowed.setdefault(s.index, {})[repo.full_name] = why
                if (address, repo.full_name) not in self._clashes_logged:
                    self._clashes_logged.add((address, repo.full_name))
                    log.warning("org %s: %s is not served: %s", s.config.label, repo.full_name[:200], why)
        self._install(new)
        self._shadowed = shadowed
        for s in self._orgs:
            s.stats.modules = sum(1 for repo in new.values() if repo.org == s.index)
        added = frozenset(new.keys() - old.keys())
        removed = frozenset(old.keys() - new.keys())
        for address in removed:
            self._resolved.pop(address, None)
        common = new.keys() & old.keys()
        changed = frozenset(a for a in common if new[a] != old[a])
        pushed = (
            frozenset(
                a
                for a in common
                if new[a].pushed_at != old[a].pushed_at or new[a].repository != old[a].repository or a in pushed_hint
            )
            | added
        )
        changes = OrgChanges(added=added, changed=changed, removed=removed, pushed=pushed)
        if changes or announce:
            self._dirty = True
            self._notify(changes)

    def _install(self, new: dict[ModuleAddress, OrgRepo]) -> None:
        self._listing = new
        by_repository: dict[str, set[ModuleAddress]] = {}
        for address, repo in new.items():
            by_repository.setdefault(repo.repository, set()).add(address)
        self._by_repository = by_repository
        self._identities = None

    def follow(self, repos: Iterable[OrgRepo], gone: Iterable[ModuleAddress], complete: bool) -> None:
        """In the index process: the serving process's listing changes (it enumerates, this one never does).

        `complete`: every org has its first listing there (until then nothing is dropped from the index).
        """
        new = dict(self._listing)
        for address in gone:
            new.pop(address, None)
            self._resolved.pop(address, None)
        for repo in repos:
            new[repo.address] = repo
        if complete:
            for s in self._orgs:
                if s.records is None:
                    s.records = {}  # listed by the serving process: nothing to wait for here
        self._install(new)

    def _notify(self, changes: OrgChanges) -> None:
        for callback in list(self._subscribers):
            try:
                callback(changes)
            except Exception:
                log.exception("an org listing subscriber failed")

    # ---- persistence ----------------------------------------------------------------------

    def _snapshot(self) -> str:
        orgs = [
            json_document(
                {
                    "provider": s.config.provider,
                    "api_url": s.config.api_url,
                    "group": s.config.group,
                    "enumerated_at": s.enumerated_at,
                },
                "repositories",
                (json.dumps(r.to_json()) for _, r in sorted(s.records.items())),
            )
            for s in self._orgs
            if s.records is not None
        ]
        return json_document({"format": FORMAT}, "orgs", orgs)

    async def flush(self) -> None:
        """Write orgs.json if the listing changed since the last write (off the event loop)."""
        if self.path is None:
            return
        async with self._write_lock:
            if not self._dirty:
                return
            text = self._snapshot()
            self._dirty = False
            try:
                await asyncio.get_running_loop().run_in_executor(
                    self.executor, write_atomically, self.path, text, _TMP_PREFIX
                )
                self.writes += 1
            except OSError as e:
                self._dirty = True
                log.warning("could not write %s: %s", self.path, e)

    def _schedule_flush(self) -> None:
        task = asyncio.ensure_future(self.flush())
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def load(self) -> int:
        """Read orgs.json (off the loop): the listings of orgs still configured; how many were loaded."""
        if self.path is None:
            return 0
        path = self.path
        data = await asyncio.get_running_loop().run_in_executor(self.executor, _read_json, path)
        with collector_paused():  # 10,000 repositories: a million objects, all kept (see storage.py)
            return self._take(data)

    def _take(self, data: Any) -> int:
        """Take the listings of an orgs.json document; how many orgs were loaded."""
        if not isinstance(data, dict) or data.get("format") != FORMAT or not isinstance(data.get("orgs"), list):
            return 0
        loaded = 0
        for entry in data["orgs"]:
            if not isinstance(entry, dict):
                continue
            for s in self._orgs:
                key = (s.config.provider, s.config.api_url, s.config.group.lower())
                if key != (entry.get("provider"), entry.get("api_url"), str(entry.get("group", "")).lower()):
                    continue
                items = entry.get("repositories")
                if not isinstance(items, list) or s.records is not None:
                    break
                records = [r for r in (RepoRecord.from_json(item) for item in items) if r is not None]
                when = entry.get("enumerated_at")
                s.enumerated_at = float(when) if isinstance(when, (int, float)) and not isinstance(when, bool) else None
                s.stats.last_success = s.enumerated_at
                s.loaded = True
                self._set_records(s, {r.full_name.lower(): r for r in records}, None)
                loaded += 1
                break
        self._dirty = False  # what was loaded is what the file holds
        return loaded

    # ---- background -----------------------------------------------------------------------

    async def _run(self, s: _Org) -> None:
        """Enumerate when due, then every refresh_seconds (jittered), or at once when woken.

        Due at start, unless the listing loaded from orgs.json is younger than refresh_seconds:
        then when it would have been due had gitreg kept running (a restart costs no API pages
        and leaves the first requests the CPU; repository webhooks still apply at once).
        """
        delay = 0.0
        if s.loaded and s.enumerated_at is not None:
            delay = max(0.0, s.enumerated_at + s.config.refresh_seconds - time.time())
            if delay:
                log.info("org %s: its listing on disk is current; next enumeration in %.0f s", s.config.label, delay)
        while True:
            if delay > 0:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(s.wake.wait(), delay)
            s.wake.clear()
            try:
                ok = await self.enumerate(s.index)
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("org %s: enumeration failed", s.config.label)
                ok = False
            refresh = s.config.refresh_seconds
            delay = refresh if ok else min(refresh, FAILURE_RETRY_SECONDS * 2 ** min(s.failures - 1, 10))
            client = s.client
            if not ok and client is not None and s.stats.rate_remaining == 0 and client.reset_at:
                delay = max(delay, client.reset_at - time.time())  # never ask again before the quota resets
            delay *= random.uniform(1 - _JITTER, 1 + _JITTER)  # orgs sharing a host do not fire together

    async def lifetime(self) -> AsyncIterator[None]:
        """Load orgs.json, open an API session, enumerate in the background; stop and write at shutdown."""
        if not self._orgs:
            yield
            return
        loaded = await self.load()
        if loaded:
            log.info("org listings loaded from %s: %d module(s) from %d org(s)", self.path, len(self._listing), loaded)
        async with aiohttp.ClientSession(auto_decompress=True, trust_env=False) as session:
            self.open(session)
            for s in self._orgs:
                task = asyncio.ensure_future(self._run(s))
                self._tasks.add(task)
                task.add_done_callback(self._tasks.discard)
            try:
                yield
            finally:
                for task in list(self._tasks):
                    task.cancel()
                await asyncio.gather(*self._tasks, return_exceptions=True)
                await self.flush()


def _patch(records: dict[str, RepoRecord], dropped: tuple[str, ...], record: RepoRecord | None) -> None:
    """Drop repositories by full name, then add `record` (a webhook's change to a listing)."""
    for name in dropped:
        records.pop(name.lower(), None)
    if record is not None:
        records[record.full_name.lower()] = record


def _read_json(path: Path) -> Any:
    """The file's JSON; None when missing; a damaged file is set aside (never fatal)."""
    remove_leftovers(path, _TMP_PREFIX)
    try:
        with collector_paused():
            return json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return None
    except (OSError, ValueError, RecursionError) as e:
        log.warning("%s could not be read (%s); the org listings start empty", path, type(e).__name__)
        with contextlib.suppress(OSError):
            os.replace(path, path.with_name(path.name + ".damaged"))
        return None


async def probe_orgs(config: Config) -> list[OrgReport]:
    """Enumerate every org once, now, without persisting anything (`gitreg check --probe`)."""
    catalog = OrgCatalog(config, None)
    async with aiohttp.ClientSession(trust_env=False) as session:
        catalog.open(session)
        for index in range(len(config.orgs)):
            await catalog.enumerate(index)
    return catalog.report()


def github_repository_event(payload: Mapping[str, Any]) -> RepositoryEvent | None:
    """A GitHub `repository` event (created, deleted, renamed, archived, unarchived, transferred, ...).

    None when the payload is not shaped like one.
    """
    action = payload.get("action")
    record = github_record(payload.get("repository"))
    if not isinstance(action, str) or record is None:
        return None
    old: str | None = None
    changes = payload.get("changes") if isinstance(payload.get("changes"), dict) else {}
    owner = record.full_name.split("/", 1)[0]
    if action == "renamed":
        name_from = _dig(changes, "repository", "name", "from")
        if isinstance(name_from, str) and name_from:
            old = f"{owner}/{name_from}"
    elif action == "transferred":
        frm = _dig(changes, "owner", "from")
        login = None
        if isinstance(frm, dict):
            login = _dig(frm, "organization", "login") or _dig(frm, "user", "login")
        if isinstance(login, str) and login:
            old = f"{login}/{record.name}"
    removed = action == "deleted"
    return RepositoryEvent("github", action, record.full_name, old, None if removed else record, removed=removed)


GITLAB_PROJECT_EVENTS = frozenset(
    {"project_create", "project_destroy", "project_rename", "project_transfer", "project_update"}
)


def gitlab_project_event(payload: Mapping[str, Any]) -> RepositoryEvent | None:
    """A GitLab system hook (or group hook project event) about a project; None otherwise."""
    name = payload.get("event_name")
    path = payload.get("path_with_namespace")
    # `name` is checked to be a string first: a list or an object cannot be looked up in a set.
    if not isinstance(name, str) or name not in GITLAB_PROJECT_EVENTS:
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


def _dig(data: Any, *keys: str) -> Any:
    for key in keys:
        if not isinstance(data, dict):
            return None
        data = data.get(key)
    return data
