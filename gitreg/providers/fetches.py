"""A zip's one fetch from the Git host into the kept store, followed by every download that asks meanwhile.

Terraform asks for a platform's download answer, then SHA256SUMS and its signature, then the zip
(its registry client's `PackageMeta`): answering the download answer (or a mirror's version
answer) starts fetching the zip into the kept store at once (`prefetch`), so it is on its way
before it is asked for. A zip request that finds its fetch running follows it (`Follower`): it
sends the bytes already written from the temporary file, through a descriptor of its own (by
`sendfile` where the event loop has it; uvloop, `gitreg serve`'s loop, has not: read on a worker
thread) (a rename, an eviction or the fetch's end do not disturb it), and waits for more as they
arrive. As the stream before it, the fetch releases the last chunk only once the whole file's
SHA-256 matched the signed one: a mismatch ends every follower without it (they cut their
responses) and keeps nothing.

One fetch per SHA-256 however many ask; the speculative ones are bounded (PREFETCH_CONCURRENCY
at once, never more bytes in flight than `[storage] max_bytes`, never onto a disk without room
for them) and all are owned here (a client hanging up does not stop one; `close` cancels them).
A failure is logged and never remembered: the next request fetches again. A disk that cannot take
the zip (`NoRoom`, a write failing) makes the download stream from the host as before, unkept.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import hashlib
import logging
import os
from collections import deque
from collections.abc import AsyncGenerator, Callable
from pathlib import Path

from gitreg.core.errors import GitregError, UpstreamUnavailable
from gitreg.providers.packages import PackageFiles

log = logging.getLogger(__name__)

# Speculative fetches at once (a download answer's): beyond them, a zip is fetched when asked for.
PREFETCH_CONCURRENCY = 4
# Bytes (or pieces, as they came off the socket) hashed and written per trip to a worker thread: what
# followers are sent at a time. 1 MiB: 40 trips for a 40 MiB zip; the last one is sent after the hash.
BATCH = 1024 * 1024
MAX_PIECES = 256
# Bytes received but not yet written at most (memory): past it, reading from the host waits.
QUEUED = 8 * 1024 * 1024

Chunks = Callable[[], AsyncGenerator[bytes, None]]


class PackageMismatch(GitregError):
    """A package's bytes do not match its signed SHA-256: the stream is cut short."""

    status = 502


class NotKept(GitregError):
    """The zip cannot be written to disk (no room, a write failed): it is streamed without being kept."""

    status = 503


class PackageFetch:
    """One zip on its way into the kept store: how much of it followers may send, and how it ended."""

    def __init__(self, shasum: str, name: str, size: int | None, speculative: bool) -> None:
        self.shasum = shasum
        self.name = name  # how the log names it: "namespace/type file name"
        self.size = size  # as the Git host announced it (None: not said)
        self.speculative = speculative
        self.fd: int | None = None  # the temporary file, while the fetch writes it
        self.released = 0  # bytes followers may send: all written but the last batch, until it verified
        self.verified = False  # the whole zip matched its signed SHA-256: `released` is all of it
        self.done = False
        self.error: GitregError | None = None
        self.path: Path | None = None  # where it is kept, once it is
        self._followers: set[Follower] = set()
        self._changed: asyncio.Future[None] = asyncio.get_running_loop().create_future()

    def _notify(self) -> None:
        if not self._changed.done():
            self._changed.set_result(None)
        self._changed = asyncio.get_running_loop().create_future()

    async def changed(self) -> None:
        """Wait for more bytes or the end (this waiter's cancellation touches nothing shared)."""
        await asyncio.wait([self._changed])

    async def finished(self) -> Path | None:
        """Wait for the end: where the zip is kept (None: verified but not kept); its error otherwise."""
        while not self.done:
            await self.changed()
        if self.error is not None:
            raise type(self.error)(self.error.message)
        return self.path

    def follow(self) -> Follower:
        """A follower of this fetch (use it in a `with`: it owns a file descriptor)."""
        follower = Follower(self)
        self._followers.add(follower)
        if self.fd is not None:
            follower.fd = os.dup(self.fd)
        return follower

    def _opened(self, fd: int) -> None:
        self.fd = fd
        for follower in self._followers:
            if follower.fd is None:
                follower.fd = os.dup(fd)
        self._notify()

    def _release(self, released: int) -> None:
        self.released = released
        self._notify()

    def _verified(self, size: int) -> None:
        self.verified = True
        self._release(size)

    def _end(self, error: GitregError | None, released: int) -> None:
        self.error = error
        if error is None:
            self.released = released
        self.done = True
        self._notify()


