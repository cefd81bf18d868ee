"""Sealing: AES-GCM under a key derived from `[auth] signing_key`, one key per purpose.

What a sealed value protects: the Git host's OAuth tokens in issued_tokens.json and in Redis
(never on disk or in Redis in clear), and the login flow's state and one-time codes, which
travel through browsers and Terraform and must be neither read nor forged there. The
`cryptography` package does the cipher (no hand-written crypto); each purpose derives its own
key, and a sealed value names what it is for in its associated data, so a value sealed for
one use never opens as another.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
import os
import time
from typing import Any

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

_NONCE_BYTES = 12
# A sealed value longer than this is not one of ours (a flow's state is well under 2 KB).
MAX_SEALED = 8192


class Sealer:
    """Encrypts and authenticates values for one purpose (`purpose` picks the derived key)."""

    def __init__(self, signing_key: str, purpose: str) -> None:
        key = hashlib.sha256(f"gitreg-{purpose}\0".encode() + signing_key.encode()).digest()
        self._aead = AESGCM(key)

    def seal(self, plain: bytes, context: str) -> str:
        """`plain`, encrypted and authenticated for `context`: URL-safe base64 without padding."""
        nonce = os.urandom(_NONCE_BYTES)
        sealed = nonce + self._aead.encrypt(nonce, plain, context.encode())
        return base64.urlsafe_b64encode(sealed).rstrip(b"=").decode()

    def open(self, text: str, context: str) -> bytes | None:
        """The plain bytes of a value `seal` made for `context`; None for anything else (never raises)."""
        if not text or len(text) > MAX_SEALED or not text.isascii():
            return None
        try:
            raw = base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
        except (binascii.Error, ValueError):
            return None
        if len(raw) <= _NONCE_BYTES:
            return None
        try:
            return self._aead.decrypt(raw[:_NONCE_BYTES], raw[_NONCE_BYTES:], context.encode())
        except InvalidTag:
            return None

    def seal_json(self, value: dict[str, Any], context: str, ttl_seconds: float) -> str:
        """A JSON object sealed with its expiry (`exp`), for `context`."""
        document = {**value, "exp": time.time() + ttl_seconds}
        return self.seal(json.dumps(document, separators=(",", ":")).encode(), context)

    def open_json(self, text: str, context: str) -> dict[str, Any] | None:
        """The object of an unexpired `seal_json` value for `context`, else None."""
        plain = self.open(text, context)
        if plain is None:
            return None
        try:
            value = json.loads(plain)
        except ValueError:
            return None
        if not isinstance(value, dict) or not isinstance(value.get("exp"), float | int):
            return None
        return value if value["exp"] >= time.time() else None
