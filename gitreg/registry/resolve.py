"""Which rule or org serves a module address: the one resolver, built once per application.

Every question "what serves this address" goes through here: a `terraform init`, the index
(what is listable), the catalog (what it lists), the browse API and the pages.
"""

from __future__ import annotations

from collections.abc import Iterator

from gitreg.config.model import Config
from gitreg.config.rules import ResolvedModule, RuleIndex
from gitreg.core.errors import ModuleNotFound
from gitreg.core.names import ModuleAddress
from gitreg.orgs.service import OrgCatalog


class Resolver:
    """The configured rules (indexed once) and the org listings, in the order a request applies them."""

    def __init__(self, config: Config, orgs: OrgCatalog) -> None:
        self.rules = RuleIndex(config.modules)
        self._orgs = orgs
        # Without [[orgs]] no org can serve anything: resolving asks the rules alone.
        self.orgs = orgs if config.orgs else None

    def resolve(self, address: ModuleAddress) -> ResolvedModule:
        """The rule or org serving `address`; ModuleNotFound when none does.

        An explicit [[modules]] rule wins; then an org module; a name an org namespace does not
        list is a 404 without any git call (no wildcard rule guesses a repository for it); then
        wildcard rules.
        """
        resolved = self.rules.explicit.get((address.namespace, address.name, address.system))
        if resolved is not None:
            return resolved
        if self.orgs is not None:
            resolved = self.orgs.resolve(address)
            if resolved is not None:
                return resolved
            if self.orgs.serves_namespace(address.namespace):
                raise self.orgs.not_found(address)
        resolved = self.rules.wildcard(address)
        if resolved is None:
            raise ModuleNotFound(f"module {address} is not served by this registry: no [[modules]] rule matches it")
        return resolved

    def must_wait(self, address: ModuleAddress) -> bool:
        """True while an org's first listing is under way and `address` may be one of its modules."""
        return (
            self.orgs is not None
            and not self.orgs.complete()
            and (address.namespace, address.name, address.system) not in self.rules.explicit
            and self.orgs.get(address) is None  # listed already, from a first page
        )

    async def resolve_listed(self, address: ModuleAddress) -> ResolvedModule:
        """resolve(), after an org's first listing when the address may be one of its modules."""
        if self.orgs is not None and self.must_wait(address):
            await self.orgs.wait_listed(address.namespace)  # only until the org's first listing
        return self.resolve(address)

    def explicit(self) -> Iterator[ModuleAddress]:
        """The address of every explicit [[modules]] rule (in config order; the earlier of two wins)."""
        for namespace, name, system in self.rules.explicit:
            yield ModuleAddress(namespace or "", name or "", system or "")

    def org_modules(self) -> Iterator[ModuleAddress]:
        """Every module the org listings hold."""
        yield from self._orgs.modules()
