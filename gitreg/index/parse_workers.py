"""Worker processes that parse repository content (READMEs, `.tf` files) off the server's GIL.

A README or a `.tf` file is written by whoever can push a tag. The parsers are pure Python
(python-hcl2 on lark, markdown-it-py): a hostile 512 KB `.tf` file costs 10-30 s of CPU and
up to 650 MB of memory. In a thread of the server that work shares the GIL with the event
loop, and a C-level step that never yields (a regular expression) freezes every request. In
a child process it cannot: the event loop keeps answering, a wall-clock budget kills a parse
that runs too long, and an address-space limit caps what one file can cost.

Each worker is `python -I -c ...` with an empty environment (no secret of the server reaches
it), in a process group of its own (a Ctrl-C in the terminal is for the server, which then kills
it; the worker makes the group as its first step: uvloop's subprocesses take no `process_group`),
at a lower CPU priority. Not in a session of its own: on Linux that is a scheduling group of
its own (autogroup), with a whole share of the CPU beside the server whatever its niceness.
Requests go in as length-prefixed pickles (the child trusts its parent); answers come back
as length-prefixed JSON (the parent does not trust what was computed from hostile input, so
no pickle comes back). A worker that reads end-of-file on stdin exits, so even a killed
server leaves none behind for longer than one parse.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import pickle
import struct
import sys
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)

WORKERS = 2  # parses at once; more wait for a free worker (their budget starts when they get one)
MEMORY_LIMIT = 1 << 30  # address space of one worker; the worst 512 KB .tf file seen peaks at 670 MB
MAX_ANSWER_BYTES = 256 << 20  # a longer length prefix is a corrupt stream, not an answer
KEEP_BELOW = 128 << 20  # resident memory under which a worker is kept for the next build (a fresh one is ~30 MB)
NICENESS = 10  # on a busy host the server's own process goes first
# The length prefix of every message between gitreg and a child process of its own (these
# workers, and the index process: indexer.py).
FRAME = struct.Struct(">Q")
# The worker imports the gitreg that started it (a checkout may shadow an installed copy).
# The checkout or site-packages that holds gitreg, for the worker's sys.path (resolved once, at import).
_ROOT = str(Path(__file__).resolve().parents[2])
_BOOT = (
    "import os, sys; os.setpgid(0, 0); sys.path.insert(0, sys.argv[1]); "
    "from gitreg.index.parse_workers import serve; serve(sys.argv[2])"
)

Call = Callable[[Any], Awaitable[Any]]


def pickled_frame(message: Any) -> bytes:
    """`message` as a child process of gitreg reads it: a length prefix, then its pickle (the child
    trusts its parent; what comes back from a child is never unpickled)."""
    data = pickle.dumps(message, protocol=pickle.HIGHEST_PROTOCOL)
    return FRAME.pack(len(data)) + data


class BudgetExceeded(Exception):
    """The parse did not finish within its wall-clock budget; the worker was killed."""


class WorkerFailed(Exception):
    """The worker died or its answer was not readable (hostile input may have crashed it)."""


class WorkersClosed(WorkerFailed):
    """The workers were shut down (gitreg is stopping) while the parse ran: nothing the input did."""


class _Worker:
    """One child process and its pipes; a request is answered before the next is sent."""

    def __init__(self, proc: asyncio.subprocess.Process) -> None:
        self.proc = proc

    async def call(self, request: Any) -> Any:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write(pickled_frame(request))
        await self.proc.stdin.drain()
        (size,) = FRAME.unpack(await self.proc.stdout.readexactly(FRAME.size))
        if size > MAX_ANSWER_BYTES:
            raise WorkerFailed(f"answer of {size} bytes")
        return json.loads(await self.proc.stdout.readexactly(size))

    async def kill(self) -> None:
        if self.proc.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                self.proc.kill()
        if self.proc.stdin is not None:
            self.proc.stdin.close()
        await self.proc.wait()


class ParseWorkers:
    """A few parse worker processes, started on first use, kept between builds, killed by close().

    `async with workers.budget(seconds) as call:` holds one worker for a series of requests
    that share one deadline; `await call(request)` answers `handler(request)` as computed in
    the worker, or raises BudgetExceeded (every later call too) or WorkerFailed (the next
    call gets a fresh worker).
    """

    def __init__(self, handler: str, size: int = WORKERS) -> None:
        self.handler = handler  # "module:function" run in the worker on each request
        self.size = size
        self.started = 0
        self._slots = asyncio.Semaphore(size)
        self._idle: list[_Worker] = []
        self._running: set[_Worker] = set()
        self._warming: asyncio.Task[None] | None = None
        self._closed = False

    def warm(self) -> None:
        """Start a worker in the background if none is idle, so a build about to come need not wait for one."""
        if self._closed or self._idle or self._warming is not None or len(self._running) >= self.size:
            return
        self._warming = asyncio.ensure_future(self._warm())

    async def _warm(self) -> None:
        try:
            self._idle.append(await self._start())
        except OSError as e:
            if not self._closed:
                log.warning("could not start a parse worker: %s", e)
        finally:
            self._warming = None

    @contextlib.asynccontextmanager
    async def budget(self, seconds: float) -> AsyncIterator[Call]:
        """One worker for the duration, and `call` bounded by `seconds` in total (OSError if none can start)."""
        async with self._slots:
            if self._warming is not None:
                await asyncio.shield(self._warming)
            worker: _Worker | None = self._idle.pop() if self._idle else await self._start()
            loop = asyncio.get_running_loop()
            deadline = loop.time() + seconds  # from here: waiting for a free worker is not parsing

            async def call(request: Any) -> Any:
                nonlocal worker
                left = deadline - loop.time()
                if left <= 0:
                    raise BudgetExceeded()
                if worker is None:
                    worker = await self._start()
                current = worker
                try:
                    return await asyncio.wait_for(current.call(request), left)
                except TimeoutError:
                    worker = None
                    await self._discard(current)
                    raise BudgetExceeded() from None
                except (OSError, EOFError, asyncio.IncompleteReadError, ValueError, WorkerFailed) as e:
                    worker = None
                    await self._discard(current)
                    if self._closed:  # close() killed it
                        raise WorkersClosed("the parse workers were shut down") from e
                    raise WorkerFailed(f"exit code {current.proc.returncode}") from e
                except BaseException:
                    # Cancelled half-way: what is left in the pipes would answer the next request.
                    worker = None
                    await asyncio.shield(self._discard(current))
                    raise

            try:
                yield call
            finally:
                if worker is not None:
                    # Python keeps what a big parse took (200+ MB): such a worker is not kept idle.
                    if self._closed or _resident_bytes(worker.proc.pid) > KEEP_BELOW:
                        await self._discard(worker)
                    else:
                        self._idle.append(worker)

    async def _start(self) -> _Worker:
        if self._closed:
            raise OSError("the parse workers are shut down")
        proc = await asyncio.create_subprocess_exec(
            sys.executable,
            "-I",
            "-c",
            _BOOT,
            _ROOT,
            self.handler,
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.DEVNULL,
            env={},
        )
        worker = _Worker(proc)
        self._running.add(worker)
        self.started += 1
        if self._closed:  # close() ran while the process was starting
            await self._discard(worker)
            raise OSError("the parse workers are shut down")
        return worker

    async def _discard(self, worker: _Worker) -> None:
        await worker.kill()
        self._running.discard(worker)

    def pids(self) -> list[int]:
        """The process ids of the running workers."""
        return [w.proc.pid for w in self._running]

    async def close(self) -> None:
        """Kill every worker (idle or parsing) and reap it; later budgets fail with OSError."""
        self._closed = True
        if self._warming is not None:
            with contextlib.suppress(Exception):
                await asyncio.shield(self._warming)
        self._idle.clear()
        workers = list(self._running)
        await asyncio.gather(*(w.kill() for w in workers), return_exceptions=True)
        self._running.clear()


def _resident_bytes(pid: int) -> int:
    """A process's resident memory (0 when /proc cannot tell)."""
    try:
        with open(f"/proc/{pid}/statm", "rb") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return 0


