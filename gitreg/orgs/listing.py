"""The served org listing: what requests read (address -> `OrgRepo`), and every install into it.

Touched from the event loop only. Each install swaps references (a request sees the old listing
or the new one, never half of each) and tells subscribers (`on_change`) what changed: a rebuild's
outcome (`install`, orgs.combine), a webhook's patch for the few addresses it touches
(`install_patch`, orgs.patch), a page of a first listing (`add_page`), or, in the index process,
the serving process's changes (`follow`). `generation` counts the installs: a rebuild computed
from a snapshot compares it to know whether what it read changed meanwhile.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping, Sequence
from itertools import chain

from gitreg.config.model import Config, ModuleRule
from gitreg.config.rules import ResolvedModule
from gitreg.core.events import Signal
from gitreg.core.names import ModuleAddress
from gitreg.forges.records import RepoRecord
from gitreg.orgs.combine import KEEP_LONG_LIVED_AT, Clash, Combined
from gitreg.orgs.model import OrgChanges, OrgRepo, OrgState, evaluate
from gitreg.orgs.owners import Owners
from gitreg.orgs.patch import OrgPatch, Served, followed, host_paths, install_touched, reindex, settle_patch
from gitreg.orgs.store import OrgStore
from gitreg.storage.files import keep_long_lived

log = logging.getLogger(__name__)


class OrgListing:
    """Every org module served now, with its indexes; what changes it tells `on_change`."""

    def __init__(self, config: Config, orgs: Sequence[OrgState], owners: Owners, store: OrgStore) -> None:
        self.config = config
        self._orgs = orgs
        self._owners = owners
        self._store = store
        self.by_address: dict[ModuleAddress, OrgRepo] = {}
        self.by_repository: dict[str, set[ModuleAddress]] = {}
        self._by_host_path: dict[str, set[str]] | None = None  # built on the first webhook after a rebuild
        self._host_path: Callable[[str], str | None] | None = None  # (how it was built)
        self.contested: dict[ModuleAddress, list[OrgRepo]] = {}  # every claim to each address claimed twice or more
        self._resolved: dict[ModuleAddress, tuple[OrgRepo, ResolvedModule]] = {}
        self.shadowed: dict[int, dict[str, str]] = {}  # org index -> full_name -> why (an address conflict)
        self._clashes_logged: set[tuple[ModuleAddress, str, str]] = set()
        self.generation = 0  # installs so far
        # Told each change of the listing, on the event loop (a failing listener is logged, the rest still run).
        self.on_change: Signal[[OrgChanges]] = Signal(failures=(log, "an org listing subscriber failed"))

    # ---- reading ----------------------------------------------------------------------------

    def resolve(self, address: ModuleAddress) -> ResolvedModule | None:
        """The org module at `address` as a ResolvedModule (a synthetic rule), or None."""
        repo = self.by_address.get(address)
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
            require_signed=org.require_signed,
        )
        resolved = ResolvedModule(address, rule, repo.repository, repo.clone_url)
        self._resolved[address] = (repo, resolved)
        return resolved

    def repositories_named(self, urls: Iterable[str], host_path: Callable[[str], str | None]) -> list[str]:
        """The org repositories (cache keys) that any of `urls` names, by `host_path` (urls.host_path).

        A module's https, clone and web URLs all name its repository. The index is built once
        per listing change, not per webhook.
        """
        index = self._by_host_path
        if index is None:
            index = self._by_host_path = host_paths(self.by_address.values(), host_path)
            self._host_path = host_path
        found: dict[str, None] = {}
        for url in urls:
            key = host_path(url)
            for repository in sorted(index.get(key, ())) if key is not None else ():
                found[repository] = None
        return list(found)

    def pushed(self, repositories: Iterable[str]) -> frozenset[ModuleAddress]:
        """A tag webhook refreshed these repositories (cache keys): tell subscribers which org modules."""
        pushed = frozenset(a for url in repositories for a in self.by_repository.get(url, ()))
        if pushed:
            self.on_change.emit(OrgChanges(pushed=pushed))
        return pushed

    # ---- installing -------------------------------------------------------------------------

    def add_page(self, s: OrgState, page: list[RepoRecord]) -> None:
        """A slice of org `s`'s first listing (not the last page): its modules join the listing at once.

        Incremental, in the page's size: the address map is copied (a C-speed dict copy), never
        rebuilt from every org's modules, so a first listing of 300 pages stays linear.
        """
        if s.records is not None:  # a webhook's listing, or orgs.json, came first
            return
        claims, _ = evaluate(s.config, s.index, page, self.config.git.protocols)
        s.claims = [*s.claims, *claims]  # the last page's evaluation replaces them all
        added: dict[ModuleAddress, OrgRepo] = {}
        for repo in claims:
            address = repo.address
            if address in self.by_address or address in added:
                continue  # a second claim: the rebuild after the last page settles it (its owner)
            holder = self._owners.holder(address)
            if holder is not None and (holder[0], holder[1].lower()) != (repo.org, repo.full_name.lower()):
                continue  # held by another repository (of an org maybe not listed yet)
            added[address] = repo
        self.generation += 1
        if not added:
            return
        new = dict(self.by_address)
        new.update(added)
        self.by_address = new
        for address, repo in added.items():
            self.by_repository.setdefault(repo.repository, set()).add(address)
            s.modules[address] = repo
        self._by_host_path = None
        s.stats.modules += len(added)
        self._store.changed()
        self.on_change.emit(OrgChanges(added=frozenset(added), pushed=frozenset(added)))
        _keep(new)

    def install(self, combined: Combined, announce: bool) -> None:
        """Take a rebuild's outcome (by reference swaps); tell subscribers what changed (and, with
        `announce`, that every org is listed now, even when its last page changed nothing)."""
        self.generation += 1
        self._owners.install(combined.owners)
        self.by_address = combined.listing
        self.by_repository = combined.by_repository
        self._by_host_path = None
        self.shadowed = combined.conflicts
        self.contested = combined.contested
        for s in self._orgs:
            s.modules = combined.modules[s.index]
            s.stats.modules = len(s.modules)
            s.stats.conflicts = len(combined.conflicts.get(s.index, ()))
        for address in combined.changes.removed:
            self._resolved.pop(address, None)
        self._log_clashes(combined.clashes)
        changes = combined.changes
        if changes or announce or self._owners.dirty:
            self._store.changed()  # (the owners' flag is cleared by the write)
            if changes or announce:
                self.on_change.emit(changes)

    def install_patch(self, s: OrgState, p: OrgPatch) -> None:
        """Install a webhook's change to org `s` (orgs.patch: only the addresses it touches are settled),
        in one go: no await."""
        before, settled = settle_patch(self._orgs, s, p, self._owners, self.by_address, self.contested)
        s.records, s.claims, s.ignored = p.records, p.claims, p.ignored
        s.stats.repositories = len(p.records)
        self._owners.install_part(settled.draft, before)
        served = Served(self.by_address, self.by_repository, self.contested, self.shadowed)
        changes = install_touched(served, self._orgs, before, settled, p)
        self.generation += 1
        self.by_address = served.listing
        if self._by_host_path is not None and self._host_path is not None:
            now = [repo for repo in settled.owners.values() if repo is not None]
            reindex(self._by_host_path, self._host_path, chain(*before.values()), now, self.by_repository)
        for address in changes.removed:
            self._resolved.pop(address, None)
        self._log_clashes(settled.clashes)
        self._store.changed()
        if changes:
            self.on_change.emit(changes)

    def follow(self, repos: Iterable[OrgRepo], gone: Iterable[ModuleAddress], complete: bool) -> None:
        """In the index process: the serving process's listing changes (it enumerates, this one never does).

        `complete`: every org has its first listing there (until then nothing is dropped from the index).
        """
        gone = list(gone)
        for address in gone:
            self._resolved.pop(address, None)
        new = followed(self.by_address, self.by_repository, repos, gone)
        if complete:
            for s in self._orgs:
                if s.records is None:
                    s.records = {}  # listed by the serving process: nothing to wait for here
        self.generation += 1
        self.by_address = new
        self._by_host_path = None

    def _log_clashes(self, clashes: Iterable[Clash]) -> None:
        """Log each conflict once (by address, claimant and owner), however often it is settled again."""
        for key, repo, why in clashes:
            if key not in self._clashes_logged:
                self._clashes_logged.add(key)
                log.warning(
                    "org %s: %s claims %s, not served: %s",
                    self.config.orgs[repo.org].label,
                    repo.full_name[:200],
                    repo.address,
                    why,
                )


def _keep(listing: Mapping[ModuleAddress, OrgRepo]) -> None:
    """A page of a large listing just taken: out of the collector's walks (a full collection walking
    it stopped the loop for 100 ms and more); a rebuild's listing is kept so on its thread."""
    if len(listing) >= KEEP_LONG_LIVED_AT:
        keep_long_lived()
