"""Registry authentication: `Authorization: Bearer <token>` on every `/v1/...` request."""

from __future__ import annotations

import hmac

from aiohttp import web

from .config import AuthConfig
from .errors import Unauthorized


class TokenChecker:
    """Checks bearer tokens in constant time against every configured token."""

    def __init__(self, config: AuthConfig) -> None:
        self._tokens = tuple(t.token.encode() for t in config.tokens)

    @property
    def enabled(self) -> bool:
        """True when tokens are configured."""
        return bool(self._tokens)

    def check(self, request: web.Request) -> None:
        """Raise Unauthorized unless the request carries a configured token."""
        header = request.headers.get("Authorization", "")
        scheme, _, presented = header.partition(" ")
        if not header:
            raise Unauthorized("this registry needs a token: set TF_TOKEN_<host> or a credentials block in the CLI config")
        if scheme.lower() != "bearer" or not presented.strip():
            raise Unauthorized("the Authorization header must be 'Bearer <token>'")
        candidate = presented.strip().encode("utf-8", "surrogateescape")
        # Compare with every token, always, so timing says nothing about which (if any) matched.
        matched = False
        for token in self._tokens:
            matched |= hmac.compare_digest(candidate, token)
        if not matched:
            raise Unauthorized("the registry token is not valid")
