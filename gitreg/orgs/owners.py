"""Who owns each org module address: the repository that held it first keeps it.

An address (namespace/name/system) may be claimed by several repositories: two subgroups of
one GitLab group (`acme/team-b/terraform-aws-vpc` and `acme/aaa-newcomer/terraform-aws-vpc`),
two orgs sharing a namespace, a rename or a transfer. Whoever can create a repository
anywhere in the group could otherwise replace a module every team installs, so the first
repository to hold an address keeps it; a newcomer is a conflict (reported, never served).
The owner changes only when the API confirms its repository is gone: its org has a listing
(an enumeration, or a webhook's re-read of that repository) that no longer claims the address
with it (deleted, archived, renamed or transferred away, no longer matching). Owners are kept
in orgs.json (its `owners` list, each with the time it was first held), so a restart does
not reopen the race.

Replicas sharing Redis agree on owners (the application connects `on_held` and `adopt` to the
shared state; see `gitreg.replicas.owning`): each new holder is published with its time, and the
earliest holder known anywhere wins (a tie goes to the smaller holder text), so a replica started
after a newcomer appeared serves the repository another replica held first. An adopted holder is
still only served while its org's listing claims the address with it: one the API does not list
(gone, or planted in Redis) falls back to this replica's own rule, and its record is replaced.
"""

from __future__ import annotations

import json
import logging
import math
import time
from collections.abc import Callable, Container, Iterable, Iterator, Mapping, Sequence
from typing import Any

from gitreg.core.errors import GitregError
from gitreg.core.events import Signal
from gitreg.core.names import ModuleAddress, address_from_text, parse_address
from gitreg.orgs.model import OrgRepo, OrgState
from gitreg.storage.files import drained

log = logging.getLogger(__name__)


def org_key(s: OrgState) -> tuple[str, str, str]:
    """How orgs.json names an org (as its listings do): provider, api_url, group (any case)."""
    return s.config.provider, s.config.api_url, s.config.group.lower()


Held = tuple[int, str, float]  # (org index, full name, first held) of the repository holding an address


def holder_text(orgs: Sequence[OrgState], org: int, name: str) -> str:
    """How a holder is named to other replicas: its org key and full name (JSON)."""
    return json.dumps([*org_key(orgs[org]), name], ensure_ascii=False)


