"""Expiring HMAC signatures: signed archive URLs and the pages' session cookie, on one signer.

`ExpiringSigner` is HMAC-SHA256 over a payload and the Unix second it expires at, encoded
URL-safe base64 without padding; each use lays the two out in a message of its own and keeps
a key of its own. `UrlSigner`: Terraform never sends the registry token on the package fetch,
so an archive URL carries `expires` and `signature` over its path, keyed by
`[auth] signing_key` (the same on every replica, so any replica can check a URL another one
handed out).
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import time
from collections.abc import Mapping
from typing import Literal

from gitreg.core.errors import Forbidden
from gitreg.core.secrets import digest, same_secret


class SignatureError(Exception):
    """A signature that does not hold: `malformed`, `forged` (not ours for this payload) or `expired`."""

    def __init__(self, reason: Literal["malformed", "forged", "expired"]) -> None:
        super().__init__(reason)
        self.reason = reason


class ExpiringSigner:
    """Signs a payload until now + ttl, and checks such a signature in constant time."""

    def __init__(self, key: bytes, ttl_seconds: float, layout: str) -> None:
        """`layout` places `{payload}` and `{expires}` in the signed message (each use has its own)."""
        self._key = key
        self._ttl_seconds = ttl_seconds
        self._layout = layout

    def _mac(self, payload: str, expires: int) -> str:
        message = self._layout.format(payload=payload, expires=expires).encode("utf-8", "surrogateescape")
        return base64.urlsafe_b64encode(hmac.new(self._key, message, hashlib.sha256).digest()).rstrip(b"=").decode()

    def sign(self, payload: str, now: float | None = None) -> tuple[int, str]:
        """(expires, signature) for `payload`, valid until now + ttl."""
        expires = int((time.time() if now is None else now) + self._ttl_seconds)
        return expires, self._mac(payload, expires)

    def verify(self, payload: str, expires: str, signature: str, now: float | None = None) -> None:
        """SignatureError unless `signature` is ours for `payload` and `expires` has not passed."""
        if not expires.isascii() or not expires.isdigit() or len(expires) > 12 or not signature:
            raise SignatureError("malformed")
        # Checked before the expiry so a tampered value never learns whether its time was right.
        if not same_secret(signature, digest(self._mac(payload, int(expires)))):
            raise SignatureError("forged")
        if int(expires) < (time.time() if now is None else now):
            raise SignatureError("expired")


_URL_REFUSALS = {
    "malformed": "this archive URL is not signed correctly: ask the registry's download endpoint for a new one",
    "forged": "this archive URL's signature does not match: ask the registry's download endpoint for a new one",
    "expired": "this archive URL has expired: run `terraform init` again to get a fresh one",
}


class UrlSigner:
    """Signs and checks `path?expires=...&signature=...`."""

    def __init__(self, key: str, ttl_seconds: float) -> None:
        self._signer = ExpiringSigner(key.encode(), ttl_seconds, "{expires}\n{payload}")

    def sign(self, path: str, now: float | None = None) -> str:
        """The query string (without `?`) that authorizes GET/HEAD of `path` until now + ttl."""
        expires, signature = self._signer.sign(path, now)
        return f"expires={expires}&signature={signature}"

    def verify(self, path: str, query: Mapping[str, str], now: float | None = None) -> None:
        """Forbidden unless `query` carries a valid, unexpired signature for `path`."""
        try:
            self._signer.verify(path, query.get("expires", ""), query.get("signature", ""), now)
        except SignatureError as e:
            raise Forbidden(_URL_REFUSALS[e.reason]) from None
