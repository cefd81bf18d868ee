"""The static `[auth] tokens`: automation and break-glass, compared in constant time, named by digest."""

from __future__ import annotations

import functools
from typing import NamedTuple

from gitreg.config.model import AuthConfig, TokenConfig
from gitreg.core.secrets import digest, token_digest
from gitreg.identity.model import Principal
from gitreg.identity.visibility import Visibility


class StaticCaller(NamedTuple):
    """A configured token's caller, made once: who it is and what it sees (the same on every request)."""

    principal: Principal
    visibility: Visibility


class TokenChecker:
    """Checks bearer tokens against every configured token, by SHA-256 digest (see `find`)."""

    def __init__(self, config: AuthConfig) -> None:
        self._tokens = config.tokens
        # Every token is kept as its SHA-256, and a presented token is looked up by its own
        # SHA-256: the time a lookup takes depends only on the presented token's digest, never
        # on where it and a configured token differ (see `caller`). The first of equal tokens wins.
        self._callers: dict[bytes, tuple[TokenConfig, StaticCaller]] = {}
        for token in reversed(config.tokens):
            principal = static_principal(token)
            caller = StaticCaller(principal, Visibility(namespaces=principal.namespaces))
            self._callers[token_digest(token.token)] = (token, caller)

    @property
    def enabled(self) -> bool:
        """True when tokens are configured."""
        return bool(self._tokens)

    def find(self, presented: str | None) -> TokenConfig | None:
        """The configured token `presented` is, or None."""
        found = self._lookup(presented)
        return None if found is None else found[0]

    def caller(self, presented: str | None) -> StaticCaller | None:
        """The caller (principal, visibility) of the configured token `presented` is, or None; made once."""
        found = self._lookup(presented)
        return None if found is None else found[1]

    def _lookup(self, presented: str | None) -> tuple[TokenConfig, StaticCaller] | None:
        if not presented:
            return None
        # A dict keyed by digests, not a comparison with each: the key is the SHA-256 of what the
        # caller sent, so how far a probe gets (hash, then equality of 32-byte digests) tells
        # nothing about any configured token's bytes: to steer the digest toward a stored one an
        # attacker would need SHA-256 preimages. Not even the token's length shows.
        return self._callers.get(digest(presented.strip()))

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
