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
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from gitreg.core.errors import GitregError
from gitreg.core.events import Signal
from gitreg.core.names import ModuleAddress, parse_address
from gitreg.orgs.model import OrgRepo, OrgState

log = logging.getLogger(__name__)


def org_key(s: OrgState) -> tuple[str, str, str]:
    """How orgs.json names an org (as its listings do): provider, api_url, group (any case)."""
    return s.config.provider, s.config.api_url, s.config.group.lower()


class Owners:
    """address -> (org index, full name, first held) of the repository that holds it (event loop only)."""

    def __init__(self, orgs: Sequence[OrgState], clock: Callable[[], float] = time.time) -> None:
        self._orgs = orgs
        self._clock = clock
        self._held: dict[ModuleAddress, tuple[int, str, float]] = {}
        self._gone: set[tuple[ModuleAddress, str]] = set()  # (address, holder text) found gone here
        self._adopted: set[tuple[ModuleAddress, str]] = set()  # logged once each
        self.dirty = False  # changed since orgs.json was last written
        # A new holder: (address, holder text, first held, the holder text it replaces or "").
        self.on_held: Signal[[str, str, float, str]] = Signal(failures=(log, "an owner subscriber failed"))

    def holder(self, address: ModuleAddress) -> tuple[int, str] | None:
        """The (org index, full name) holding `address`, or None."""
        held = self._held.get(address)
        return None if held is None else (held[0], held[1])

    def _text(self, org: int, name: str) -> str:
        """How a holder is named to other replicas: its org key and full name (JSON)."""
        return json.dumps([*org_key(self._orgs[org]), name], ensure_ascii=False)

    def entries(self) -> list[tuple[str, str, float]]:
        """Every owner as (address, holder text, first held): what this replica publishes."""
        return [(str(a), self._text(org, name), since) for a, (org, name, since) in self._held.items()]

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
        self.dirty = True
        return True

    def settle(
        self, address: ModuleAddress, repos: list[OrgRepo], first: Callable[[list[OrgRepo]], OrgRepo]
    ) -> OrgRepo | None:
        """Which of `repos` (every claim to `address`) serves it: its holder, else `first(repos)`.

        None when the holder's org has no listing yet: whether its repository is gone is not known.
        """
        held = self._held.get(address)
        if held is not None:
            org, name, _ = held
            for repo in repos:
                if repo.org == org and repo.full_name.lower() == name.lower():
                    return repo
            if self._orgs[org].records is None:
                return None
        winner = first(repos)
        if held is not None:
            log.warning(
                "org module %s: its owner %s is gone (the API no longer lists it there); %s holds it now",
                address,
                held[1][:200],
                winner.full_name[:200],
            )
        replaces = ""
        if held is not None:
            replaces = self._text(held[0], held[1])
            self._gone.add((address, replaces))
        since = self._clock()
        self._held[address] = (winner.org, winner.full_name, since)
        self.dirty = True
        self.on_held.emit(str(address), self._text(winner.org, winner.full_name), since, replaces)
        return winner

    def forget_gone(self, claimed: Iterable[ModuleAddress]) -> bool:
        """Drop the owners of addresses nobody claims any more (their org listed); True when any was."""
        claimed = set(claimed)
        gone = [a for a, (org, _, _) in self._held.items() if a not in claimed and self._orgs[org].records is not None]
        for address in gone:
            del self._held[address]
        self.dirty |= bool(gone)
        return bool(gone)

    def to_json(self) -> list[dict[str, Any]]:
        """orgs.json's `owners`: each address with its holder's org key, full name and when first held."""
        out = []
        for address, (org, name, since) in sorted(self._held.items()):
            provider, api_url, group = org_key(self._orgs[org])
            item = {"address": str(address), "provider": provider, "api_url": api_url, "group": group}
            out.append({**item, "full_name": name, "since": since})
        return out

    def load(self, items: Any) -> int:
        """Take orgs.json's `owners` (of orgs still configured; damaged entries skipped); how many.

        A file older than `since` counts as held from the start (time 0). Where an owner adopted from
        another replica is already held, the earlier of the two stays (ours published again if so).
        """
        if not isinstance(items, list):
            return 0
        orgs = {org_key(s): s.index for s in self._orgs}
        for item in items:
            if not isinstance(item, dict) or not all(
                isinstance(item.get(k), str) for k in ("address", "provider", "api_url", "group", "full_name")
            ):
                continue
            org = orgs.get((item["provider"], item["api_url"], item["group"].lower()))
            parts = item["address"].split("/")
            if org is None or len(parts) != 3 or not item["full_name"]:
                continue
            try:
                address = parse_address(*parts)
            except GitregError:
                continue
            since = item.get("since")
            since = float(since) if isinstance(since, int | float) and math.isfinite(since) else 0.0
            name = item["full_name"][:1024]
            held = self._held.get(address)
            if held is None or (since, self._text(org, name)) < (held[2], self._text(held[0], held[1])):
                self._held[address] = (org, name, since)
                if held is not None:
                    self.on_held.emit(str(address), self._text(org, name), since, "")
        return len(self._held)


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
