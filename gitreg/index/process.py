"""The index process: `gitreg serve`'s background index, in a child process at a lower CPU priority.

Building the index of a large org (an `ls-remote` per repository, then each latest version's
details) keeps a CPU busy for a while. In the serving process that work competes with
`terraform init`'s requests for the event loop and the interpreter lock, and lowering the
priority of threads inside one process does not help: a descheduled thread holding the lock
stops the loop (BENCHMARKS.md, section 13). So `gitreg serve` runs it in a second process,
`python -m gitreg.index.process`, started at `nice` +10 on the same config and `[storage] path`:

- the serving process keeps everything requests touch: the tag cache, mirrors and archives,
  the org listings (API calls, rate limits, orgs.json, repository webhooks), the catalog and
  its download counts, and a ModuleIndex that only loads index.json and takes the entries
  the index process sends;
- the index process builds: its own tag cache and git pool, the details (scratch fetches
  only, never the serving process's mirrors), index.json; it never enumerates an org, never
  writes orgs.json or catalog.json, and listens on no port.

They talk over the child's stdin and stdout. Serving to index (length-prefixed pickles; the
serving process is the trusted side): the config and the state at start (org listing,
modules wildcard rules served), then org listing changes, modules to look at again, tag lists
the serving process fetched (a webhook, a `terraform init` after the TTL), details someone
asked for. Index to serving (JSON lines, every FEED_SECONDS; the index process reads hostile
repository content, so nothing it sends is unpickled): the entries it set or dropped, modules
whose repository is gone, and its status for /readyz and /metrics.

The index process exits when its stdin closes (the serving process stopped, or died); one that
dies is started again with backoff while serving goes on from the index as it is.

With Redis (`[cache] backend = "redis"`, shared.py) the serving process keeps the replica's
place: it holds (or not) the index lease and tells its index process whether to build. A
leader's index process builds, and each index.json it writes the serving process publishes; a
follower's index process builds nothing, and is given each index the serving process loads
from the leader (it keeps it on disk, and starts from it should this replica take the lease).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import pickle
import signal
import struct
import sys
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from enum import Enum
from typing import Any

from gitreg.config.model import Config
from gitreg.core.names import ModuleAddress, address_from_text
from gitreg.git.remote import TagList
from gitreg.index.parse_workers import FRAME, pickled_frame
from gitreg.index.store import ChangeLog, IndexEntry, ModuleIndex
from gitreg.orgs.catalog import OrgCatalog, OrgChanges, OrgRepo
from gitreg.registry.catalog import Catalog
from gitreg.registry.tags import TagCache
from gitreg.replicas.shared import SharedState

log = logging.getLogger(__name__)

NICENESS = 10  # added to the serving process's
# The index process sends a change at once, then what changed meanwhile at most this often: a
# webhook's module is listed without delay, and the first index of an org costs the serving
# process a batch every half second, not a message per module (BENCHMARKS.md, section 13).
FEED_SECONDS = 0.5
RESTART_MIN_SECONDS, RESTART_MAX_SECONDS = 1.0, 60.0
STOP_SECONDS = 10.0  # at shutdown: time to write index.json and exit before it is killed
_READ_LIMIT = 64 << 20  # a line from the index process (a resync lists every address)


LEADING_CHECK_SECONDS = 0.5  # with Redis: how soon the index process hears of a lease change


class Role(Enum):
    """What an application built by create_app does."""

    ALL = "all"  # serves and builds its own index (tests of one process)
    SERVE = "serve"  # serves; the index process builds the index
    INDEX = "index"  # the index process: builds the index, serves nothing


def serve_role(config: Config) -> Role:
    """The role of `gitreg serve`'s process: SERVE, or ALL when the index is off (nothing to build)."""
    return Role.SERVE if config.index.enabled else Role.ALL


@dataclass
class Seed:
    """What the index process is given at its start (pickled onto its stdin)."""

    config: Config
    log_level: int
    log_json: bool
    orgs: list[OrgRepo] = field(default_factory=list)
    orgs_complete: bool = True  # every org had its first listing (until then the index drops nothing)
    remembered: list[ModuleAddress] = field(default_factory=list)
    resync: bool = False  # a restart: send every entry, the serving process may hold others
    leading: bool = True  # with Redis: this replica holds the index lease (builds); the messages update it


