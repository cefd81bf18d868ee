"""A repository webhook's change to one org's listing, applied without combining every org again.

A webhook names one repository, and the API's answer about it (orgs.repo_events) changes a record or
two of one org. Combining every org's claims again for that (orgs.combine: 230,000 records
evaluated and settled on a thread, the owners copied and the replaced listing freed on the loop)
held the event loop for hundreds of milliseconds per webhook. Here the change is computed in the
size of what it touches: `patch_org` (on a thread) copies the org's records with the change and
finds the claims it takes away and adds; `settle_touched` (on the loop) settles only the
addresses those claim, by the same owner rule as a full combine (`OwnerDraft.settle`, the first
claim by `first_claim`, conflicts by `conflict`); `install_touched` updates the served listing,
its by-repository index and the per-org modules and conflicts in place of a rebuild.

Only when every org has a listing: before that, an address's claims are not all known here
(first-listing pages join as they come), so the catalog combines whole as before.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass

from gitreg.core.names import ModuleAddress
from gitreg.forges.payloads import RepositoryEvent
from gitreg.forges.records import RepoRecord
from gitreg.orgs.combine import KEEP_LONG_LIVED_AT, Clash, OrgView, conflict, diff, first_claim
from gitreg.orgs.model import OrgChanges, OrgRepo, OrgState, change, evaluate, patch
from gitreg.orgs.owners import OwnerDraft, Owners
from gitreg.storage.files import collector_paused


@dataclass(frozen=True)
class OrgPatch:
    """A webhook's change to one org's listing (computed on a thread from the listing installed):
    its new records, claims and ignored repositories, the claims it took away and those it added,
    and the record the API's answer put in."""

    records: dict[str, RepoRecord]
    claims: list[OrgRepo]
    ignored: dict[str, str]
    removed: tuple[OrgRepo, ...]
    added: tuple[OrgRepo, ...]
    record: RepoRecord | None
    changed: bool  # the records differ from the ones installed
    listing: dict[ModuleAddress, OrgRepo]  # a copy of the served listing, to install the patch in
    base: Mapping[ModuleAddress, OrgRepo]  # the served listing it copied


def patch_org(
    s: OrgState,
    event: RepositoryEvent,
    found: RepoRecord | None,
    protocols: tuple[str, ...],
    listing: Mapping[ModuleAddress, OrgRepo],
) -> OrgPatch:
    """What the API's answer `found` about `event`'s repository does to org `s`'s listing (a thread's
    work: the copies of a 230,000-repository listing and its by-id scans; `s` and the served `listing`
    are only read). What it makes is kept out of the collector's walks (a young collection walking
    the copies held the loop 50-75 ms on a busy machine), as a rebuild's is (orgs.combine)."""
    with collector_paused(keep=len(listing) >= KEEP_LONG_LIVED_AT):
        return _patch_org(s, event, found, protocols, listing)


def _patch_org(
    s: OrgState,
    event: RepositoryEvent,
    found: RepoRecord | None,
    protocols: tuple[str, ...],
    listing: Mapping[ModuleAddress, OrgRepo],
) -> OrgPatch:
    records = s.records or {}
    dropped, record = change(s, records, event, found)
    copy = dict(records)
    gone = patch(copy, dropped, record)
    replaced = {records[key].full_name for key in gone}
    fresh = record is not None and record.full_name.lower() not in records
    claims, ignored = s.claims, s.ignored
    removed: tuple[OrgRepo, ...] = ()
    added: tuple[OrgRepo, ...] = ()
    if replaced:
        removed = tuple(c for c in s.claims if c.full_name in replaced)
        claims = [c for c in s.claims if c.full_name not in replaced]
        ignored = {name: why for name, why in s.ignored.items() if name not in replaced}
    if record is not None and (fresh or record.full_name.lower() in gone):
        new, why = evaluate(s.config, s.index, [record], protocols)
        added = tuple(new)
        claims = [*claims, *new]
        ignored = {**ignored, **why}
    changed = bool(gone) or fresh
    served = dict(listing) if changed else {}
    return OrgPatch(copy, claims, ignored, removed, added, record, changed, served, listing)


@dataclass
class Settled:
    """The addresses a patch touched, settled: every claim to each now, and who serves it (or None)."""

    claims: dict[ModuleAddress, list[OrgRepo]]
    owners: dict[ModuleAddress, OrgRepo | None]
    clashes: list[Clash]  # each claim not served, with why (as a full combine finds them)
    draft: OwnerDraft


def settle_touched(
    views: Mapping[int, OrgView],
    draft: OwnerDraft,
    before: Mapping[ModuleAddress, Sequence[OrgRepo]],
    p: OrgPatch,
) -> Settled:
    """Settle each address in `before` (its claims before the patch) with the patch's claims taken away
    and added, against `draft` (its holders; every org listed), as orgs.combine settles a listing."""
    gone = {(c.org, c.full_name) for c in p.removed}
    claims = {a: [c for c in repos if (c.org, c.full_name) not in gone] for a, repos in before.items()}
    for c in p.added:
        claims.setdefault(c.address, []).append(c)
    first = first_claim(views)
    owners: dict[ModuleAddress, OrgRepo | None] = {}
    clashes: list[Clash] = []
    for address, repos in claims.items():
        owner = draft.settle(address, repos, first) if repos else None
        owners[address] = owner
        for repo in repos:
            if repo is not owner:
                key, why = conflict(views, draft, repo, owner)
                clashes.append((key, repo, why))
    draft.forget_gone({a for a, repos in claims.items() if repos})
    return Settled(claims, owners, clashes, draft)


