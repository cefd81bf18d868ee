"""The one constant-time comparison of a presented secret with a configured one.

Registry tokens, the metrics token, webhook secrets and signatures, signed archive URLs:
each is checked here, digest to digest (SHA-256, 32 bytes each), so the time a comparison
takes says nothing about where the values differ, nor about the secret's length.
"""

from __future__ import annotations

import hashlib
import hmac


def _as_bytes(value: str | bytes) -> bytes:
    # aiohttp decodes header bytes with surrogateescape: this gets the original bytes back,
    # and a value that is not UTF-8 never raises.
    return value if isinstance(value, bytes) else value.encode("utf-8", "surrogateescape")


def digest(secret: str | bytes) -> bytes:
    """The SHA-256 digest a configured secret is kept as (and compared by)."""
    return hashlib.sha256(_as_bytes(secret)).digest()


def same_secret(presented: str | bytes | None, expected_digest: bytes) -> bool:
    """True when `presented` is the secret `expected_digest` stands for.

    `presented` is a header or query value; surrounding whitespace is ignored.
    """
    if not presented:
        return False
    return hmac.compare_digest(digest(presented.strip()), expected_digest)
