"""The one pool that runs every blocking git call: bounded, prioritized, fair between hosts.

Why not a bare ThreadPoolExecutor: its queue has no bound, it runs work nobody waits for any
more (a client that hung up still costs its `ls-remote`), it is first come first served (a
burst of browsing or background work delays `terraform init`), and one host that stalls
fills every worker until `[git] timeout_seconds` while other hosts' modules queue behind it.

Here a job waits in a queue until a slot is free under four limits, then runs in the
executor (exactly `[git] max_concurrency` threads, so the executor itself never queues):

- at most `max_concurrency` jobs run at once;
- at most `max_per_host` of them for one host (a stalling host holds only its share); a host
  is an origin, `host:port` (`core.urls.origin_label`): two Git services on one machine, on
  two ports, have a share each;
- BROWSE and BACKGROUND jobs together at most `max_concurrency - install_reserve` (install
  work always finds a slot that browsing cannot take), BACKGROUND jobs alone at most
  `background_slots` (half the pool);
- the highest priority first, first come first served within a priority.

At most `max_queue` jobs wait. When the queue is full, a new job pushes out the newest
waiting job of a lower priority (which fails with Overloaded), or fails itself with
Overloaded (HTTP 503 with Retry-After). A waiting job whose caller is cancelled (the client
hung up) is removed before it starts: it never reaches git. Work shared by several callers
(the tag cache coalesces requests for one repository into one fetch) is described by a
`Waiters` object: it runs at the best priority among its waiters and is dropped only when
all of them are gone before it started.

Everything here is touched from the event loop only, except `_thread_done`, which only
hands the result back to the loop.
"""

from __future__ import annotations

import asyncio
import bisect
import contextlib
import contextvars
import logging
from collections.abc import Callable, Coroutine, Iterator
from concurrent.futures import Future as ThreadFuture
from concurrent.futures import ThreadPoolExecutor
from contextvars import ContextVar
from enum import IntEnum
from typing import Any, TypeVar

from gitreg.core.errors import Overloaded, UpstreamUnavailable
from gitreg.core.urls import origin_host

log = logging.getLogger(__name__)
T = TypeVar("T")


class Priority(IntEnum):
    """Who waits for a piece of git work; lower values go first."""

    INSTALL = 0  # versions, download, archive: what `terraform init` waits for
    BROWSE = 1  # list, search, module details and pages: a person waits
    BACKGROUND = 2  # webhook and refresh-ahead refreshes, mirroring for details, the org index


# The priority of git work started in the current context. The request wrapper sets it per
# route, as the route declared (web/route_rules.py); outside a request (background tasks, start-up) it is BACKGROUND.
GIT_PRIORITY: ContextVar[Priority] = ContextVar("gitreg_git_priority", default=Priority.BACKGROUND)


# The priority of the pool job running in this (worker) thread, None outside the pool's jobs:
# git started for BACKGROUND work runs at a lower CPU priority (see runner.GitRun).
RUNNING_AS: ContextVar[Priority | None] = ContextVar("gitreg_git_running_as", default=None)


def _run_as(priority: Priority, fn: Callable[..., T], *args: Any) -> T:
    """In a worker thread: `fn(*args)` as a job of `priority` (RUNNING_AS)."""
    token = RUNNING_AS.set(priority)
    try:
        return fn(*args)
    finally:
        RUNNING_AS.reset(token)


@contextlib.contextmanager
def git_priority(priority: Priority) -> Iterator[None]:
    """Run the block's git work (in this task and tasks it creates) at `priority`."""
    token = GIT_PRIORITY.set(priority)
    try:
        yield
    finally:
        GIT_PRIORITY.reset(token)