def settle_patch(
    orgs: Sequence[OrgState],
    s: OrgState,
    p: OrgPatch,
    owners: Owners,
    listing: Mapping[ModuleAddress, OrgRepo],
    contested: Mapping[ModuleAddress, list[OrgRepo]],
) -> tuple[dict[ModuleAddress, list[OrgRepo]], Settled]:
    """The addresses patch `p` of org `s` touches, each with every claim to it before the patch (every
    org listed: a claim alone is served, more are `contested`), and their settlement."""
    before: dict[ModuleAddress, list[OrgRepo]] = {}
    for c in (*p.removed, *p.added):
        found = contested.get(c.address)
        served = listing.get(c.address)
        before[c.address] = list(found) if found is not None else [served] if served is not None else []
    views = {o.index: OrgView(o.index, o.config.label, p.records if o is s else o.records, ()) for o in orgs}
    return before, settle_touched(views, owners.draft_of(before, frozenset(views)), before, p)


@dataclass
class Served:
    """What the catalog serves from, as `install_touched` updates it: the listing (replaced, never
    mutated), and the by-repository index, contested addresses, per-org conflicts (mutated in place)."""

    listing: dict[ModuleAddress, OrgRepo]
    by_repository: dict[str, set[ModuleAddress]]
    contested: dict[ModuleAddress, list[OrgRepo]]
    shadowed: dict[int, dict[str, str]]


def install_touched(
    served: Served,
    orgs: Sequence[OrgState],
    before: Mapping[ModuleAddress, Sequence[OrgRepo]],
    settled: Settled,
    p: OrgPatch,
) -> OrgChanges:
    """Take `settled` into `served` (its new listing: the patch's copy of the one served, as requests and
    threads hold that one) and each org's modules and counts; what changed (as `diff` says)."""
    listing = p.listing if p.base is served.listing else dict(served.listing)  # (replaced meanwhile: copied)
    old = {a: repo for a in settled.owners if (repo := served.listing.get(a)) is not None}
    new = {a: repo for a, repo in settled.owners.items() if repo is not None}
    touched: set[int] = set()
    for address, repo in old.items():
        listing.pop(address, None)
        _unindex(served.by_repository, repo.repository, address)
        orgs[repo.org].modules.pop(address, None)
        touched.add(repo.org)
    for repos in before.values():
        for repo in repos:
            served.shadowed.get(repo.org, {}).pop(repo.full_name, None)
            touched.add(repo.org)
    for address, repo in new.items():
        listing[address] = repo
        served.by_repository.setdefault(repo.repository, set()).add(address)
        orgs[repo.org].modules[address] = repo
        touched.add(repo.org)
    for address, repos in settled.claims.items():
        if len(repos) > 1:
            served.contested[address] = repos
        else:
            served.contested.pop(address, None)
    for _, repo, why in settled.clashes:
        served.shadowed.setdefault(repo.org, {})[repo.full_name] = why
        touched.add(repo.org)
    served.listing = listing
    for index in touched:
        orgs[index].stats.modules = len(orgs[index].modules)
        orgs[index].stats.conflicts = len(served.shadowed.get(index, ()))
    return diff(old, new, frozenset())


def followed(
    listing: Mapping[ModuleAddress, OrgRepo],
    index: dict[str, set[ModuleAddress]],
    repos: Iterable[OrgRepo],
    gone: Iterable[ModuleAddress],
) -> dict[ModuleAddress, OrgRepo]:
    """`listing` with `repos` put in and `gone` taken out (the index process following the serving one's
    changes), and its by-repository `index` updated in place (rebuilt whole for every webhook, it cost
    the index process 0.4-4 s of collections at 230,000 modules, on the cores the serving one needs)."""
    new = dict(listing)
    for address in gone:
        old = new.pop(address, None)
        if old is not None:
            _unindex(index, old.repository, address)
    for repo in repos:
        old = new.get(repo.address)
        if old is not None:
            _unindex(index, old.repository, repo.address)
        new[repo.address] = repo
        index.setdefault(repo.repository, set()).add(repo.address)
    return new


def _unindex(index: dict[str, set[ModuleAddress]], repository: str, address: ModuleAddress) -> None:
    found = index.get(repository)
    if found is not None:
        found.discard(address)
        if not found:
            del index[repository]


def host_paths(repos: Iterable[OrgRepo], host_path: Callable[[str], str | None]) -> dict[str, set[str]]:
    """The repositories (cache keys) each URL's host/path (urls.host_path) names: a module's https, clone
    and web URLs all name its repository (OrgListing.repositories_named)."""
    index: dict[str, set[str]] = {}
    reindex(index, host_path, (), repos, {})
    return index


def reindex(
    index: dict[str, set[str]],
    host_path: Callable[[str], str | None],
    old: Iterable[OrgRepo],
    new: Iterable[OrgRepo],
    served: Mapping[str, object],
) -> None:
    """Keep the host/path index (OrgListing.repositories_named) in step with a patch: the repositories
    no longer served leave it, the new ones join (the index of 230,000 modules is not built again)."""
    for repo in old:
        if repo.repository in served:
            continue  # (still serving another address)
        for url in (repo.repository, repo.clone_url, repo.web_url):
            key = host_path(url) if url else None
            if key is not None and key in index:
                index[key].discard(repo.repository)
                if not index[key]:
                    del index[key]
    for repo in new:
        for url in (repo.repository, repo.clone_url, repo.web_url):
            key = host_path(url) if url else None
            if key is not None:
                index.setdefault(key, set()).add(repo.repository)
