"""The static `[auth] tokens`: automation and break-glass, compared in constant time, named by digest."""

from __future__ import annotations

import functools

from gitreg.config.model import AuthConfig, TokenConfig
from gitreg.core.secrets import first_match, token_digest
from gitreg.identity.model import Principal


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
        found = first_match(presented, self._digests)  # hashed once, compared with every digest
        return None if found is None else self._tokens[found]

    def by_id(self, found: str) -> TokenConfig | None:
        """The configured token whose `token_id` is `found` (not a secret: a page session names it)."""
        return next((token for token in self._tokens if token_id(token) == found), None)


def token_id(token: TokenConfig) -> str:
    """A stable, non-secret name of a configured token: the start of its SHA-256 (hex)."""
    return token_digest(token.token).hex()[:32]


# A configured token's principal is the same on every request (warm path: no digest, no frozenset
# made again); bounded, though the configured tokens are few.
@functools.lru_cache(maxsize=1024)
def static_principal(token: TokenConfig) -> Principal:
    """The `static` principal of a configured token, named `token:<its id's first 12 hex digits>`."""
    scope = frozenset(token.namespaces) if token.namespaces is not None else None
    return Principal("static", f"token:{token_id(token)[:12]}", namespaces=scope)
