"""Signed, expiring archive URLs: Terraform never sends the registry token on the package fetch.

The signature is HMAC-SHA256 over the URL path and the expiry time, with `[auth] signing_key`
(the same on every replica, so any replica can check a URL another one handed out). The query
carries `expires` (Unix seconds) and `signature` (URL-safe base64, no padding).
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import time
from collections.abc import Mapping

from gitreg.core.errors import Forbidden
from gitreg.core.secrets import digest, same_secret


class UrlSigner:
    """Signs and checks `path?expires=...&signature=...`."""

    def __init__(self, key: str, ttl_seconds: float) -> None:
        self._key = key.encode()
        self.ttl_seconds = ttl_seconds

    def _mac(self, path: str, expires: int) -> str:
        digest = hmac.new(self._key, f"{expires}\n{path}".encode("utf-8", "surrogateescape"), hashlib.sha256).digest()
        return base64.urlsafe_b64encode(digest).rstrip(b"=").decode()

    def sign(self, path: str, now: float | None = None) -> str:
        """The query string (without `?`) that authorizes GET/HEAD of `path` until now + ttl."""
        expires = int((time.time() if now is None else now) + self.ttl_seconds)
        return f"expires={expires}&signature={self._mac(path, expires)}"

    def verify(self, path: str, query: Mapping[str, str], now: float | None = None) -> None:
        """Forbidden unless `query` carries a valid, unexpired signature for `path`."""
        expires_text = query.get("expires", "")
        signature = query.get("signature", "")
        if not expires_text.isascii() or not expires_text.isdigit() or len(expires_text) > 12 or not signature:
            raise Forbidden(
                "this archive URL is not signed correctly: ask the registry's download endpoint for a new one"
            )
        expires = int(expires_text)
        # Checked before the expiry so a tampered URL never learns whether its time was right.
        if not same_secret(signature, digest(self._mac(path, expires))):
            raise Forbidden(
                "this archive URL's signature does not match: ask the registry's download endpoint for a new one"
            )
        if expires < (time.time() if now is None else now):
            raise Forbidden("this archive URL has expired: run `terraform init` again to get a fresh one")
