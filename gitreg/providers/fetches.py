"""A zip's one fetch from the Git host into the kept store, followed by every download that asks meanwhile.

Terraform asks for a platform's download answer, then SHA256SUMS and its signature, then the zip
(its registry client's `PackageMeta`): answering the download answer (or a mirror's version
answer) starts fetching the zip into the kept store at once (`prefetch`), so it is on its way
before it is asked for. A zip request that finds its fetch running follows it (`Follower`): it
sends the bytes already written, by `sendfile` from the temporary file through a descriptor of
its own (a rename, an eviction or the fetch's end do not disturb it), and waits for more as they
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
import hashlib
import logging
import os
from collections.abc import AsyncGenerator, Callable
from pathlib import Path

from gitreg.core.errors import GitregError, UpstreamUnavailable
from gitreg.providers.packages import PackageFiles

log = logging.getLogger(__name__)

# Speculative fetches at once (a download answer's): beyond them, a zip is fetched when asked for.
PREFETCH_CONCURRENCY = 4

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
        self.released = 0  # bytes followers may send: all written but the last chunk, until it verified
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
            elif fetch.done:
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

    # long: one fetch's life: the file, the chunks hashed and written in step, the verdict, the cleanup
    async def _run(self, fetch: PackageFetch, chunks: Chunks) -> None:
        loop = asyncio.get_running_loop()
        digest = hashlib.sha256()
        temp: str | None = None
        offset = 0
        pending: asyncio.Future[None] | None = None  # the previous chunk's hash and write (a worker thread)
        error: GitregError | None = None
        try:
            fetch_fd, written = await asyncio.to_thread(self.files.create, fetch.size)
            temp = written
            fetch._opened(fetch_fd)
            async with contextlib.aclosing(chunks()) as stream:
                async for chunk in stream:
                    if pending is not None:
                        await asyncio.wait([pending])
                        pending.result()
                        fetch._release(offset)  # this chunk came: the one before is not the last
                    pending = loop.run_in_executor(None, _take, digest, fetch_fd, chunk, offset)
                    offset += len(chunk)
            if pending is not None:
                await asyncio.wait([pending])
                pending.result()
            if digest.hexdigest() != fetch.shasum:
                raise PackageMismatch(f"{fetch.name.rpartition(' ')[2]} does not match SHA256SUMS; refused")
            fetch.path = await self.files.keep(written, fetch.shasum, offset)
            if fetch.path is not None:
                temp = None
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
            if pending is not None and not pending.done():  # a cancelled fetch: its last write still runs
                with contextlib.suppress(BaseException):
                    await asyncio.wait([pending])
            if self._running.get(fetch.shasum) is fetch:
                del self._running[fetch.shasum]
            fetch._end(error, offset)
            if fetch.fd is not None:
                os.close(fetch.fd)
                fetch.fd = None
            if temp is not None:
                with contextlib.suppress(OSError):
                    os.unlink(temp)


def _take(digest: hashlib._Hash, fd: int, chunk: bytes, offset: int) -> None:
    """Blocking (a worker thread; hashlib lets go of the GIL): hash a chunk and write it at `offset`."""
    digest.update(chunk)
    view = memoryview(chunk)
    while view:
        written = os.pwrite(fd, view, offset)
        view = view[written:]
        offset += written