def background_task(coro: Coroutine[Any, Any, T], name: str | None = None) -> asyncio.Task[T]:
    """Start `coro` as a task whose git work is BACKGROUND, whatever the caller's priority.

    A task copies its creator's context: a refresh started by a request would otherwise
    run at the request's priority.
    """
    context = contextvars.copy_context()
    context.run(GIT_PRIORITY.set, Priority.BACKGROUND)
    return asyncio.get_running_loop().create_task(coro, name=name, context=context)


class Waiters:
    """The callers waiting for one piece of shared git work (a coalesced fetch).

    The work runs at the best priority among them; `leave()` says when the last one left
    before the work started, so its owner can drop it.
    """

    def __init__(self) -> None:
        self._counts = [0] * len(Priority)
        self.started = False  # set by the pool when the work reaches a thread
        self._job: _Job | None = None

    def join(self, priority: Priority | None = None) -> Priority:
        """Add a waiter (at the current context's priority by default); the priority it joined at."""
        joined = GIT_PRIORITY.get() if priority is None else priority
        self._counts[joined] += 1
        self._changed()
        return joined

    def leave(self, priority: Priority) -> bool:
        """Remove a waiter; True when nobody waits any more and the work has not started."""
        self._counts[priority] -= 1
        self._changed()
        return not self.started and not any(self._counts)

    @property
    def priority(self) -> Priority:
        """The best priority among the waiters (BACKGROUND when there are none)."""
        for p in Priority:
            if self._counts[p]:
                return p
        return Priority.BACKGROUND

    def _changed(self) -> None:
        if not any(self._counts):
            return  # the last waiter left: the owner drops the work (or it already runs)
        job = self._job
        if job is not None and job.pool is not None and job.state == _QUEUED and job.priority != self.priority:
            job.pool._requeue(job, self.priority)


_QUEUED, _RUNNING, _DONE = "queued", "running", "done"


class _Job:
    __slots__ = ("args", "fn", "future", "host", "pool", "priority", "ran_as", "seq", "state", "waiters")

    def __init__(
        self,
        fn: Callable[..., Any],
        args: tuple[Any, ...],
        host: str,
        seq: int,
        priority: Priority,
        future: asyncio.Future[Any],
        waiters: Waiters | None,
        pool: GitPool,
    ) -> None:
        self.fn = fn
        self.args = args
        self.host = host
        self.seq = seq  # arrival order: first come first served within a priority
        self.priority = priority
        self.future = future
        self.waiters = waiters
        self.state = _QUEUED
        self.pool: GitPool | None = pool
        self.ran_as = priority  # the priority whose slot it holds while running


def _seq(job: _Job) -> int:
    return job.seq


