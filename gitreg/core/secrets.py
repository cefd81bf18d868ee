"""The one constant-time comparison of a presented secret with a configured one.

The metrics token, webhook secrets and signatures, signed archive URLs and page sessions:
each is checked here, digest to digest (SHA-256, 32 bytes each), so the time a comparison
takes says nothing about where the values differ, nor about the secret's length. Registry
tokens are looked up by the same digest (identity/static.py says why that is as safe).
Also here, because two layers read them: the one parser of `Authorization: Bearer <token>`
(the API and `/metrics`) and the digest of a configured token (which may be given hashed).
"""

from __future__ import annotations

import hashlib
import hmac

HASHED = "sha256:"  # a configured token given as its digest: `sha256:<64 lowercase hex>`


def _as_bytes(value: str | bytes) -> bytes:
    # aiohttp decodes header bytes with surrogateescape: this gets the original bytes back,
    # and a value that is not UTF-8 never raises.
    return value if isinstance(value, bytes) else value.encode("utf-8", "surrogateescape")


def digest(secret: str | bytes) -> bytes:
    """The SHA-256 digest a configured secret is kept as (and compared by)."""
    return hashlib.sha256(_as_bytes(secret)).digest()


def token_digest(token: str) -> bytes:
    """The digest of a configured registry token, which the config may give already hashed."""
    return bytes.fromhex(token.removeprefix(HASHED)) if token.startswith(HASHED) else digest(token)


def same_secret(presented: str | bytes | None, expected_digest: bytes) -> bool:
    """True when `presented` is the secret `expected_digest` stands for.

    `presented` is a header or query value; surrounding whitespace is ignored.
    """
    if not presented:
        return False
    return hmac.compare_digest(digest(presented.strip()), expected_digest)


def bearer_token(header: str | None) -> str | None:
    """The token of an `Authorization: Bearer <token>` header (any case of `Bearer`), or None."""
    scheme, _, presented = (header or "").partition(" ")
    presented = presented.strip()
    return presented if scheme.lower() == "bearer" and presented else None
