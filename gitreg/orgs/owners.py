"""Who owns each org module address: the repository that held it first keeps it.

An address (namespace/name/system) may be claimed by several repositories: two subgroups of
one GitLab group (`acme/team-b/terraform-aws-vpc` and `acme/aaa-newcomer/terraform-aws-vpc`),
two orgs sharing a namespace, a rename or a transfer. Whoever can create a repository
anywhere in the group could otherwise replace a module every team installs, so the first
repository to hold an address keeps it; a newcomer is a conflict (reported, never served).
The owner changes only when the API confirms its repository is gone: its org has a listing
(an enumeration, or a webhook's re-read of that repository) that no longer claims the address
with it (deleted, archived, renamed or transferred away, no longer matching). Owners are kept
in orgs.json (its `owners` list), so a restart does not reopen the race.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from gitreg.core.errors import GitregError
from gitreg.core.names import ModuleAddress, parse_address
from gitreg.orgs.model import OrgRepo, OrgState

log = logging.getLogger(__name__)


def org_key(s: OrgState) -> tuple[str, str, str]:
    """How orgs.json names an org (as its listings do): provider, api_url, group (any case)."""
    return s.config.provider, s.config.api_url, s.config.group.lower()


class Owners:
    """address -> (org index, full name) of the repository that holds it (event loop only)."""

    def __init__(self, orgs: Sequence[OrgState]) -> None:
        self._orgs = orgs
        self._held: dict[ModuleAddress, tuple[int, str]] = {}
        self.dirty = False  # changed since orgs.json was last written

    def holder(self, address: ModuleAddress) -> tuple[int, str] | None:
        """The (org index, full name) holding `address`, or None."""
        return self._held.get(address)

    def settle(
        self, address: ModuleAddress, repos: list[OrgRepo], first: Callable[[list[OrgRepo]], OrgRepo]
    ) -> OrgRepo | None:
        """Which of `repos` (every claim to `address`) serves it: its holder, else `first(repos)`.

        None when the holder's org has no listing yet: whether its repository is gone is not known.
        """
        held = self._held.get(address)
        if held is not None:
            org, name = held
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
        self._held[address] = (winner.org, winner.full_name)
        self.dirty = True
        return winner

    def forget_gone(self, claimed: Iterable[ModuleAddress]) -> bool:
        """Drop the owners of addresses nobody claims any more (their org listed); True when any was."""
        claimed = set(claimed)
        gone = [a for a, (org, _) in self._held.items() if a not in claimed and self._orgs[org].records is not None]
        for address in gone:
            del self._held[address]
        self.dirty |= bool(gone)
        return bool(gone)

    def to_json(self) -> list[dict[str, Any]]:
        """orgs.json's `owners`: each address with its holder's org key and full name."""
        out = []
        for address, (org, name) in sorted(self._held.items()):
            provider, api_url, group = org_key(self._orgs[org])
            out.append(
                {"address": str(address), "provider": provider, "api_url": api_url, "group": group, "full_name": name}
            )
        return out

    def load(self, items: Any) -> int:
        """Take orgs.json's `owners` (of orgs still configured; damaged entries skipped); how many."""
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
            self._held.setdefault(address, (org, item["full_name"][:1024]))
        return len(self._held)