# ---------------------------------------------------------------------------------------
# The serving process's side
# ---------------------------------------------------------------------------------------


class IndexProcess:
    """Starts the index process, tells it what it must know, and takes the entries it sends."""

    def __init__(
        self,
        config: Config,
        index: ModuleIndex,
        catalog: Catalog,
        orgs: OrgCatalog,
        cache: TagCache,
        shared: SharedState,
    ) -> None:
        self.config = config
        self.index = index
        self.catalog = catalog
        self.orgs = orgs
        self.cache = cache
        self.shared = shared  # with Redis: the index lease, and the other replicas to publish to
        self._told_leading = True
        self._tasks: set[asyncio.Task[None]] = set()
        self.starts = 0
        self._stdin: asyncio.StreamWriter | None = None
        self._outbox: list[bytes] | None = None  # messages while the process starts
        self._stopping = asyncio.Event()

    # --- what the serving process tells it ------------------------------------------------------

    def _send(self, message: object) -> None:
        if self._outbox is not None:
            self._outbox.append(pickled_frame(message))
        elif self._stdin is not None and not self._stdin.is_closing():
            self._stdin.write(pickled_frame(message))
        # Else none runs: the next one is given the listing and the catalog at its start.

    def remember(self, address: ModuleAddress) -> None:
        """A wildcard rule served `address` for the first time (Catalog.on_new)."""
        self._send(("remember", address))

    def fetched(self, key: str) -> None:
        """The tag cache fetched new tags of `key` (TagCache.on_fetched): the index process takes them."""
        tags = self.cache.peek(key)
        if tags is not None:
            self._send(("tags", key, dict(tags.tags)))

    def orgs_changed(self, changes: OrgChanges) -> None:
        """An enumeration or a repository webhook changed the org listing."""
        repos = [repo for a in changes.added | changes.changed if (repo := self.orgs.get(a)) is not None]
        self._send(("orgs", repos, sorted(changes.removed), sorted(changes.all), self.orgs.complete()))

    def want(self, address: ModuleAddress, version: str) -> None:
        """Someone asked for details not on disk yet (ModuleIndex.on_wanted)."""
        self._send(("want", address, version))

    def adopt(self, text: str) -> None:
        """With Redis, a follower: the leader's index, loaded here and given to the index process."""
        self.index.adopt(text)
        self._send(("adopt", text))

    async def _watch_lease(self) -> None:
        while True:
            await asyncio.sleep(LEADING_CHECK_SECONDS)
            leading = self.shared.leading()
            if leading != self._told_leading:
                self._told_leading = leading
                self._send(("leading", leading))

    async def _publish(self) -> None:
        """The index process wrote index.json: with Redis, the leader offers it to the other replicas."""
        if self.shared.backend == "memory" or not self.shared.leading():
            return  # alone, nobody to offer it to: the file is not even read
        try:
            text = await asyncio.get_running_loop().run_in_executor(None, self.index.path.read_text, "utf-8")
        except OSError as e:
            log.warning("could not read %s to publish it: %s", self.index.path, e)
            return
        await self.shared.publish_index(text)

    # --- what it sends ------------------------------------------------------------------------

    def _take(self, line: bytes) -> None:
        try:
            self._apply(json.loads(line))
        except (ValueError, TypeError, KeyError, AttributeError, StopIteration):
            log.warning("the index process sent a line that is not a message; ignored")

    def _apply(self, message: dict[str, Any]) -> None:
        kind = next(iter(message))
        if kind == "set":
            entry = IndexEntry.from_json(message["set"])
            if entry is not None:
                self.index.take([entry])
        elif kind == "drop" and (address := address_from_text(message["drop"])) is not None:
            self.index.take([], [address])
        elif kind == "forget" and (address := address_from_text(message["forget"])) is not None:
            self.catalog.forget(address)
        elif kind == "reset" and isinstance(message["reset"], list):
            keep = {str(a) for a in message["reset"]}
            self.index.take([], [e.address for e in self.index.entries() if str(e.address) not in keep])
        elif kind == "status" and isinstance(message["status"], dict):
            self.index.take_status(message["status"])
        elif kind == "written":
            task = asyncio.ensure_future(self._publish())
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    # --- its life ---------------------------------------------------------------------------------

    async def lifetime(self) -> AsyncIterator[None]:
        """Cleanup context body: the index process runs (and is restarted) while the application does."""
        task = asyncio.ensure_future(self._supervise())
        # Alone (memory), this replica always leads: there is no lease to watch.
        watch = asyncio.ensure_future(self._watch_lease()) if self.shared.backend != "memory" else None
        try:
            yield
        finally:
            if watch is not None:
                watch.cancel()
            self._stopping.set()
            stdin, self._stdin = self._stdin, None
            if stdin is not None:
                stdin.close()  # end of input: it writes index.json and exits
            try:
                await asyncio.wait_for(asyncio.shield(task), STOP_SECONDS)
            except TimeoutError:
                log.warning("the index process did not stop within %.0f s; killed", STOP_SECONDS)
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)

    async def _supervise(self) -> None:
        delay = RESTART_MIN_SECONDS
        while not self._stopping.is_set():
            started = time.monotonic()
            code = await self._run(resync=self.starts > 0)
            if self._stopping.is_set():
                return
            if time.monotonic() - started > RESTART_MAX_SECONDS:
                delay = RESTART_MIN_SECONDS  # it ran a good while: this is not a crash loop
            if code is None:
                why = "could not be started"
            else:
                why = f"exited ({f'code {code}' if code >= 0 else f'signal {-code}'})"
            log.warning(
                "the index process %s; starting it again in %.0f s. Serving goes on, "
                "list and search from the index as it was",
                why,
                delay,
            )
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._stopping.wait(), delay)
            delay = min(delay * 2, RESTART_MAX_SECONDS)

    async def _run(self, resync: bool) -> int | None:
        root = logging.getLogger()
        from gitreg.observability.logs import JsonFormatter

        self._outbox = []
        self._told_leading = self.shared.leading()
        seed = Seed(
            config=self.config,
            log_level=root.getEffectiveLevel(),
            log_json=any(isinstance(h.formatter, JsonFormatter) for h in root.handlers),
            orgs=list(self.orgs.modules().values()),
            orgs_complete=self.orgs.complete(),
            remembered=self.catalog.remembered(),
            resync=resync,
            leading=self._told_leading,
        )
        try:
            proc = await asyncio.create_subprocess_exec(
                sys.executable,
                "-m",
                "gitreg.index.process",
                stdin=asyncio.subprocess.PIPE,
                stdout=asyncio.subprocess.PIPE,
                limit=_READ_LIMIT,
            )
        except OSError as e:
            self._outbox = None
            log.warning("cannot start the index process: %s", e.strerror or e)
            return None
        assert proc.stdin is not None and proc.stdout is not None
        self.starts += 1
        outbox, self._outbox = self._outbox, None
        proc.stdin.write(pickled_frame(seed) + b"".join(outbox))
        self._stdin = proc.stdin
        log.info("index process started (pid %d, nice +%d)", proc.pid, NICENESS)
        try:
            while line := await proc.stdout.readline():
                self._take(line)
        except (ValueError, ConnectionError) as e:  # a line past the limit; a reset pipe
            log.warning("reading from the index process failed: %s; it is stopped", e)
            proc.kill()
        except asyncio.CancelledError:  # shutdown, and it did not stop in time
            with contextlib.suppress(ProcessLookupError):
                proc.kill()
            raise
        finally:
            self._stdin = None
        return await proc.wait()


