"""What a Git host or CI issuer said, trusted for a while: TTL, in-flight de-duplication, bounded.

One `Answers` per kind of question (who is this token, can it read this repository, what can
it see). A key is asked of the host at most once per its TTL, however many requests want it at
once (`core.flight.InFlight`); an answer past its TTL is never used, so a host that is down
turns into an error once what it said expires (the caller makes that a 503, never a 401). That
error is an answer too: kept `failed_seconds` and raised again meanwhile, so a token presented
again and again while the host fails costs one call per window, not one per request. Keys
hold token digests, never tokens. Touched from the event loop only.
"""

from __future__ import annotations

import copy
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Hashable
from typing import Generic, TypeVar

from gitreg.core.errors import GitregError
from gitreg.core.flight import InFlight
from gitreg.identity import deadline

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")


class Answers(Generic[K, V]):
    """Key -> (until, answer); at most `limit` keys, the least recently stored forgotten first.

    A GitregError `ask` raised (the host cannot answer) is kept `failed_seconds` (0: not kept).
    """

    def __init__(
        self, limit: int = 10_000, clock: Callable[[], float] = time.monotonic, failed_seconds: float = 0.0
    ) -> None:
        self.limit = limit
        self.failed_seconds = failed_seconds
        self._clock = clock
        self._table: OrderedDict[K, tuple[float, V | GitregError]] = OrderedDict()
        self._flight: InFlight[K, V] = InFlight()
        self.asked = 0  # questions that went to the host (or the shared store), for tests and metrics

    def fresh(self, key: K) -> tuple[bool, V | None]:
        """(True, answer) while `key`'s answer is trusted; (False, None) otherwise (an expired one is dropped).

        A kept failure is raised again (a fresh exception of the same message each time)."""
        found = self._table.get(key)
        if found is None:
            return False, None
        until, value = found
        if self._clock() < until:
            if isinstance(value, GitregError):
                raise _again(value)
            return True, value
        del self._table[key]
        return False, None

    async def get(
        self, key: K, seconds: float, ask: Callable[[], Awaitable[V]], late: Callable[[float], GitregError]
    ) -> V:
        """The trusted answer for `key`, or `ask()`'s (one call for every concurrent caller), kept `seconds`.

        Waited at most what is left of the request's budget: past it, `late(seconds waited)` is raised
        (a 503 naming the host) and the question goes on for the next request."""
        hit, value = self.fresh(key)
        if hit:
            return value  # type: ignore[return-value]  # (V may itself be None: `hit` says it is an answer)
        future = self._flight.join(key, lambda: self._ask(key, seconds, ask))
        return await deadline.wait(future, late)

    async def _ask(self, key: K, seconds: float, ask: Callable[[], Awaitable[V]]) -> V:
        self.asked += 1
        try:
            value = await ask()
        except GitregError as e:
            if self.failed_seconds > 0:  # (no longer than the host asked to wait, when it said)
                hint = getattr(e, "retry_after", None)
                window = min(seconds, self.failed_seconds, hint if isinstance(hint, int | float) else seconds)
                self._keep(key, window, e)
            raise
        self._keep(key, seconds, value)
        return value

    def _keep(self, key: K, seconds: float, value: V | GitregError) -> None:
        self._table[key] = (self._clock() + seconds, value)
        self._table.move_to_end(key)
        while len(self._table) > self.limit:
            self._table.popitem(last=False)

    def __len__(self) -> int:
        return len(self._table)


def _again(error: GitregError) -> GitregError:
    """A kept failure raised anew: same class, message and attributes, without the first one's traceback."""
    again = copy.copy(error)
    again.__traceback__ = None
    return again
