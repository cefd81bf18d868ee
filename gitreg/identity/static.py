"""The static `[auth] tokens`: automation and break-glass, compared in constant time, named by digest."""

from __future__ import annotations

from gitreg.config.model import AuthConfig, TokenConfig
from gitreg.core.secrets import same_secret, token_digest
from gitreg.identity.model import Principal


class TokenChecker:
    """Checks bearer tokens in constant time against every configured token."""

    def __init__(self, config: AuthConfig) -> None:
        # Every token is kept as its SHA-256: a presented token is compared digest to digest,
        # 32 bytes each, so not even a token's length shows in the time a comparison takes.
        self._tokens = tuple((token_digest(t.token), t) for t in config.tokens)

    @property
    def enabled(self) -> bool:
        """True when tokens are configured."""
        return bool(self._tokens)

    def find(self, presented: str) -> TokenConfig | None:
        """The configured token `presented` is (compared with every one, in constant time), or None."""
        matched: TokenConfig | None = None
        for secret, token in self._tokens:
            if same_secret(presented, secret) and matched is None:
                matched = token
        return matched

    def by_id(self, found: str) -> TokenConfig | None:
        """The configured token whose `token_id` is `found` (not a secret: a page session names it)."""
        return next((token for _, token in self._tokens if token_id(token) == found), None)


def token_id(token: TokenConfig) -> str:
    """A stable, non-secret name of a configured token: the start of its SHA-256 (hex)."""
    return token_digest(token.token).hex()[:32]


def static_principal(token: TokenConfig) -> Principal:
    """The `static` principal of a configured token, named `token:<its id's first 12 hex digits>`."""
    scope = frozenset(token.namespaces) if token.namespaces is not None else None
    return Principal("static", f"token:{token_id(token)[:12]}", namespaces=scope)
