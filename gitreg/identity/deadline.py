"""One deadline per request for everything identity waits on: Terraform gives a request 10 s.

A request may need several outside answers in a row: a `terraform login` token's host grant
refreshed, then whether the host lets it read the module's repository; an issuer's keys; a
person's listing for a page. Each call has its own cap (8 s; a listing 60 s), but the request
waits for all of them together at most REQUEST_SECONDS, counted from the first time identity
waits on its behalf: past it, a 503 naming the service, with Retry-After.

The work itself is never cut by a request's deadline: it runs as shared work (one call for every
request that wants the answer, identity/answers.py, core/flight.py) under its own cap, and its
answer is kept for the next request. So a host is backed off only for its own failure, never
because a request ran out of time, and a slow listing finishes for the retry.

The deadline belongs to the request's task (aiohttp runs each request in a task of its own); a
task started from it (shared work) or a later request never inherits it.
"""

from __future__ import annotations

import asyncio
import contextvars
import math
import time
from collections.abc import Awaitable, Callable
from typing import TypeVar

from gitreg.core.errors import GitregError, IdentityUnavailable

T = TypeVar("T")

# All the identity waiting of one request: inside Terraform's 10 s, with room for the rest of it. A
# little over one call's own cap (8 s), so a single call that fails is reported as its own failure.
REQUEST_SECONDS = 8.5

_DEADLINE: contextvars.ContextVar[tuple[asyncio.Task[object] | None, float] | None] = contextvars.ContextVar(
    "gitreg_identity_deadline", default=None
)


def left() -> float:
    """Seconds left of this request's identity budget (started now, at REQUEST_SECONDS, if it was not)."""
    task = asyncio.current_task()
    found = _DEADLINE.get()
    now = time.monotonic()
    if found is None or found[0] is not task:
        _DEADLINE.set((task, now + REQUEST_SECONDS))
        return REQUEST_SECONDS
    return found[1] - now


async def wait(work: Awaitable[T], late: Callable[[float], GitregError]) -> T:
    """`work`'s result (shared work: never cancelled by this wait), waited at most what is left of the
    request's budget; past it, `late(seconds waited)` is raised (a 503 naming the service)."""
    seconds = left()
    future = asyncio.ensure_future(work)
    if seconds <= 0 and not future.done():
        raise late(0.0)
    try:
        async with asyncio.timeout(max(seconds, 0.0)) as scope:
            return await asyncio.shield(future)
    except TimeoutError:
        if scope.expired():
            raise late(seconds) from None
        raise


def late(service: str, what: str, waited: float, cap: float) -> IdentityUnavailable:
    """The 503 of a request whose budget ran out after `waited` s while `service` ("the Git host
    gitlab.example.com") was asked `what`: the question goes on, under its own `cap`, for the retry."""
    retry = max(1, min(10, math.ceil(cap)))
    return IdentityUnavailable(
        f"{service} did not answer {what} within this request's {REQUEST_SECONDS:g} s (waited {waited:.1f} s; "
        f"gitreg is still asking it); try again in {retry} s",
        retry_after=retry,
    )
