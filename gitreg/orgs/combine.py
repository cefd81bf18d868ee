"""The orgs' claims combined into one listing, each address served by its owner: computed off the loop.

A listing of 230,000 modules takes seconds of Python to combine (claims grouped by address, every
owner settled, the by-repository index and the change set built). `combine` does all of it on
a thread from a snapshot (`Inputs`: each org's records and claims, never mutated once taken; a
copy of the owners, `Owners.draft`) and returns what the catalog installs on the event loop by
reference swaps (`Combined`). Nothing the loop reads or writes is touched here.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from gitreg.config.model import OrgConfig
from gitreg.core.names import ModuleAddress
from gitreg.forges.records import RepoRecord
from gitreg.orgs.model import Evaluated, OrgChanges, OrgRepo, evaluate, timestamp
from gitreg.orgs.owners import OwnerDraft
from gitreg.storage.files import collector_paused

# A listing of this many modules or more is kept out of the garbage collector's walks once built
# (a smaller one costs a collection little, and freezing keeps what cyclic garbage is alive then).
KEEP_LONG_LIVED_AT = 2000
# A conflict to log once: (address, claimant, owner or ""), the claimant, why it is not served.
Clash = tuple[tuple[ModuleAddress, str, str], OrgRepo, str]


@dataclass(frozen=True)
class OrgView:
    """One org's listing as a rebuild sees it: its records (None: not listed yet) and claims."""

    index: int
    label: str
    records: Mapping[str, RepoRecord] | None
    claims: Sequence[OrgRepo]


@dataclass(frozen=True)
class Inputs:
    """What a rebuild reads: taken on the loop, read on a thread (none of it is mutated meanwhile)."""

    orgs: tuple[OrgView, ...]
    owners: OwnerDraft  # a copy of the owners, settled in place
    old: Mapping[ModuleAddress, OrgRepo]  # the listing served now (replaced on change, never mutated)
    # (org index, when its previous listing was enumerated): look again at its too-recent push markers.
    since: tuple[int, float] | None = None


@dataclass
class Combined:
    """A rebuild's outcome, installed on the loop as is."""

    listing: dict[ModuleAddress, OrgRepo]
    by_repository: dict[str, set[ModuleAddress]]
    modules: dict[int, dict[ModuleAddress, OrgRepo]]  # per org: the addresses it owns
    conflicts: dict[int, dict[str, str]]  # per org: full_name -> why it is not served
    clashes: list[Clash]
    changes: OrgChanges
    owners: OwnerDraft
    contested: dict[ModuleAddress, list[OrgRepo]]  # every claim to each address claimed more than once


def combine(inputs: Inputs) -> Combined:
    """Combine the orgs' claims into a listing, each address served by its owner (a thread's work)."""
    orgs = {v.index: v for v in inputs.orgs}
    draft = inputs.owners
    claims: dict[ModuleAddress, list[OrgRepo]] = {}
    for view in inputs.orgs:
        for repo in view.claims:
            found = claims.get(repo.address)
            if found is None:
                claims[repo.address] = [repo]
            else:
                found.append(repo)
    new: dict[ModuleAddress, OrgRepo] = {}
    conflicts: dict[int, dict[str, str]] = {}
    clashes: list[Clash] = []
    first = first_claim(orgs)
    for address, repos in claims.items():
        owner = draft.settle(address, repos, first)
        if owner is not None:
            new[address] = owner
        if len(repos) == 1 and owner is not None:
            continue
        for repo in repos:
            if repo is not owner:
                key, why = conflict(orgs, draft, repo, owner)
                conflicts.setdefault(repo.org, {})[repo.full_name] = why
                clashes.append((key, repo, why))
    draft.forget_gone(claims)
    contested = {address: repos for address, repos in claims.items() if len(repos) > 1}
    modules: dict[int, dict[ModuleAddress, OrgRepo]] = {v.index: {} for v in inputs.orgs}
    for address, repo in new.items():
        modules[repo.org][address] = repo
    changes = diff(inputs.old, new, _recent(orgs, inputs.since))
    return Combined(new, by_repository(new), modules, conflicts, clashes, changes, draft, contested)