class Owners:
    """address -> (org index, full name, first held) of the repository that holds it (event loop only).

    A listing is settled on a thread against a `draft()` (a copy), whose outcome `install()`
    takes on the event loop; `version` tells whether the owners changed meanwhile.
    """

    def __init__(self, orgs: Sequence[OrgState], clock: Callable[[], float] = time.time) -> None:
        self._orgs = orgs
        self._clock = clock
        self._held: dict[ModuleAddress, Held] = {}
        self._gone: set[tuple[ModuleAddress, str]] = set()  # (address, holder text) found gone here
        self._adopted: set[tuple[ModuleAddress, str]] = set()  # logged once each
        self.dirty = False  # changed since orgs.json was last written
        self.version = 0  # counts every change of the holders
        # A new holder: (address, holder text, first held, the holder text it replaces or "").
        self.on_held: Signal[[str, str, float, str]] = Signal(failures=(log, "an owner subscriber failed"))

    def holder(self, address: ModuleAddress) -> tuple[int, str] | None:
        """The (org index, full name) holding `address`, or None."""
        held = self._held.get(address)
        return None if held is None else (held[0], held[1])

    def _text(self, org: int, name: str) -> str:
        return holder_text(self._orgs, org, name)

    def entries(self) -> list[tuple[str, str, float]]:
        """Every owner as (address, holder text, first held): what this replica publishes."""
        return [(str(a), self._text(org, name), since) for a, (org, name, since) in self._held.items()]

    def snapshot(self) -> dict[ModuleAddress, Held]:
        """A copy of every holder (for work off the loop: the owners change on the loop meanwhile)."""
        return dict(self._held)

    def adopt(self, address: str, holder: str, since: float) -> bool:
        """Another replica's owner (from Redis): taken when earlier than this replica's (or it has
        none) and of an org configured here, unless found gone here; True when the holder changed.
        When this replica's own holder is earlier, it is published again (Redis keeps the earliest)."""
        parsed = _holder(address, holder)
        if parsed is None:
            return False
        target, key, name = parsed
        org = next((s.index for s in self._orgs if org_key(s) == key), None)
        if org is None or (target, holder) in self._gone:
            return False
        held = self._held.get(target)
        if held is not None:
            mine = self._text(held[0], held[1])
            if (held[2], mine) <= (since, holder):
                if mine != holder:
                    self.on_held.emit(address, mine, held[2], "")
                return False
        if (target, holder) not in self._adopted:
            self._adopted.add((target, holder))
            log.warning(
                "org module %s: another replica's owner %s held it first (since %s); it holds it here too",
                target,
                name[:200],
                time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(since)),
            )
        self._held[target] = (org, name, since)
        self._orgs[org].stats.owners_adopted += 1
        self.dirty = True
        self.version += 1
        return True

    def draft(self, listed: frozenset[int]) -> OwnerDraft:
        """A copy to settle a listing on (off the loop): `listed`, the orgs that will have a listing."""
        return OwnerDraft(self._orgs, self.snapshot(), listed, self._clock())

    def draft_of(self, addresses: Iterable[ModuleAddress], listed: frozenset[int]) -> OwnerDraft:
        """A draft of only the holders of `addresses` (a webhook's patch settles those alone; a copy of
        230,000 holders took 74 ms of the loop per webhook); taken back by `install_part`."""
        held = {a: h for a in addresses if (h := self._held.get(a)) is not None}
        return OwnerDraft(self._orgs, held, listed, self._clock())

    def install(self, draft: OwnerDraft) -> None:
        """Take what `draft` settled (on the loop; no owner changed since it was made): log each owner
        found gone, tell subscribers of each new holder."""
        self._held = draft.held
        self._took(draft)

    def install_part(self, draft: OwnerDraft, addresses: Iterable[ModuleAddress]) -> None:
        """Take what a `draft_of(addresses)` settled for those addresses (the others are left as they are)."""
        for address in addresses:
            held = draft.held.get(address)
            if held is None:
                self._held.pop(address, None)
            else:
                self._held[address] = held
        self._took(draft)

    def _took(self, draft: OwnerDraft) -> None:
        self.version += 1
        self.dirty |= draft.changed
        for address, gone, name, replaced in draft.replaced:
            self._gone.add((address, replaced))
            log.warning(
                "org module %s: its owner %s is gone (the API no longer lists it there); %s holds it now",
                address,
                gone[:200],
                name[:200],
            )
        if self.on_held.listened:  # (30,000 new holders after a first listing: no loop when nobody listens)
            for held in draft.settled:
                self.on_held.emit(*held)

    def to_json(self) -> list[dict[str, Any]]:
        """orgs.json's `owners` (see `owners_json`)."""
        return owners_json(self._orgs, self._held)

    def load(self, items: Any) -> int:
        """Take orgs.json's `owners` (of orgs still configured; damaged entries skipped); how many are held.

        Where an owner adopted from another replica is already held, the earlier of the two stays
        (ours published again if so).
        """
        return self.take_loaded(parse_owners(self._orgs, items))

    def take_loaded(self, loaded: dict[ModuleAddress, Held]) -> int:
        """`parse_owners()`'s holders (parsed off the loop), merged as `load()` says; how many are held."""
        if self._held:
            for address, held in self._held.items():
                mine = loaded.get(address)
                text = self._text(held[0], held[1])
                if mine is None or (held[2], text) <= (mine[2], self._text(mine[0], mine[1])):
                    loaded[address] = held
                else:
                    self.on_held.emit(str(address), self._text(mine[0], mine[1]), mine[2], "")
        self._held = loaded
        self.version += 1
        return len(self._held)


