"""The index process: `gitreg serve`'s background index, in a child process at a lower CPU priority.

Building the index of a large org (an `ls-remote` per repository, then each latest version's
details) keeps a CPU busy for a while. In the serving process that work competes with
`terraform init`'s requests for the event loop and the interpreter lock, and lowering the
priority of threads inside one process does not help: a descheduled thread holding the lock
stops the loop (BENCHMARKS.md, section 13). So `gitreg serve` runs it in a second process,
`python -m gitreg.indexer`, started at `nice` +10 on the same config and `[storage] path`:

- the serving process keeps everything requests touch: the tag cache, mirrors and archives,
  the org listings (API calls, rate limits, orgs.json, repository webhooks), the catalog and
  its download counts, and a ModuleIndex that only loads index.json and takes the entries
  the index process sends;
- the index process builds: its own tag cache and git pool, the details (scratch fetches
  only, never the serving process's mirrors), index.json; it never enumerates an org, never
  writes orgs.json or catalog.json, and listens on no port.

They talk over the child's stdin and stdout, in the messages of protocol.py. Serving to index
(length-prefixed pickles; the serving process is the trusted side): the config and the state at
start (org listing, modules wildcard rules served), then org listing changes, modules to look at
again, tag lists the serving process fetched (a webhook, a `terraform init` after the TTL),
details someone asked for. Index to serving (JSON lines, every FEED_SECONDS; the index process
reads hostile repository content, so nothing it sends is unpickled): the entries it set or
dropped, modules whose repository is gone, and its status for /readyz and /metrics.

The index process exits when its stdin closes (the serving process stopped, or died); one that
dies is started again with backoff while serving goes on from the index as it is.

With Redis (`[cache] backend = "redis"`, replicas/redis.py) the serving process keeps the replica's
place: it holds (or not) the index lease and tells its index process whether to build. A
leader's index process builds, and each index.json it writes the serving process publishes; a
follower's index process builds nothing, and is given each index the serving process loads
from the leader (it keeps it on disk, and starts from it should this replica take the lease).

Here: the serving process's side of the pipe (IndexProcess and CommandPipe); the index
process's side is child.py (IndexSide, ReportFeed), its entry point gitreg/indexer.py.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import itertools
import logging
import os
import sys
import time
from collections import deque
from collections.abc import AsyncIterator, Callable, Coroutine, Iterable
from enum import Enum
from typing import Any

from gitreg.config.model import Config
from gitreg.core.names import ModuleAddress
from gitreg.git.runner import INHERITED, INHERITED_FOR_SSH, inherited_environment
from gitreg.index.protocol import (
    HEARTBEAT_SECONDS,
    Adopt,
    Command,
    EntryDropped,
    EntrySet,
    Forgotten,
    Leading,
    OrgsChanged,
    Remember,
    Report,
    Reset,
    Seed,
    Status,
    TagObjectsKnown,
    TagsFetched,
    UntaggedSet,
    Want,
    Written,
    decode_report,
    encode_command,
    encode_seed,
)
from gitreg.index.store import ModuleIndex
from gitreg.orgs.model import OrgChanges
from gitreg.orgs.service import OrgCatalog
from gitreg.registry.catalog import Catalog
from gitreg.registry.tags import TagCache
from gitreg.replicas.base import SharedState
from gitreg.storage.files import run_file_work

log = logging.getLogger(__name__)

NICENESS = 10  # added to the serving process's
RESTART_MIN_SECONDS, RESTART_MAX_SECONDS = 1.0, 60.0
STOP_SECONDS = 10.0  # at shutdown: time to write index.json and exit before it is killed
# A stopped (SIGSTOP) or hung index process reads nothing and says nothing. The serving process
# buffers at most this much for it, and it reports at least every HEARTBEAT_SECONDS: past the
# bound, or after SILENCE_SECONDS without a line (STARTUP_SECONDS before its first one, while it
# loads index.json), it is killed and started again with the backoff (its successor is given
# the whole state at its start, so what was dropped is not missed).
MAX_PENDING_BYTES = 16 << 20
SILENCE_SECONDS = 30.0
STARTUP_SECONDS = 120.0
READ_LIMIT = 64 << 20  # a line from the index process (a resync lists every address), a command
ENTRY_MODULE = "gitreg.indexer"  # `python -m` this: the index process


# A large listing change (a first listing, orgs.json loaded: 230,000 addresses) is told in parts
# of this many addresses, the loop free between them: gathered and pickled at once it held the
# serving loop for about a second (#22). The index process takes the parts together, at the last.
ORGS_PART = 2000
LEADING_CHECK_SECONDS = 0.5  # with Redis: how soon the index process hears of a lease change
# What the index process keeps of the serving process's environment, besides what its git needs
# (runner.INHERITED, and SSH_AUTH_SOCK: it lists tags over ssh too): how Python finds gitreg.
INDEX_INHERITED = frozenset({"HOME", "USER", "LOGNAME", "LD_LIBRARY_PATH", "VIRTUAL_ENV", "GIT_SSH_COMMAND"})


def index_environment() -> dict[str, str]:
    """The index process's environment: by name, never the secrets the serving process read (#22)."""
    env = inherited_environment(INHERITED | INHERITED_FOR_SSH | INDEX_INHERITED)
    env.update((name, value) for name, value in os.environ.items() if name.startswith("PYTHON"))
    return env