def combine_paused(inputs: Inputs) -> Combined:
    """`combine` with the garbage collector paused: it makes a million objects, all kept, then out of
    the collector's walks (a collection walking them holds the GIL, so the loop too; see storage.files)."""
    with collector_paused(keep=sum(len(v.claims) for v in inputs.orgs) >= KEEP_LONG_LIVED_AT):
        return combine(inputs)


def evaluate_kept(org: OrgConfig, index: int, records: list[RepoRecord], protocols: tuple[str, ...]) -> Evaluated:
    """`evaluate()` on a thread, what it makes (an OrgRepo a repository) kept as `combine_paused` does."""
    with collector_paused(keep=len(records) >= KEEP_LONG_LIVED_AT):
        return evaluate(org, index, records, protocols)


def by_repository(listing: Mapping[ModuleAddress, OrgRepo]) -> dict[str, set[ModuleAddress]]:
    """The addresses each repository (cache key) serves."""
    index: dict[str, set[ModuleAddress]] = {}
    for address, repo in listing.items():
        found = index.get(repo.repository)
        if found is None:
            index[repo.repository] = {address}
        else:
            found.add(address)
    return index


def first_claim(orgs: Mapping[int, OrgView]) -> Callable[[list[OrgRepo]], OrgRepo]:
    """Of claims to an address nobody holds yet: the earlier org's, then the oldest repository's
    (the lowest id: created first), never the first by name (`aaa-...` sorts before anyone)."""

    def age(repo: OrgRepo) -> tuple[int, int, str]:
        records = orgs[repo.org].records or {}
        rec = records.get(repo.full_name.lower())
        rid = int(rec.id) if rec is not None and rec.id.isdigit() and len(rec.id) < 30 else 1 << 100
        return repo.org, rid, repo.full_name.lower()

    return lambda repos: min(repos, key=age)


def conflict(
    orgs: Mapping[int, OrgView], draft: OwnerDraft, repo: OrgRepo, owner: OrgRepo | None
) -> tuple[tuple[ModuleAddress, str, str], str]:
    """Why `repo` does not serve its address (its owner holds it), and the key it is logged once by."""
    if owner is None:
        held = draft.holder(repo.address)
        holder = f"{held[1]} of {orgs[held[0]].label}" if held else "another repository"
        why = f"conflict: {repo.address} is held by {holder}, whose org is not listed yet"
    else:
        why = (
            f"conflict: {repo.address} is held by {owner.full_name} of {orgs[owner.org].label}; "
            "an address keeps its first owner until that repository is gone"
        )
    return (repo.address, repo.full_name, owner.full_name if owner is not None else ""), why


def _recent(orgs: Mapping[int, OrgView], since: tuple[int, float] | None) -> frozenset[ModuleAddress]:
    """The addresses of org `since[0]` whose push marker is too recent to trust.

    GitLab moves its timestamps at most every few minutes per project: a push soon after the
    one we last saw leaves the marker as it was. Look again at those.
    """
    if since is None:
        return frozenset()
    view = orgs[since[0]]
    records = view.records or {}
    recent: set[ModuleAddress] = set()
    for repo in view.claims:
        rec = records.get(repo.full_name.lower())
        if rec is None or not rec.pushed_throttle:
            continue
        marker = timestamp(repo.pushed_at)
        if marker is not None and since[1] - marker < rec.pushed_throttle:
            recent.add(repo.address)
    return frozenset(recent)


def diff(
    old: Mapping[ModuleAddress, OrgRepo], new: Mapping[ModuleAddress, OrgRepo], pushed_hint: frozenset[ModuleAddress]
) -> OrgChanges:
    """What changed from listing `old` to `new` (`pushed_hint`: addresses to look at again anyway)."""
    added = frozenset(new.keys() - old.keys())
    removed = frozenset(old.keys() - new.keys())
    changed: set[ModuleAddress] = set()
    pushed: set[ModuleAddress] = set(added)
    for address, repo in new.items():
        before = old.get(address)
        if before is None or before is repo:  # (most of a listing: the very same record)
            if before is repo and address in pushed_hint:
                pushed.add(address)
            continue
        if before != repo:
            changed.add(address)
        if before.pushed_at != repo.pushed_at or before.repository != repo.repository or address in pushed_hint:
            pushed.add(address)
    return OrgChanges(added=added, changed=frozenset(changed), removed=removed, pushed=frozenset(pushed))