class Follower:
    """A download sending a zip as its fetch writes it: `ranges` are (offset, count) of `fd` to send."""

    def __init__(self, fetch: PackageFetch) -> None:
        self.fetch = fetch
        self.fd: int | None = None

    async def ranges(self) -> AsyncGenerator[tuple[int, int], None]:
        """What to send next, as it is released; the fetch's error (raised anew) when it failed."""
        sent = 0
        fetch = self.fetch
        while True:
            if fetch.error is not None:
                raise type(fetch.error)(fetch.error.message)
            if fetch.released > sent:
                end = fetch.released
                yield sent, end - sent
                sent = end
            elif fetch.done or fetch.verified:
                return
            else:
                await fetch.changed()

    def __enter__(self) -> Follower:
        return self

    def __exit__(self, *_: object) -> None:
        self.fetch._followers.discard(self)
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None


class PackageFetches:
    """The running fetches, one per SHA-256 (see the module docstring)."""

    def __init__(self, files: PackageFiles) -> None:
        self.files = files
        self._running: dict[str, PackageFetch] = {}
        self._tasks: set[asyncio.Task[None]] = set()
        self.started = 0  # fetches started (tests, the bench)

    def running(self, shasum: str) -> PackageFetch | None:
        """The fetch of `shasum` under way, if any."""
        return self._running.get(shasum)

    def join(
        self, shasum: str, name: str, size: int | None, chunks: Chunks, speculative: bool = False
    ) -> PackageFetch | None:
        """The fetch of `shasum` under way, else a new one reading `chunks()`; None when a speculative
        one is not started (too many at once, or more bytes in flight than the storage may hold)."""
        found = self._running.get(shasum)
        if found is not None:
            return found
        if speculative:
            if sum(f.speculative for f in self._running.values()) >= PREFETCH_CONCURRENCY:
                return None
            flight = sum(f.size or 0 for f in self._running.values())
            if flight + (size or 0) > self.files.budget.max_bytes:
                return None
        fetch = PackageFetch(shasum, name, size, speculative)
        self._running[shasum] = fetch
        self.started += 1
        task = asyncio.get_running_loop().create_task(self._run(fetch, chunks))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return fetch

    def close(self) -> None:
        """Stop every fetch (shutdown): followers see them fail; their temporary files are removed."""
        for task in list(self._tasks):
            task.cancel()

    async def wait_closed(self) -> None:
        """Wait until the fetches `close` stopped have cleaned up."""
        if self._tasks:
            await asyncio.wait(list(self._tasks))

    async def _run(self, fetch: PackageFetch, chunks: Chunks) -> None:
        """One fetch's life: the file, the pieces hashed and written, the verdict, the cleanup."""
        temp: str | None = None
        filling: _Filling | None = None
        error: GitregError | None = None
        try:
            fd, written = await asyncio.to_thread(self.files.create, fetch.size)
            temp = written
            fetch._opened(fd)
            filling = _Filling(fetch, fd)
            async with contextlib.aclosing(chunks()) as stream:
                async for piece in stream:
                    await filling.add(piece)
            if await filling.finish() != fetch.shasum:
                raise PackageMismatch(f"{fetch.name.rpartition(' ')[2]} does not match SHA256SUMS; refused")
            # Renamed into place before the last bytes go: a client done with its download finds it kept.
            fetch.path = await self.files.keep(written, fetch.shasum, filling.size)
            if fetch.path is not None:
                temp = None
            fetch._verified(filling.size)
        except PackageMismatch as e:
            log.error("provider %s: %s", fetch.name, e.message)
            error = e
        except GitregError as e:
            log.warning("provider %s: the fetch failed (not remembered): %s", fetch.name, e.message)
            error = e
        except OSError as e:  # no room, a write failed: downloads stream from the host instead
            log.warning("provider %s cannot be written to disk: %s", fetch.name, e)
            error = NotKept(f"the package cannot be kept on disk: {e.strerror or e}")
        except asyncio.CancelledError:
            error = UpstreamUnavailable("the registry is shutting down")
            raise
        finally:
            if filling is not None:  # a cancelled fetch: its last write may still run
                with contextlib.suppress(BaseException):
                    await filling.settled()
            if self._running.get(fetch.shasum) is fetch:
                del self._running[fetch.shasum]
            fetch._end(error, filling.size if filling is not None else 0)
            if fetch.fd is not None:
                os.close(fetch.fd)
                fetch.fd = None
            if temp is not None:
                with contextlib.suppress(OSError):
                    os.unlink(temp)


