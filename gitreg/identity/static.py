"""The static `[auth] tokens`: automation and break-glass, compared in constant time, named by digest."""

from __future__ import annotations

from gitreg.config.model import AuthConfig, TokenConfig
from gitreg.core.secrets import bearer_token, digest, token_digest
from gitreg.identity.model import Principal

# Authorization headers remembered (see TokenChecker.by_header): only headers that named a
# configured token get in, but one token can be written many ways (case, spaces). What it buys:
# the header's parse and the constant-time digest comparison on every request of a static token,
# 6.6 µs of CPU a request (bench/warm_parts.py's operator scenario, 60 paired rounds with and
# without it in one process, medians, on a loaded 2-core machine).
MAX_HEADERS = 1024


class TokenChecker:
    """Checks bearer tokens against every configured token, by SHA-256 digest (see `find`)."""

    def __init__(self, config: AuthConfig) -> None:
        self._tokens = config.tokens
        # Every token is kept as its SHA-256, and a presented token is looked up by its own
        # SHA-256: the time a lookup takes depends only on the presented token's digest, never
        # on where it and a configured token differ (see `caller`). The first of equal tokens wins.
        # Each token's principal is made once: the same on every request.
        self._callers: dict[bytes, tuple[TokenConfig, Principal]] = {}
        # A page session names its token by `token_id` (not a secret): looked up, not recomputed per page.
        self._by_id: dict[str, Principal] = {}
        self._by_header: dict[str, Principal] = {}
        for token in reversed(config.tokens):
            scope = frozenset(token.namespaces) if token.namespaces is not None else None
            principal = Principal("static", f"token:{token_id(token)[:12]}", namespaces=scope)
            self._callers[token_digest(token.token)] = (token, principal)
            self._by_id[token_id(token)] = principal

    @property
    def enabled(self) -> bool:
        """True when tokens are configured."""
        return bool(self._tokens)

    def find(self, presented: str | None) -> TokenConfig | None:
        """The configured token `presented` is, or None."""
        found = self._lookup(presented)
        return None if found is None else found[0]

    def caller(self, presented: str | None) -> Principal | None:
        """The principal of the configured token `presented` is, or None; made once."""
        found = self._lookup(presented)
        return None if found is None else found[1]

    def by_header(self, header: str) -> Principal | None:
        """The principal of an `Authorization` header value (`Bearer <token>`) naming a configured token, or None.

        The warm path: clients send the same header again and again, so a header that named a
        configured token is remembered as sent, and found again by one dict lookup, without
        hashing the token anew. A dict compares two keys' characters only after their keyed
        hashes (SipHash: the key is random per process, the hash of a remembered header depends on
        its token) matched in all 64 bits: a header that is not remembered is turned away on its
        own hash, whatever it holds, so timing says nothing about a remembered one either.
        """
        found = self._by_header.get(header)
        if found is None:
            found = self.caller(bearer_token(header))
            if found is not None and len(self._by_header) < MAX_HEADERS:
                self._by_header[header] = found
        return found

    def _lookup(self, presented: str | None) -> tuple[TokenConfig, Principal] | None:
        if not presented:
            return None
        # A dict keyed by digests, not a comparison with each: the key is the SHA-256 of what the
        # caller sent, so how far a probe gets (hash, then equality of 32-byte digests) tells
        # nothing about any configured token's bytes: to steer the digest toward a stored one an
        # attacker would need SHA-256 preimages. Not even the token's length shows.
        return self._callers.get(digest(presented.strip()))

    def by_id(self, found: str) -> Principal | None:
        """The principal of the configured token whose `token_id` is `found` (not a secret: a page session names it)."""
        return self._by_id.get(found)


def token_id(token: TokenConfig) -> str:
    """A stable, non-secret name of a configured token: the start of its SHA-256 (hex)."""
    return token_digest(token.token).hex()[:32]