# ---------------------------------------------------------------------------------------
# The worker side (runs in the child process)
# ---------------------------------------------------------------------------------------


def _limit_self() -> None:
    """Lower priority and cap memory: a hostile file then fails with MemoryError, not the host."""
    with contextlib.suppress(OSError, AttributeError):
        os.nice(NICENESS)
    try:
        import resource

        _, hard = resource.getrlimit(resource.RLIMIT_AS)
        limit = MEMORY_LIMIT if hard == resource.RLIM_INFINITY else min(MEMORY_LIMIT, hard)
        resource.setrlimit(resource.RLIMIT_AS, (limit, hard))
    except (ImportError, ValueError, OSError):
        pass


def serve(handler: str) -> None:
    """The worker's loop: read a request from stdin, write `handler(request)` as JSON to stdout, until EOF."""
    import importlib

    module_name, _, function_name = handler.partition(":")
    function = getattr(importlib.import_module(module_name), function_name)
    # Anything a library prints must not corrupt the answers: fd 1 becomes stderr (/dev/null).
    out = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)
    source = sys.stdin.buffer
    _limit_self()
    while True:
        header = source.read(FRAME.size)
        if len(header) < FRAME.size:
            return  # the server closed the pipe (or died): nothing more to do
        (size,) = FRAME.unpack(header)
        request = pickle.loads(source.read(size))
        try:
            answer = json.dumps(function(request)).encode()
        except MemoryError:
            answer = json.dumps({"error": "out of memory"}).encode()
        out.write(FRAME.pack(len(answer)))
        out.write(answer)
        out.flush()