# ---------------------------------------------------------------------------------------
# The index process's side
# ---------------------------------------------------------------------------------------


class _Feed:
    """Sends the index's changes (at once, then batched every FEED_SECONDS), and its status when it moved."""

    def __init__(self, index: ModuleIndex, out: asyncio.StreamWriter, resync: bool) -> None:
        self.index = index
        self.out = out
        self.written = False
        self._status: dict[str, Any] | None = None
        assert index.changes is not None, "browse_services records the index process's changes from its start"
        self.changes: ChangeLog = index.changes
        if resync:
            entries = index.entries()
            out.write(json.dumps({"reset": [str(e.address) for e in entries]}).encode() + b"\n")
            for entry in entries:
                self.changes.record(entry.address, entry)

    async def run(self) -> None:
        while True:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.changes.ready.wait(), FEED_SECONDS)  # else: the status may have moved
            await self.send()
            await asyncio.sleep(FEED_SECONDS)

    async def send(self) -> None:
        changes, forgotten = self.changes.take()
        lines: list[dict[str, Any]] = [
            {"set": entry.to_json()} if entry is not None else {"drop": str(address)}
            for address, entry in changes.items()
        ]
        lines += [{"forget": str(address)} for address in forgotten]
        if self.written:
            self.written = False
            lines.append({"written": True})
        status = self.index.status()
        if status != self._status or lines:
            self._status = status
            lines.append({"status": status})
        if lines:
            self.out.write(b"".join(json.dumps(line).encode() + b"\n" for line in lines))
            await self.out.drain()