def index_config(config: Config) -> Config:
    """`config` without the secrets the index process has no use for (it serves nothing, talks to no
    Redis and no Git host's API): only the Git credentials stay, for its own git calls."""
    return dataclasses.replace(
        config,
        cache=dataclasses.replace(config.cache, redis_url=None),
        auth=dataclasses.replace(config.auth, tokens=(), metrics_token=None, signing_key=None),
        webhooks=dataclasses.replace(config.webhooks, github_secret=None, gitlab_token=None),
        orgs=tuple(dataclasses.replace(org, token=None) for org in config.orgs),
    )


async def spawn_index_process() -> asyncio.subprocess.Process:
    """`python -m gitreg.indexer` with its pipes (OSError when it cannot start): it imports gitreg
    (most of its start), then waits for its seed on stdin."""
    return await asyncio.create_subprocess_exec(
        sys.executable,
        "-P",  # not the working directory first on sys.path: a gitreg checkout there is not imported (#33)
        "-m",
        ENTRY_MODULE,
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        limit=READ_LIMIT,
        env=index_environment(),
    )


class EarlyStart:
    """`gitreg serve`'s first index process, started before the serving process imports and builds
    its application (cli/server.py): its imports run meanwhile (on another CPU), then it waits for
    its seed, so the org's first listing starts sooner (#33). IndexProcess takes it for its first run;
    one never taken (the application did not start) is killed and reaped by close()."""

    def __init__(self) -> None:
        self._proc: asyncio.subprocess.Process | None = None

    async def start(self) -> None:
        """Spawn it (a failure is left to IndexProcess, which tries again and says why)."""
        with contextlib.suppress(OSError):
            self._proc = await spawn_index_process()

    def take(self) -> asyncio.subprocess.Process | None:
        """The process, still running, once (None: none was started, or it ended already)."""
        proc, self._proc = self._proc, None
        if proc is not None and proc.returncode is None:
            return proc
        return None

    async def close(self) -> None:
        if (proc := self.take()) is not None:
            with contextlib.suppress(ProcessLookupError):
                proc.kill()
            await proc.wait()


class Role(Enum):
    """What an application built by create_app does."""

    # Everything in one process: `gitreg serve` with the index off (nothing to build). With the index
    # on the index process builds it (SERVE + INDEX): Services refuses ALL then.
    ALL = "all"
    SERVE = "serve"  # serves; the index process builds the index
    INDEX = "index"  # the index process: builds the index, serves nothing


def serve_role(config: Config) -> Role:
    """The role of `gitreg serve`'s process: SERVE, or ALL when the index is off (nothing to build)."""
    return Role.SERVE if config.index.enabled else Role.ALL


