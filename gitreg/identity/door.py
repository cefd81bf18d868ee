"""The identity door: the one object the web layer asks who is calling and what they may read.

Built once per process by the composition root (gitreg/services), its HTTP session toward the
hosts shared with the login flows. The web layer imports this module and no other of
`gitreg.identity` (an import-linter contract in pyproject.toml), and asks `Identities`:

- who is calling: `known_caller` (no coroutine: the warm path of a configured static token) and
  `caller` (every kind, in the one order below), for a bearer header; `session_caller` for a page
  session's cookie, `session_for` at the page login form;
- may this caller read this target: `read_now` (the namespace rule, no coroutine), `check_read`
  (a module), `visibility_now`/`visibility` (a listing).

A presented token is tried, in this order: the static `[auth] tokens` (constant time, whatever
follows), the registry tokens `terraform login` issued (when an `[[auth.forges]]` entry has an
OAuth application), a CI job's OIDC JWT (when it claims a configured issuer), then a Git host's
own token (each `[[auth.forges]]` host whose kind of token it may be, until one says whose it
is). None of them: 401. A host that cannot answer: 503, never 401.

Everything identity waits on for one request (a renewal, `/user`, can-read, a listing, an
issuer's keys) shares one deadline, identity/deadline.py: a request's task waits for all of it
at most REQUEST_SECONDS, then a 503 naming the service; the calls go on for the retry.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import aiohttp

from gitreg.config.model import Config, ForgeAuthConfig
from gitreg.core.errors import Forbidden, IdentityUnavailable, ModuleNotFound, Unauthorized
from gitreg.core.names import ModuleAddress
from gitreg.core.secrets import bearer_token, digest
from gitreg.forges.base import OrgStats
from gitreg.forges.host_oauth import HostGrant
from gitreg.identity.forge import ForgeAccess
from gitreg.identity.issued import TOKEN_PREFIX
from gitreg.identity.model import LoginTokens, Principal
from gitreg.identity.oauth import LOGIN_V1, LoginFlows, LoginRefused, check_terraform_request
from gitreg.identity.oidc import OidcIssuers
from gitreg.identity.static import TokenChecker, token_id
from gitreg.identity.visibility import Visibility, repository_path
from gitreg.registry.resolve import Resolver
from gitreg.replicas.base import SharedState

# What the web layer needs of identity's vocabulary, through this one module.
__all__ = [
    "LOGIN_V1",
    "NO_TOKEN",
    "Identities",
    "LoginFlows",
    "LoginRefused",
    "Principal",
    "Visibility",
    "check_terraform_request",
]

NO_TOKEN = "this registry needs a token: set TF_TOKEN_<host> or a credentials block in the CLI config"
NOT_BEARER = "the Authorization header must be 'Bearer <token>'"
# The credential kinds whose reading is decided by their namespaces alone (None: every namespace):
# the static `[auth] tokens` and CI jobs' OIDC tokens. The Git host's kinds ask the host.
BY_NAMESPACE = frozenset({"static", "oidc"})


class Identities:
    """Who is calling and what they may read, for every credential kind (see the module docstring)."""

    def __init__(
        self,
        config: Config,
        resolver: Resolver,
        shared: SharedState,
        session: Callable[[], aiohttp.ClientSession],
        logins: LoginFlows | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.enabled = config.auth.enabled
        self.static = TokenChecker(config.auth)
        # `known_caller(header)`: the caller an `Authorization` header names when no one need be asked
        # (a configured static token: constant time, remembered by header, identity/static.py), else
        # None. No coroutine: the warm path, and the static checker's own method (no call in between).
        self.known_caller: Callable[[str], Principal | None] = self.static.by_header
        # `terraform login` and "Sign in with ...": the OAuth flows (None: no host has an OAuth application).
        self.logins = logins
        # The registry tokens those flows issued (a test may give a `LoginTokens` of its own).
        self.login: LoginTokens | None = logins.tokens if logins is not None else None
        self.oidc = OidcIssuers(config.auth.oidc, session, clock, forges=config.auth.forges)
        key = config.auth.signing_key
        self.forges = tuple(ForgeAccess(f, config.orgs, session, shared, clock, key) for f in config.auth.forges)
        self._by_url = {f.forge.url: f for f in self.forges}
        if logins is not None:  # one back-off per host, whatever asks it (its questions, the OAuth calls)
            logins.backoffs = logins.tokens.backoffs = {f.forge.url: f.backoff for f in self.forges}
        self._resolver = resolver
        for forge in self.forges:  # one membership listing when [[modules]] rules serve repositories there
            hosts = (repository_path(rule.repository) for rule in config.modules)
            forge.rules_here = any(found is not None and found[0] in forge.hosts for found in hosts)

    def close(self) -> None:
        """Stop what runs on its own (an issuer's scheduled key fetch)."""
        self.oidc.close()

    def api_stats(self) -> list[tuple[str, OrgStats]]:
        """(host label, counters) of the API calls made for identities, for /metrics."""
        found = [(forge.forge.label, forge.stats) for forge in self.forges]
        return [*found, ("oidc", self.oidc.stats)] if self.oidc.configured else found

    # ---- who is calling ---------------------------------------------------------------------

    async def caller(self, header: str | None) -> Principal:
        """Who an `Authorization` header's bearer token stands for, trying the kinds in the module
        docstring's order; Unauthorized when none, IdentityUnavailable when the host that would say
        cannot answer."""
        if header:
            known = self.known_caller(header)
            if known is not None:
                return known
        presented = bearer_token(header or "")
        if header and presented is None:
            raise Unauthorized(NOT_BEARER)
        if not presented:
            raise Unauthorized(NO_TOKEN)
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

    # ---- a page session ---------------------------------------------------------------------

    def session_for(self, presented: str) -> str | None:
        """The page login form: the session id (not a secret) of the static token `presented` is, else None."""
        found = self.static.find(presented) if presented else None
        return token_id(found) if found is not None else None

    async def session_caller(self, session_id: str) -> Principal | None:
        """Who a page session (its signed cookie's id) stands for; None: expired, revoked, removed from
        the config since, or the host refused its refresh."""
        if session_id.startswith(TOKEN_PREFIX):  # signed in through a Git host: its issued session's id
            return await self.logins.tokens.session_principal(session_id) if self.logins is not None else None
        return self.static.by_id(session_id)  # a static token, named by its (non-secret) id

    async def session_signed_in(
        self, forge: ForgeAuthConfig, username: str, grant: HostGrant, seconds: float, callback: str
    ) -> str:
        """The end of "Sign in with ...": a session issued, valid `seconds`; its id (never a token that
        opens the API: the cookie names it)."""
        if self.logins is None:
            raise LoginRefused("invalid_request", "no Git host signs people in here")
        return await self.logins.tokens.issue(forge, username, grant, "session", seconds, callback)

    async def session_ended(self, session_id: str) -> None:
        """Signing out: a session through a Git host ends its issued token too."""
        if session_id.startswith(TOKEN_PREFIX) and self.logins is not None:
            await self.logins.tokens.end_session(session_id)

    # ---- what the caller may read -----------------------------------------------------------

    def read_now(self, principal: Principal, namespace: str) -> bool:
        """True when `principal`'s reading is decided by namespace (static, OIDC: their `namespaces`,
        None for every one), once `namespace` is checked: Forbidden when it may not read it. False
        when the Git host decides (`check_read`). No coroutine: the warm path."""
        if principal.kind not in BY_NAMESPACE:
            return False
        if principal.namespaces is not None and namespace not in principal.namespaces:
            raise Forbidden(f"this token may not read namespace {namespace[:64]!r}")
        return True

    async def check_read(self, principal: Principal, address: ModuleAddress) -> None:
        """Forbidden unless `principal` may read module `address` (a Git host identity: its repository).

        A module no rule or org serves is left to the handler (its 404).
        """
        if self.read_now(principal, address.namespace):
            return
        forge = self._forge(principal)
        try:
            resolved = await self._resolver.resolve_listed(address)
        except ModuleNotFound:
            return
        await forge.check_read(principal, resolved.repository, f"module {address}")

    async def check_read_repository(self, principal: Principal, namespace: str, repository: str, what: str) -> None:
        """Forbidden unless `principal` may read `what` (a provider), served from `repository` in `namespace`:
        by namespace (static, OIDC), else as the Git host says of the repository."""
        if not self.read_now(principal, namespace):
            await self._forge(principal).check_read(principal, repository, what)

    def visibility_now(self, principal: Principal | None) -> Visibility | None:
        """What `principal` sees in lists, search and pages when no one need be asked (None: an open
        registry, everything; static and OIDC: their namespaces), else None (ask `visibility`)."""
        if principal is None:
            return Visibility()
        if principal.kind in BY_NAMESPACE:
            return Visibility(namespaces=principal.namespaces)
        return None

    async def visibility(self, principal: Principal | None) -> Visibility:
        """What `principal` sees in lists, search and pages (a Git host identity: what its host lists)."""
        found = self.visibility_now(principal)
        if found is None and principal is not None:  # (None: visibility_now answered an open registry)
            found = await self._forge(principal).visibility(principal)
        return found if found is not None else Visibility()

    def _forge(self, principal: Principal) -> ForgeAccess:
        forge = self._by_url.get(principal.forge.url) if principal.forge is not None else None
        if forge is None:  # a login token of a forge no longer configured
            raise Unauthorized(f"{principal.name}'s Git host is not configured here any more")
        return forge