async def _child(seed: Seed, read_fd: int, write_fd: int) -> None:
    """The index process's life: build the application in the INDEX role, follow the serving process."""
    from aiohttp import web

    from gitreg.core.errors import GitregError
    from gitreg.web.app import create_app
    from gitreg.web.keys import CACHE, CATALOG, INDEX, ORGS, REGISTRY

    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader(limit=_READ_LIMIT)
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), os.fdopen(read_fd, "rb"))
    transport, protocol = await loop.connect_write_pipe(asyncio.streams.FlowControlMixin, os.fdopen(write_fd, "wb"))
    out = asyncio.StreamWriter(transport, protocol, None, loop)

    app = create_app(seed.config, role=Role.INDEX, seed=seed)
    runner = web.AppRunner(app, handle_signals=False)
    await runner.setup()  # loads index.json and starts indexing; no port is opened
    index, catalog, orgs, cache, registry = app[INDEX], app[CATALOG], app[ORGS], app[CACHE], app[REGISTRY]
    feed = _Feed(index, out, seed.resync)

    async def written(_text: str) -> None:
        feed.written = True  # the serving process publishes it (with Redis, when it leads)
        feed.changes.ready.set()  # sent at once

    index.on_written.append(written)
    feeder = asyncio.ensure_future(feed.run())
    loop.add_signal_handler(signal.SIGTERM, reader.feed_eof)  # stop as when the input ends
    try:
        while True:
            try:
                size = FRAME.unpack(await reader.readexactly(FRAME.size))[0]
                message = pickle.loads(await reader.readexactly(size))
            except asyncio.IncompleteReadError:
                break  # the serving process closed our input (stopping) or died
            kind = message[0]
            if kind == "orgs":
                _, repos, gone, concerned, complete = message
                orgs.follow(repos, gone, complete)
                index.notice(concerned)
            elif kind == "remember":
                with contextlib.suppress(GitregError):
                    catalog.remember(registry.resolve(message[1]))
            elif kind == "tags":
                cache.accept(message[1], TagList(message[2]))
            elif kind == "want":
                index.want(message[1], message[2])
            elif kind == "adopt":
                index.adopt(message[1])
            elif kind == "leading":
                seed.leading = message[1]  # what index.leading() answers (browse_services)
                log.info("index process: %s", "builds the index" if seed.leading else "another replica builds it")
    finally:
        feeder.cancel()
        await asyncio.gather(feeder, return_exceptions=True)
        await runner.cleanup()  # index.json written once more
        with contextlib.suppress(ConnectionError):
            await feed.send()
        out.close()


def main() -> int:
    """`python -m gitreg.index.process`, started by the serving process (IndexProcess); not for people."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C reaches the whole group: the serving process decides
    with contextlib.suppress(OSError):
        os.nice(NICENESS)
    stdin = sys.stdin.fileno()
    try:
        size = FRAME.unpack(_read_exactly(stdin, FRAME.size))[0]
        seed = pickle.loads(_read_exactly(stdin, size))
    except (EOFError, pickle.UnpicklingError, struct.error):
        sys.stderr.write("gitreg.index.process: this is the index process of `gitreg serve`, which starts it\n")
        return 2
    # stdout carries messages: anything else printed goes to stderr.
    write_fd = os.dup(sys.stdout.fileno())
    os.dup2(sys.stderr.fileno(), sys.stdout.fileno())
    from gitreg.cli.main import configure_logging

    configure_logging(seed.log_level, "json" if seed.log_json else "text", serve=True)
    asyncio.run(_child(seed, stdin, write_fd))
    return 0


def _read_exactly(fd: int, size: int) -> bytes:
    chunks, left = [], size
    while left:
        chunk = os.read(fd, left)
        if not chunk:
            raise EOFError
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)


if __name__ == "__main__":
    # Run as gitreg.index.process, not __main__: its classes (Role, Seed) must be the ones the rest imports.
    from gitreg.index.process import main as _main

    sys.exit(_main())