# ---------------------------------------------------------------------------------------
# The serving process's side
# ---------------------------------------------------------------------------------------


class CommandPipe:
    """The index process's stdin: commands are written to the one running, held while one starts,
    and dropped while none runs (the next one is given the listing and the catalog at its start)."""

    def __init__(self, max_pending: int = MAX_PENDING_BYTES) -> None:
        self._stdin: asyncio.StreamWriter | None = None
        self._outbox: list[bytes] | None = None  # commands while the process starts
        self.max_pending = max_pending
        # Called once when the running process has not taken max_pending bytes (IndexProcess kills it).
        self.on_stalled: Callable[[int], None] | None = None
        self.dropped = 0  # commands dropped because the process did not read them

    def send(self, message: Command) -> None:
        if self._outbox is not None:
            self._outbox.append(encode_command(message))
        elif self._stdin is not None and not self._stdin.is_closing():
            pending = self._stdin.transport.get_write_buffer_size()
            if pending > self.max_pending:  # it does not read: never buffer without bound
                self.dropped += 1
                if self.dropped == 1 and self.on_stalled is not None:
                    self.on_stalled(pending)
                return
            self._stdin.write(encode_command(message))

    def want(self, address: ModuleAddress, version: str) -> None:
        """Someone asked for details not on disk yet (the serving ModuleIndex's on_wanted)."""
        self.send(Want(address, version))

    async def room(self) -> None:
        """Wait (SILENCE_SECONDS at most) while the running process has a quarter of max_pending
        unread: a change sent in parts is paced by the reader, never dropped as a stall."""
        stdin = self._stdin
        if stdin is not None and stdin.transport.get_write_buffer_size() > self.max_pending // 4:
            with contextlib.suppress(TimeoutError, ConnectionError):
                await asyncio.wait_for(stdin.drain(), SILENCE_SECONDS)

    def hold(self) -> None:
        """A process is starting: keep what is sent until it runs."""
        self._outbox = []

    def open(self, stdin: asyncio.StreamWriter, seed: bytes) -> None:
        """It runs: the seed first (`encode_seed`), then what was held."""
        outbox, self._outbox = self._outbox or [], None
        for command in (seed, *outbox):  # (not joined: a seed of 230,000 org modules is 44 MB)
            stdin.write(command)
        self._stdin = stdin

    def detach(self) -> asyncio.StreamWriter | None:
        """No process runs (it could not start, or it ended): its stdin, if it had one."""
        stdin, self._stdin, self._outbox = self._stdin, None, None
        self.dropped = 0
        return stdin


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
        commands: CommandPipe | None = None,
        log_json: bool = False,
        early: EarlyStart | None = None,
    ) -> None:
        self.config = config
        self.index = index
        self.catalog = catalog
        self.orgs = orgs
        self.cache = cache
        self.shared = shared  # with Redis: the index lease, and the other replicas to publish to
        self.commands = commands or CommandPipe()
        self.commands.on_stalled = self._stalled
        self.log_json = log_json  # the serving process logs JSON lines: so does the index process
        self._early = early  # its first run's process, started already (cli/server.py)
        self._told_leading = True
        self._tasks: set[asyncio.Task[None]] = set()
        self._org_changes: deque[OrgChanges] = deque()  # large changes being told in parts, in order
        self.starts = 0
        self._stopping = asyncio.Event()
        self._proc: asyncio.subprocess.Process | None = None  # the one running
        self._heard = 0.0  # time.monotonic() of its last line (0: none yet)

    # --- what the serving process tells it ------------------------------------------------------

    def remember(self, address: ModuleAddress) -> None:
        """A wildcard rule served `address` for the first time (Catalog.on_new)."""
        self.commands.send(Remember(address))

    def fetched(self, key: str) -> None:
        """The tag cache fetched new tags of `key` (TagCache.on_fetched): the index process takes them."""
        tags = self.cache.peek(key)
        if tags is not None:
            self.commands.send(TagsFetched(key, dict(tags.tags), self.index.read.tag_objects.of(key)))

    def orgs_changed(self, changes: OrgChanges) -> None:
        """An enumeration or a repository webhook changed the org listing: told at once, or in parts
        of ORGS_PART addresses from a task when large (after those told before it, in order)."""
        size = len(changes.added) + len(changes.changed) + len(changes.removed) + len(changes.pushed)
        if not self._org_changes and size <= ORGS_PART:
            self._tell_part(changes.added | changes.changed, list(changes.removed), list(changes.all), more=False)
            return
        self._org_changes.append(changes)
        if len(self._org_changes) == 1:
            self._spawn(self._tell_orgs())

    def _tell_part(
        self, updated: Iterable[ModuleAddress], gone: list[ModuleAddress], concerned: list[ModuleAddress], more: bool
    ) -> None:
        repos = [repo for a in updated if (repo := self.orgs.get(a)) is not None]
        self.commands.send(OrgsChanged(repos, gone, concerned, self.orgs.complete(), more))

    async def _tell_orgs(self) -> None:
        """Tell the queued changes, each in parts, the loop free (and the reader caught up) between them."""
        while self._org_changes:
            changes = self._org_changes[0]
            updated = itertools.chain(changes.added, changes.changed)
            gone = iter(changes.removed)
            concerned = itertools.chain(changes.added, changes.changed, changes.removed, changes.pushed)
            while True:
                some = list(itertools.islice(updated, ORGS_PART))
                dropped = list(itertools.islice(gone, ORGS_PART))
                touched = list(itertools.islice(concerned, ORGS_PART))
                if not (some or dropped or touched):
                    break
                self._tell_part(some, dropped, touched, more=True)
                await asyncio.sleep(0)
                await self.commands.room()
            self._tell_part((), [], [], more=False)
            self._org_changes.popleft()

    def _spawn(self, coro: Coroutine[Any, Any, None]) -> None:
        task = asyncio.ensure_future(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def adopt(self, text: str) -> None:
        """With Redis, a follower: the leader's index, loaded here and given to the index process."""
        self.index.adopt(text)
        self.commands.send(Adopt(text))

    async def _watch_lease(self) -> None:
        while True:
            await asyncio.sleep(LEADING_CHECK_SECONDS)
            leading = self.shared.leading()
            if leading != self._told_leading:
                self._told_leading = leading
                self.commands.send(Leading(leading))

    async def _publish(self) -> None:
        """The index process wrote index.json: with Redis, the leader offers it to the other replicas."""
        if not self.shared.is_shared or not self.shared.leading():
            return  # alone, nobody to offer it to: the file is not even read
        try:
            text = await run_file_work(None, self.index.path.read_text, "utf-8")
        except OSError as e:
            log.warning("could not read %s to publish it: %s", self.index.path, e)
            return
        await self.shared.publish_index(text)

    # --- what it sends ------------------------------------------------------------------------

    def _take(self, line: bytes) -> None:
        try:
            report = decode_report(line)
        except ValueError:
            log.warning("the index process sent a line that is not a message; ignored")
            return
        if report is not None:
            self._apply(report)

    def _apply(self, report: Report) -> None:
        match report:
            case EntrySet(entry):
                self.index.take([entry])
            case TagObjectsKnown(key, objects):
                self.index.read.tag_objects.keep(key, objects)
            case EntryDropped(address):
                self.index.take([], [address])
            case UntaggedSet(address, untagged):
                self.index.take([], [], {address: untagged})
            case Forgotten(address):
                self.catalog.forget(address)
            case Reset(keep):
                self.index.take([], [a for a in self.index.addresses() if a not in keep])
            case Status(complete, queued, stats):
                self.index.take_status(complete, queued, stats)
            case Written():
                self._spawn(self._publish())

    # --- its life ---------------------------------------------------------------------------------

    async def lifetime(self) -> AsyncIterator[None]:
        """Cleanup context body: the index process runs (and is restarted) while the application does."""
        task = asyncio.ensure_future(self._supervise())
        # Alone (memory), this replica always leads: there is no lease to watch.
        watch = asyncio.ensure_future(self._watch_lease()) if self.shared.is_shared else None
        try:
            yield
        finally:
            if watch is not None:
                watch.cancel()
            self._stopping.set()
            stdin = self.commands.detach()
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

    def _seed(self, resync: bool) -> Seed:
        return Seed(
            config=index_config(self.config),
            log_level=logging.getLogger().getEffectiveLevel(),
            log_json=self.log_json,
            orgs=list(self.orgs.modules().values()),
            orgs_complete=self.orgs.complete(),
            remembered=self.catalog.remembered(),
            resync=resync,
            leading=self._told_leading,
        )

    async def _spawn_process(self) -> asyncio.subprocess.Process | None:
        """The process of a run: the one started early (the first run), else a new one (None: it could not start)."""
        early, self._early = self._early, None
        if early is not None and (proc := early.take()) is not None:
            return proc
        try:
            return await spawn_index_process()
        except OSError as e:
            log.warning("cannot start the index process: %s", e.strerror or e)
            return None

    async def _run(self, resync: bool) -> int | None:
        self.commands.hold()
        # Started first: it imports while its seed is made.
        proc = await self._spawn_process()
        if proc is None:
            self.commands.detach()
            return None
        self._told_leading = self.shared.leading()
        # Pickled on a thread (230,000 org modules: 1.1-1.3 s); what is sent meanwhile is held.
        seed = await asyncio.get_running_loop().run_in_executor(None, encode_seed, self._seed(resync))
        if self._stopping.is_set():  # stopped meanwhile: it has not started anything yet
            self.commands.detach()
            with contextlib.suppress(ProcessLookupError):
                proc.kill()
            await proc.wait()
            return None
        assert proc.stdin is not None and proc.stdout is not None
        self.starts += 1
        self._proc, self._heard = proc, 0.0
        self.commands.open(proc.stdin, seed)
        log.info("index process started (pid %d, nice +%d)", proc.pid, NICENESS)
        if self._stopping.is_set():
            # Stopped while it was being spawned: lifetime() found no input to close, so it would
            # run on until killed after STOP_SECONDS (index.json unwritten). Its input ends now.
            self.commands.detach()
            proc.stdin.close()
        watchdog = asyncio.ensure_future(self._watch_silence(proc))
        try:
            while line := await proc.stdout.readline():
                self._heard = time.monotonic()
                self._take(line)
        except (ValueError, ConnectionError) as e:  # a line past the limit; a reset pipe
            log.warning("reading from the index process failed: %s; it is stopped", e)
            proc.kill()
        except asyncio.CancelledError:  # shutdown, and it did not stop in time
            with contextlib.suppress(ProcessLookupError):
                proc.kill()
            await proc.wait()  # reaped here: no ended process left behind (a SIGKILL ends even a stopped one)
            raise
        finally:
            watchdog.cancel()
            self._proc = None
            self.commands.detach()
        return await proc.wait()

    def _stalled(self, pending: int) -> None:
        """The index process left `pending` bytes of commands unread (stopped, or hung): killed."""
        if self._proc is not None and self._proc.returncode is None:
            log.warning(
                "the index process (pid %d) does not read what it is sent (%d MiB waiting); killing it",
                self._proc.pid,
                pending >> 20,
            )
            with contextlib.suppress(ProcessLookupError):
                self._proc.kill()

    async def _watch_silence(self, proc: asyncio.subprocess.Process) -> None:
        """Kill `proc` when it says nothing for SILENCE_SECONDS (it reports every HEARTBEAT_SECONDS)."""
        started = time.monotonic()
        while proc.returncode is None:
            await asyncio.sleep(HEARTBEAT_SECONDS)
            last, limit = (self._heard, SILENCE_SECONDS) if self._heard else (started, STARTUP_SECONDS)
            if time.monotonic() - last > limit and proc.returncode is None and not self._stopping.is_set():
                log.warning(
                    "the index process (pid %d) sent nothing for %.0f s (stopped or hung); killing it", proc.pid, limit
                )
                with contextlib.suppress(ProcessLookupError):
                    proc.kill()
                return