class _Filling:
    """The temporary file filling up: pieces batched, the batches hashed and written in order on a
    worker thread (one at a time, the next dispatched when one is done) while the pieces keep coming
    (reading from the host waits only when QUEUED bytes are not written yet); a batch is released to
    the followers once written and more came after it (so it was not the last)."""

    def __init__(self, fetch: PackageFetch, fd: int) -> None:
        self.fetch = fetch
        self.fd = fd
        self.digest = hashlib.sha256()
        self.size = 0  # bytes received
        self.written = 0  # bytes hashed and written
        self.batch: list[bytes] = []
        self.batched = 0
        self.queue: deque[tuple[list[bytes], int]] = deque()  # batches waiting for the thread, with their offsets
        self.pending: asyncio.Future[None] | None = None  # the batch on the thread
        self.error: BaseException | None = None
        self._room = asyncio.Event()  # set when fewer than QUEUED bytes wait

    async def add(self, piece: bytes) -> None:
        """One more piece from the host (waits while too much is not written yet)."""
        self.batch.append(piece)
        self.batched += len(piece)
        self.size += len(piece)
        if self.written > self.fetch.released:
            self.fetch._release(self.written)  # written, and more came: not the last
        if self.batched >= BATCH or len(self.batch) >= MAX_PIECES:
            self._enqueue()
        while self.error is None and self.size - self.written > QUEUED:
            self._room.clear()
            await self._room.wait()
        if self.error is not None:
            raise self.error

    def _enqueue(self) -> None:
        self.queue.append((self.batch, self.size - self.batched))
        self.batch, self.batched = [], 0
        self._pump()

    def _pump(self) -> None:
        if self.pending is None and self.queue and self.error is None:
            pieces, offset = self.queue.popleft()
            loop = asyncio.get_running_loop()
            self.pending = loop.run_in_executor(None, _take, self.digest, self.fd, pieces, offset)
            self.pending.add_done_callback(functools.partial(self._written, offset + sum(map(len, pieces))))

    def _written(self, end: int, future: asyncio.Future[None]) -> None:
        self.pending = None
        if future.cancelled() or future.exception() is not None:
            self.error = future.exception() if not future.cancelled() else asyncio.CancelledError()
            self._room.set()
            return
        self.written = end
        if self.size > end:  # more came after it: released now, not when the next piece comes
            self.fetch._release(end)
        self._room.set()
        self._pump()

    async def finish(self) -> str:
        """The rest written: the whole file's SHA-256 (hex)."""
        if self.batch:
            self._enqueue()
        while self.error is None and self.written < self.size:
            self._room.clear()
            await self._room.wait()
        if self.error is not None:
            raise self.error
        return self.digest.hexdigest()

    async def settled(self) -> None:
        """Wait for the batch on the worker thread (never cancelling it); drop those not started."""
        self.queue.clear()
        while self.pending is not None:
            await asyncio.wait([self.pending])


def _take(digest: hashlib._Hash, fd: int, pieces: list[bytes], offset: int) -> None:
    """Blocking (a worker thread; hashlib lets go of the GIL): hash pieces and write them at `offset`."""
    for piece in pieces:
        digest.update(piece)
    written = os.pwritev(fd, pieces, offset)
    rest = memoryview(b"".join(pieces))[written:] if written < sum(map(len, pieces)) else memoryview(b"")
    offset += written
    while rest:  # a short write (a signal, a nearly full disk): the rest in one piece
        written = os.pwrite(fd, rest, offset)
        rest = rest[written:]
        offset += written