class OwnerDraft:
    """The owners as a listing is settled (`settle`, `forget_gone`), off the loop: a copy of the
    holders, the orgs listed, and the time new holders are first held. Nothing shared is touched;
    `Owners.install` takes the outcome on the loop."""

    def __init__(
        self, orgs: Sequence[OrgState], held: dict[ModuleAddress, Held], listed: frozenset[int], now: float
    ) -> None:
        self.orgs = orgs  # (read for their configs only)
        self.held = held
        self.listed = listed
        self.now = now
        self.changed = False
        # Each new holder as Owners.on_held tells it (texts made here, off the loop), and those
        # that replace one found gone: (address, the full names gone and now, the holder text gone).
        self.settled: list[tuple[str, str, float, str]] = []
        self.replaced: list[tuple[ModuleAddress, str, str, str]] = []

    def holder(self, address: ModuleAddress) -> tuple[int, str] | None:
        """The (org index, full name) holding `address`, or None."""
        held = self.held.get(address)
        return None if held is None else (held[0], held[1])

    def settle(
        self, address: ModuleAddress, repos: list[OrgRepo], first: Callable[[list[OrgRepo]], OrgRepo]
    ) -> OrgRepo | None:
        """Which of `repos` (every claim to `address`) serves it: its holder, else `first(repos)`.

        None when the holder's org has no listing yet: whether its repository is gone is not known.
        """
        held = self.held.get(address)
        if held is not None:
            org, name, _ = held
            lowered = name.lower()
            for repo in repos:
                if repo.org == org and repo.full_name.lower() == lowered:
                    return repo
            if org not in self.listed:
                return None
        winner = first(repos)
        self.held[address] = (winner.org, winner.full_name, self.now)
        self.changed = True
        replaces = ""
        if held is not None:
            replaces = holder_text(self.orgs, held[0], held[1])
            self.replaced.append((address, held[1], winner.full_name, replaces))
        self.settled.append((str(address), holder_text(self.orgs, winner.org, winner.full_name), self.now, replaces))
        return winner

    def forget_gone(self, claimed: Container[ModuleAddress]) -> None:
        """Drop the owners of addresses nobody claims any more (their org listed)."""
        gone = [a for a, (org, _, _) in self.held.items() if a not in claimed and org in self.listed]
        for address in gone:
            del self.held[address]
        self.changed |= bool(gone)


def owners_json(orgs: Sequence[OrgState], held: Mapping[ModuleAddress, Held]) -> list[dict[str, Any]]:
    """orgs.json's `owners`: each address with its holder's org key, full name and when first held."""
    return list(owner_items(orgs, held))


def owner_items(orgs: Sequence[OrgState], held: Mapping[ModuleAddress, Held]) -> Iterator[dict[str, Any]]:
    """`owners_json`'s items one at a time (orgs.json is written item by item)."""
    for address, (org, name, since) in sorted(held.items()):
        provider, api_url, group = org_key(orgs[org])
        yield {
            "address": str(address),
            "provider": provider,
            "api_url": api_url,
            "group": group,
            "full_name": name,
            "since": since,
        }


def parse_owners(orgs: Sequence[OrgState], items: Any) -> dict[ModuleAddress, Held]:
    """orgs.json's `owners` read back (of orgs still configured; damaged entries skipped; the earlier
    of two for one address). A file older than `since` counts as held from the start (time 0).
    Run it off the loop for a large file; the items are removed from `items` as they are read."""
    held: dict[ModuleAddress, Held] = {}
    if not isinstance(items, list):
        return held
    keys = {org_key(s): s.index for s in orgs}
    for item in drained(items):
        if not isinstance(item, dict) or not all(
            isinstance(item.get(k), str) for k in ("address", "provider", "api_url", "group", "full_name")
        ):
            continue
        org = keys.get((item["provider"], item["api_url"], item["group"].lower()))
        address = address_from_text(item["address"])
        if org is None or address is None or not item["full_name"]:
            continue
        since = item.get("since")
        since = float(since) if isinstance(since, int | float) and math.isfinite(since) else 0.0
        name = item["full_name"][:1024]
        before = held.get(address)
        if before is None or (since, holder_text(orgs, org, name)) < (
            before[2],
            holder_text(orgs, before[0], before[1]),
        ):
            held[address] = (org, name, since)
    return held


def _holder(address: str, holder: str) -> tuple[ModuleAddress, tuple[str, str, str], str] | None:
    """(address, org key, full name) of a holder named by another replica, or None if malformed."""
    parts = address.split("/")
    try:
        value = json.loads(holder)
        target = parse_address(*parts) if len(parts) == 3 else None
    except (ValueError, GitregError):
        return None
    if target is None or not isinstance(value, list) or len(value) != 4 or not all(isinstance(v, str) for v in value):
        return None
    provider, api_url, group, name = value
    if not name or len(name) > 1024:
        return None
    return target, (provider, api_url, group.lower()), name
