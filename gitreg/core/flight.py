"""Shared work and remembered answers: the two halves of a caching proxy's "ask upstream once".

- `InFlight`: in-flight de-duplication. Concurrent requests for one key share the one task
  running for it (nginx `proxy_cache_lock`); each waiter awaits it through `asyncio.shield`,
  so a waiter that is cancelled (a client hanging up) never cancels the work the others
  await. Dropping the work when its last waiter left is the owner's decision (`abandon`).
- `Remembered`: answers given again without asking for a while ("not found", a failed
  transfer, an archive too large to keep), bounded, oldest forgotten first.

Both are touched from the event loop only: no locks.
"""

from __future__ import annotations

import asyncio
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Hashable, Iterator
from typing import Generic, TypeVar

from gitreg.core.errors import GitregError

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")
E = TypeVar("E", bound=GitregError)


class InFlight(Generic[K, V]):
    """Key -> the one task working for it; later callers join it instead of starting another.

    `done(key, future)` runs once the work ends (cancelled or not), after the key was
    released, so it may start new work for the same key. An exception is retrieved there:
    every waiter may have gone away, and asyncio would log it as never retrieved.
    """

    def __init__(self, done: Callable[[K, asyncio.Future[V]], None] | None = None) -> None:
        self._running: dict[K, asyncio.Future[V]] = {}
        self._done = done

    def get(self, key: K) -> asyncio.Future[V] | None:
        """The work running for `key`, if any."""
        return self._running.get(key)

    def start(self, key: K, work: Awaitable[V]) -> asyncio.Future[V]:
        """Run `work` as the one task for `key` (nothing may run for it yet)."""
        future = asyncio.ensure_future(work)
        self._running[key] = future
        future.add_done_callback(lambda f: self._finished(key, f))
        return future

    def join(self, key: K, work: Callable[[], Awaitable[V]]) -> asyncio.Future[V]:
        """The work running for `key`, or `work()` started as it."""
        future = self._running.get(key)
        return future if future is not None else self.start(key, work())

    @staticmethod
    async def wait(future: asyncio.Future[V]) -> V:
        """Await shared work as one waiter: this waiter's cancellation does not cancel it."""
        return await asyncio.shield(future)

    def abandon(self, key: K, future: asyncio.Future[V]) -> None:
        """Cancel `future` (nobody needs its answer) and release `key` if it still runs for it."""
        self._release(key, future)
        future.cancel()

    def _release(self, key: K, future: asyncio.Future[V]) -> None:
        if self._running.get(key) is future:
            del self._running[key]

    def _finished(self, key: K, future: asyncio.Future[V]) -> None:
        self._release(key, future)  # a newer task for the key (after an abandon) stays
        if not future.cancelled():
            future.exception()
        if self._done is not None:
            self._done(key, future)

    def futures(self) -> list[asyncio.Future[V]]:
        """Every running task (to cancel them at shutdown)."""
        return list(self._running.values())

    def __contains__(self, key: object) -> bool:
        return key in self._running

    def __iter__(self) -> Iterator[K]:
        return iter(self._running)

    def __len__(self) -> int:
        return len(self._running)


class Remembered(Generic[K, E]):
    """Failures answered again for `seconds` without retrying; at most `limit` keys, oldest forgotten first.

    `seconds` <= 0 remembers nothing; `math.inf` remembers for good (an answer that cannot
    change, as long as the key is not forgotten for room). The clock is injectable (tests
    use a fake one).
    """

    def __init__(self, seconds: float, limit: int, clock: Callable[[], float] = time.monotonic) -> None:
        self.seconds = seconds
        self.limit = limit
        self._clock = clock
        self._table: OrderedDict[K, tuple[float, E]] = OrderedDict()  # key -> (until, error)

    def remember(self, key: K, error: E) -> None:
        """Give `error` again for `key` during the next `seconds`."""
        if self.seconds <= 0:
            return
        self._table[key] = (self._clock() + self.seconds, error)
        self._table.move_to_end(key)
        while len(self._table) > self.limit:
            self._table.popitem(last=False)

    def recall(self, key: K, now: float | None = None) -> E | None:
        """A new exception like the one remembered for `key` (re-raising one instance grows its
        traceback); None when there is none or it expired (then it is forgotten)."""
        remembered = self._table.get(key)
        if remembered is None:
            return None
        until, error = remembered
        if (self._clock() if now is None else now) < until:
            return type(error)(error.message)
        del self._table[key]
        return None

    def forget(self, key: K) -> bool:
        """Drop what is remembered for `key`; True when there was something."""
        return self._table.pop(key, None) is not None

    def __contains__(self, key: object) -> bool:
        return key in self._table

    def __len__(self) -> int:
        return len(self._table)
