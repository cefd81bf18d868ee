"""The identities facade: who a bearer token is, whether it may read a module, what it may see.

Built once per application (web/app.py, in a cleanup context; its HTTP session toward the hosts
is the application's one, shared with the login flows); the web layer asks it and nothing else.
A presented token is tried, in this order: the static `[auth] tokens` (constant time, whatever
follows), the registry tokens `terraform login` issued (the `LoginTokens` given, when there is
one), a CI job's OIDC JWT (when it claims a configured issuer), then a Git host's own token
(each `[[auth.forges]]` host whose kind of token it may be, until one says whose it is). None
of them: 401. A host that cannot answer: 503, never 401.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import aiohttp

from gitreg.config.model import Config
from gitreg.core.errors import Forbidden, IdentityUnavailable, ModuleNotFound, Unauthorized
from gitreg.core.names import ModuleAddress
from gitreg.core.secrets import digest
from gitreg.forges.base import OrgStats
from gitreg.identity.forge import ForgeAccess
from gitreg.identity.model import LoginTokens, Principal
from gitreg.identity.oidc import OidcIssuers
from gitreg.identity.static import TokenChecker
from gitreg.identity.visibility import Visibility, repository_path
from gitreg.registry.resolve import Resolver
from gitreg.replicas.base import SharedState

NO_TOKEN = "this registry needs a token: set TF_TOKEN_<host> or a credentials block in the CLI config"


class Identities:
    """Authentication and read permission for every credential kind (see the module docstring)."""

    def __init__(
        self,
        config: Config,
        static: TokenChecker,
        resolver: Resolver,
        shared: SharedState,
        session: Callable[[], aiohttp.ClientSession],
        login: LoginTokens | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.enabled = config.auth.enabled
        self.static = static
        self.login = login
        self.oidc = OidcIssuers(config.auth.oidc, session, clock)
        self.forges = tuple(ForgeAccess(f, config.orgs, session, shared, clock) for f in config.auth.forges)
        self._by_url = {f.forge.url: f for f in self.forges}
        self._resolver = resolver
        for forge in self.forges:  # one membership listing when [[modules]] rules serve repositories there
            hosts = (repository_path(rule.repository) for rule in config.modules)
            forge.rules_here = any(found is not None and found[0] in forge.hosts for found in hosts)

    def api_stats(self) -> list[tuple[str, OrgStats]]:
        """(host label, counters) of the API calls made for identities, for /metrics."""
        found = [(forge.forge.label, forge.stats) for forge in self.forges]
        return [*found, ("oidc", self.oidc.stats)] if self.oidc.configured else found

    async def authenticate(self, presented: str | None) -> Principal:
        """The principal `presented` (a bearer token) stands for; Unauthorized when none, IdentityUnavailable
        when the host that would say cannot answer."""
        if not presented:
            raise Unauthorized(NO_TOKEN)
        # Looked up by digest first (identity/static.py: timing says nothing about the stored tokens).
        static = self.static.caller(presented)
        if static is not None:
            return static
        return await self.authenticate_dynamic(presented)

    async def authenticate_dynamic(self, presented: str) -> Principal:
        """`authenticate` for a token that is not a static one (the caller has looked that up already)."""
        if self.login is not None:
            found = await self.login.principal(presented)
            if found is not None:
                return found
        issuer = self.oidc.issuer_of(presented)
        if issuer is not None:
            return await self.oidc.principal(presented, issuer)
        return await self._forge_principal(presented)

    async def _forge_principal(self, presented: str) -> Principal:
        key = digest(presented)
        down: IdentityUnavailable | None = None
        for forge in self.forges:
            if not forge.accepts(presented):
                continue
            try:
                name = await forge.username(presented, key)
            except IdentityUnavailable as e:
                down = e
                continue
            if name is not None:
                return forge.principal(name, presented)
        if down is not None:
            raise down  # the host that may have said yes could not answer: never a 401
        raise Unauthorized("the registry token is not valid")

    def _forge(self, principal: Principal) -> ForgeAccess:
        forge = self._by_url.get(principal.forge.url) if principal.forge is not None else None
        if forge is None:  # a login token of a forge no longer configured
            raise Unauthorized(f"{principal.name}'s Git host is not configured here any more")
        return forge

    def check_namespace(self, principal: Principal, namespace: str) -> None:
        """Forbidden when a namespace-scoped principal (static, oidc) may not read `namespace`."""
        if principal.namespaces is not None and namespace not in principal.namespaces:
            raise Forbidden(f"this token may not read namespace {namespace[:64]!r}")

    async def check_read(self, principal: Principal, address: ModuleAddress) -> None:
        """Forbidden unless `principal` may read module `address` (a Git host identity: its repository).

        A module no rule or org serves is left to the handler (its 404).
        """
        self.check_namespace(principal, address.namespace)
        if principal.kind in ("static", "oidc"):
            return
        forge = self._forge(principal)
        try:
            resolved = await self._resolver.resolve_listed(address)
        except ModuleNotFound:
            return
        await forge.check_read(principal, resolved.repository, address)

    async def visibility(self, principal: Principal | None) -> Visibility:
        """What `principal` sees in lists, search and pages (None: an open registry, everything)."""
        if principal is None:
            return Visibility()
        if principal.kind in ("static", "oidc"):
            return Visibility(namespaces=principal.namespaces)
        return await self._forge(principal).visibility(principal)
