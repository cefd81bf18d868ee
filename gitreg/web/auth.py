"""Registry authentication: `Authorization: Bearer <token>` on every `/v1/...` request.

Tokens may be scoped to namespaces and stored hashed (`sha256:<hex>`). The middleware in
middleware.py records the caller's scope on the request; handlers that list modules read it with
`allowed_namespaces(request)`.
"""

from __future__ import annotations

from aiohttp import web

from gitreg.config.model import AuthConfig, TokenConfig
from gitreg.core.errors import Forbidden, Unauthorized
from gitreg.core.secrets import bearer_token, first_match, token_digest
from gitreg.identity.model import Principal

# The caller's namespaces (None: all of them), recorded on the request by `authorize` (and by
# the pages' session guard).
SCOPE_KEY = web.RequestKey[frozenset[str] | None]("scope")
# Who the caller is (identity/model.py), recorded beside the scope; absent on an open registry.
PRINCIPAL_KEY = web.RequestKey[Principal]("principal")


class TokenChecker:
    """Checks bearer tokens in constant time against every configured token."""

    def __init__(self, config: AuthConfig) -> None:
        # Every token is kept as its SHA-256: a presented token is compared digest to digest,
        # 32 bytes each, so not even a token's length shows in the time a comparison takes.
        self._tokens = config.tokens
        self._digests = tuple(token_digest(t.token) for t in config.tokens)

    @property
    def enabled(self) -> bool:
        """True when tokens are configured."""
        return bool(self._tokens)

    def find(self, presented: str) -> TokenConfig | None:
        """The configured token `presented` is (compared with every one, in constant time), or None."""
        found = first_match(presented, self._digests)
        return None if found is None else self._tokens[found]

    def check(self, request: web.Request) -> TokenConfig:
        """The token the request carries; Unauthorized unless it is a configured one."""
        header = request.headers.get("Authorization", "")
        if not header:
            raise Unauthorized(
                "this registry needs a token: set TF_TOKEN_<host> or a credentials block in the CLI config"
            )
        presented = bearer_token(header)
        if presented is None:
            raise Unauthorized("the Authorization header must be 'Bearer <token>'")
        # Compared with every token, always, so timing says nothing about which (if any) matched.
        matched = self.find(presented)
        if matched is None:
            raise Unauthorized("the registry token is not valid")
        return matched

    def authorize(self, request: web.Request) -> None:
        """Check the token, record its scope, and refuse a namespace outside it (403)."""
        token = self.check(request)
        scope = frozenset(token.namespaces) if token.namespaces is not None else None
        request[SCOPE_KEY] = scope
        namespace = request.match_info.get("namespace")
        if scope is not None and namespace is not None and namespace not in scope:
            raise Forbidden(f"this token may not read namespace {namespace[:64]!r}")


def allowed_namespaces(request: web.Request) -> frozenset[str] | None:
    """The namespaces the caller may see; None means all of them."""
    return request.get(SCOPE_KEY)


def token_id(token: TokenConfig) -> str:
    """A stable, non-secret name of a configured token: the start of its SHA-256 (hex)."""
    return token_digest(token.token).hex()[:32]
