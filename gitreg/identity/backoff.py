"""A Git host backed off as a whole: it said "slow down" (429, Retry-After), failed (5xx) or was silent.

One `HostBackoff` per `[[auth.forges]]` host, shared by everything that asks that host on a
person's behalf (identity/forge.py's questions, the OAuth code exchange and refresh): until it
passes, each of them is a 503 with `Retry-After`, and nothing is sent.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable

from gitreg.core.errors import IdentityUnavailable

# A host answering 5xx or nothing, with no Retry-After, is asked nothing for this long.
BACKOFF_SECONDS = 10.0
# The longest back-off a host's Retry-After (or rate-limit reset) is followed for.
MAX_BACKOFF_SECONDS = 300.0


class HostBackoff:
    """Until when `host` is asked nothing, and why (touched from the event loop only)."""

    def __init__(self, host: str, clock: Callable[[], float] = time.monotonic) -> None:
        self.host = host
        self._clock = clock
        self._until = 0.0
        self._reason = ""

    def check(self) -> None:
        """IdentityUnavailable (503, Retry-After the time left) while the host is backed off."""
        wait = self._until - self._clock()
        if wait > 0:
            retry = max(1, math.ceil(wait))
            raise IdentityUnavailable(
                f"the Git host {self.host} asked gitreg to wait ({self._reason}); try again in {retry} s",
                retry_after=retry,
            )

    def note(self, seconds: float | None, reason: str) -> int:
        """Ask the host nothing for `seconds` (None: BACKOFF_SECONDS; at most MAX_BACKOFF_SECONDS; a later,
        longer back-off wins); the whole seconds to tell the client to wait."""
        seconds = min(MAX_BACKOFF_SECONDS, BACKOFF_SECONDS if seconds is None else max(0.0, seconds))
        until = self._clock() + seconds
        if until > self._until:
            self._until, self._reason = until, reason
        return max(1, math.ceil(seconds))