class GitPool:
    """Runs blocking git calls in threads, bounded, highest priority first, fair between hosts."""

    def __init__(
        self, max_concurrency: int, max_queue: int, max_per_host: int, thread_name_prefix: str = "gitreg-git"
    ) -> None:
        self.max_concurrency = max_concurrency
        self.max_queue = max_queue
        self.max_per_host = max_per_host
        # Slots a priority and everything below it may hold: install work always finds one
        # that browsing cannot take, and background work never holds more than half the pool.
        install_reserve = max(1, max_concurrency // 4) if max_concurrency > 1 else 0
        self.limits = {
            Priority.INSTALL: max_concurrency,
            Priority.BROWSE: max(1, max_concurrency - install_reserve),
            Priority.BACKGROUND: max(1, max_concurrency // 2),
        }
        self._executor = ThreadPoolExecutor(max_workers=max_concurrency, thread_name_prefix=thread_name_prefix)
        self._loop: asyncio.AbstractEventLoop | None = None
        # priority -> host -> waiting jobs in arrival order
        self._queues: list[dict[str, list[_Job]]] = [{} for _ in Priority]
        self._queued = 0
        self._running = [0] * len(Priority)  # by the priority whose slot a job holds
        self._running_hosts: dict[str, int] = {}
        self._seq = 0
        self._closed = False
        self.started = [0] * len(Priority)  # jobs that reached a thread
        self.rejected = [0] * len(Priority)  # refused with Overloaded (queue full)
        self.abandoned = [0] * len(Priority)  # dropped before they started: nobody waited any more

    # -- the API ----------------------------------------------------------------------------

    async def run(
        self,
        fn: Callable[..., T],
        *args: Any,
        host: str,
        priority: Priority | None = None,
        waiters: Waiters | None = None,
    ) -> T:
        """Run `fn(*args)` in a thread once a slot for `host` (an `origin_label`) is free; its result.

        `priority` defaults to the current context's (GIT_PRIORITY); with `waiters` the job
        runs at their best priority instead, raised or lowered as they come and go.
        Overloaded when the queue is full; cancelled while waiting, the job never runs.
        """
        if self._closed:
            raise UpstreamUnavailable("gitreg is shutting down; try again")
        loop = self._loop = asyncio.get_running_loop()
        if waiters is not None:
            chosen = waiters.priority
        elif priority is not None:
            chosen = priority
        else:
            chosen = GIT_PRIORITY.get()
        self._seq += 1
        future: asyncio.Future[T] = loop.create_future()  # typed here: the queue holds jobs of every T
        job = _Job(fn, args, host, self._seq, chosen, future, waiters, self)
        if waiters is not None:
            waiters._job = job
        if self._can_start(chosen, host):
            self._start(job)  # nothing queued could have started instead: see _dispatch
        else:
            self._enqueue(job)
        try:
            return await future
        except asyncio.CancelledError:
            if job.state == _QUEUED:
                self._remove(job)
                self.abandoned[job.priority] += 1
            raise
        finally:
            job.pool = None
            if waiters is not None:
                waiters._job = None

    def close(self) -> int:
        """Refuse new work and fail every waiting job (shutdown); how many were waiting."""
        self._closed = True
        dropped = 0
        for queues in self._queues:
            for jobs in queues.values():
                for job in jobs:
                    job.state = _DONE
                    if not job.future.done():
                        job.future.set_exception(UpstreamUnavailable("gitreg is shutting down; try again"))
                    dropped += 1
            queues.clear()
        self._queued = 0
        return dropped

    def shutdown(self) -> None:
        """Stop the threads (after close(); git still running must be killed by the runner: GitRunner.kill_running)."""
        self._executor.shutdown(wait=False, cancel_futures=True)

    # -- what /metrics shows ----------------------------------------------------------------

    def queue_depth(self) -> dict[Priority, int]:
        """Jobs waiting for a slot, by priority."""
        return {p: sum(len(jobs) for jobs in self._queues[p].values()) for p in Priority}

    def running(self) -> dict[Priority, int]:
        """Jobs running now, by the priority whose slot they hold."""
        return {p: self._running[p] for p in Priority}

    def running_per_host(self) -> dict[str, int]:
        """Jobs running now, by host (the origins' hosts, as metric labels name them)."""
        hosts: dict[str, int] = {}
        for origin, count in self._running_hosts.items():
            host = origin_host(origin)
            hosts[host] = hosts.get(host, 0) + count
        return hosts

    # -- scheduling -------------------------------------------------------------------------

    def _can_start(self, priority: Priority, host: str) -> bool:
        return self._running_hosts.get(host, 0) < self.max_per_host and self._can_start_class(priority)

    def _enqueue(self, job: _Job) -> None:
        if self._queued >= self.max_queue:
            victim = self._newest_below(job.priority)
            message = (
                f"gitreg has {self._queued} git calls waiting ([git] max_queue = {self.max_queue}); "
                "try again in a few seconds"
            )
            if victim is None:
                self.rejected[job.priority] += 1
                raise Overloaded(message)
            # Lower-priority work makes room: terraform init is not refused for a background refresh.
            self._remove(victim)
            self.rejected[victim.priority] += 1
            victim.state = _DONE
            victim.future.set_exception(Overloaded(message))
        bucket = self._queues[job.priority].setdefault(job.host, [])
        bisect.insort(bucket, job, key=_seq)
        self._queued += 1
        job.state = _QUEUED

    def _newest_below(self, priority: Priority) -> _Job | None:
        for p in reversed(Priority):
            if p <= priority:
                return None
            buckets = [jobs for jobs in self._queues[p].values() if jobs]
            if buckets:
                return max((jobs[-1] for jobs in buckets), key=_seq)
        return None

    def _remove(self, job: _Job) -> None:
        bucket = self._queues[job.priority].get(job.host)
        if bucket is not None and job in bucket:
            bucket.remove(job)
            self._queued -= 1
            if not bucket:
                del self._queues[job.priority][job.host]
        job.state = _DONE

    def _requeue(self, job: _Job, priority: Priority) -> None:
        """Move a waiting job to another priority, keeping its place in arrival order."""
        self._remove(job)
        job.priority = priority
        bisect.insort(self._queues[priority].setdefault(job.host, []), job, key=_seq)
        self._queued += 1
        job.state = _QUEUED
        self._dispatch()

    def _next(self) -> _Job | None:
        """The first startable job: highest priority, then oldest among hosts with a free slot."""
        for p in Priority:
            if not self._queues[p] or not self._can_start_class(p):
                continue
            best: _Job | None = None
            for host, jobs in list(self._queues[p].items()):
                # A job whose awaiting task was cancelled has a cancelled future: it never starts.
                while jobs and jobs[0].future.done():
                    gone = jobs.pop(0)
                    self._queued -= 1
                    gone.state = _DONE
                    self.abandoned[p] += 1
                if not jobs:
                    del self._queues[p][host]
                    continue
                if self._running_hosts.get(host, 0) >= self.max_per_host:
                    continue
                if best is None or jobs[0].seq < best.seq:
                    best = jobs[0]
            if best is not None:
                self._remove(best)
                return best
        return None

    def _can_start_class(self, priority: Priority) -> bool:
        return all(sum(self._running[p:]) < self.limits[Priority(p)] for p in range(priority + 1))

    def _dispatch(self) -> None:
        while not self._closed:
            job = self._next()
            if job is None:
                return
            self._start(job)

    def _start(self, job: _Job) -> None:
        job.state = _RUNNING
        job.ran_as = job.priority
        if job.waiters is not None:
            job.waiters.started = True
        self._running[job.priority] += 1
        self._running_hosts[job.host] = self._running_hosts.get(job.host, 0) + 1
        self.started[job.priority] += 1
        try:
            thread_future = self._executor.submit(_run_as, job.ran_as, job.fn, *job.args)
        except RuntimeError:  # the executor was shut down
            self._release(job)
            job.future.set_exception(UpstreamUnavailable("gitreg is shutting down; try again"))
            return
        thread_future.add_done_callback(lambda f: self._thread_done(job, f))

    def _thread_done(self, job: _Job, result: ThreadFuture[Any]) -> None:
        """In the worker thread: hand the outcome back to the event loop."""
        assert self._loop is not None
        with contextlib.suppress(RuntimeError):  # the loop is closed (shutdown): nobody is left to tell
            self._loop.call_soon_threadsafe(self._finished, job, result)

    def _finished(self, job: _Job, result: ThreadFuture[Any]) -> None:
        self._release(job)
        if not job.future.done():  # done: its caller was cancelled and the answer is dropped
            if result.cancelled():
                job.future.set_exception(UpstreamUnavailable("gitreg is shutting down; try again"))
            elif (error := result.exception()) is not None:
                job.future.set_exception(error)
            else:
                job.future.set_result(result.result())
        self._dispatch()

    def _release(self, job: _Job) -> None:
        job.state = _DONE
        self._running[job.ran_as] -= 1
        left = self._running_hosts[job.host] - 1
        if left:
            self._running_hosts[job.host] = left
        else:
            del self._running_hosts[job.host]
