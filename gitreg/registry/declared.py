"""Each module's `.gitreg.toml` (lifecycle.py), read from its repository's default branch and kept.

The default branch's commit comes with the tag list (`TagList.head`: the same `ls-remote`), so
knowing whether the file may have changed costs nothing. It is read (through the mirror store:
one shallow fetch of that commit by object name, into a scratch repository) only when that
commit moved: after a push webhook refreshed the tag list, or at the list's own refresh. What
was read is remembered per (repository, folder) with the commit it was read at, in memory and
in `[storage] path/declarations.json`, so a restart reads nothing again.

A failure to read is transient: the last good declaration stays, the read is tried again after
`[cache] error_retry_seconds` (never stored as "no file"). A malformed file is a declaration
too (it declares nothing, and says why). Event loop only.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections import OrderedDict
from collections.abc import Callable
from concurrent.futures import Executor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gitreg.core.errors import GitregError
from gitreg.core.events import Signal
from gitreg.core.flight import InFlight
from gitreg.core.names import ModuleAddress
from gitreg.core.urls import mask
from gitreg.git.mirror import MirrorGit
from gitreg.git.pool import background_task
from gitreg.registry.lifecycle import FILE_NAME, MAX_FILE_BYTES, NOTHING, Declaration, from_json, malformed
from gitreg.registry.lifecycle import parse_declaration as parse
from gitreg.storage.files import run_file_work
from gitreg.storage.mirrors import MirrorStore
from gitreg.storage.state import StateFile

log = logging.getLogger(__name__)

FILE = "declarations.json"
_FORMAT = 1
MAX_KEPT = 20_000  # (repository, folder) pairs remembered; the least recently used go first
MAX_LABELS = 2_000  # distinct `module` label values per counter; then "other"
FLUSH_SECONDS = 5.0
# How long a first request waits for the first read of a module's .gitreg.toml: a shallow fetch of one
# commit takes well under a second; a host slower than this is answered as declaring nothing for now
# (the read goes on; the next answer has it), so that no request nears Terraform's 10 s.
FIRST_READ_WAIT = 3.0

Key = tuple[str, str]  # (repository, folder in it: "" for the root)


@dataclass(frozen=True)
class _Known:
    head: str
    declaration: Declaration


class ModuleCounts:
    """A counter by module address, with a bounded label set (read by /metrics)."""

    def __init__(self) -> None:
        self.counts: dict[str, int] = {}

    def add(self, address: ModuleAddress) -> None:
        label = str(address)
        if label not in self.counts and len(self.counts) >= MAX_LABELS:
            label = "other"
        self.counts[label] = self.counts.get(label, 0) + 1


class Declarations:
    """The `.gitreg.toml` of every module served, per default-branch commit (see the module docstring)."""

    def __init__(
        self,
        mirrors: MirrorStore,
        path: Path | None,
        files: Executor | None = None,
        retry_seconds: float = 30.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.mirrors = mirrors
        self.files = files
        self.retry_seconds = retry_seconds
        self._clock = clock
        self._known: OrderedDict[Key, _Known] = OrderedDict()
        self._reading: InFlight[Key, Declaration | None] = InFlight()
        self._retry_at: dict[Key, float] = {}
        self._background: set[asyncio.Task[None]] = set()
        self.reads = 0  # files read (or found missing) from a Git host or a mirror
        self.read_failures = 0
        self.deprecated_downloads = ModuleCounts()
        self.revoked_requests = ModuleCounts()
        # Told of each repository whose declaration changed (the versions answers are rendered again).
        self.on_changed: Signal[[str]] = Signal()
        self.state = (
            StateFile(path, _FORMAT, ".declarations-", self._snapshot, unreadable="they are read again", executor=files)
            if path is not None
            else None
        )

    def known(self, repository: str, folder: str, head: str | None) -> Declaration | None:
        """The warm path, no coroutine: the declaration of (repository, folder) when it was read at `head`
        (NOTHING without a head). Else None, and a read is due (see `declaration`)."""
        if head is None:
            return NOTHING
        found = self._known.get((repository, folder))
        return found.declaration if found is not None and found.head == head else None

    async def declaration(self, repository: str, folder: str, head: str | None) -> Declaration:
        """The declaration of (repository, folder) at the default-branch commit `head`.

        Read at `head` when it was not: the caller waits only when nothing was ever read (a first
        request), at most FIRST_READ_WAIT; otherwise the last good declaration answers while the read
        runs in the background.
        """
        found = self.known(repository, folder, head)
        if found is not None or head is None:
            return found or NOTHING
        key = (repository, folder)
        last = self._known.get(key)
        if last is not None:
            self._read_in_background(key, head)
            return last.declaration
        if self._clock() < self._retry_at.get(key, 0.0):
            return NOTHING  # the read failed moments ago: served as declaring nothing until it succeeds
        try:
            read = await asyncio.wait_for(self._reading.wait(self._start(key, head)), FIRST_READ_WAIT)
        except TimeoutError:
            return NOTHING
        return read or NOTHING

    def last(self, repository: str, folder: str, head: str | None) -> Declaration:
        """The declaration as last read, without waiting (pages): when the default branch moved past it
        (`head`), it is read again in the background. NOTHING when none was read yet."""
        key = (repository, folder)
        found = self._known.get(key)
        if head is not None and (found is None or found.head != head):
            self._read_in_background(key, head)
        return NOTHING if found is None else found.declaration

    def folders(self, repository: str) -> set[str]:
        """The folders of `repository` whose declaration was read (a monorepo's modules)."""
        return {folder for repo, folder in self._known if repo == repository}

    def _start(self, key: Key, head: str) -> asyncio.Future[Declaration | None]:
        future = self._reading.get(key)
        if future is None:
            future = self._reading.start(key, self._read(key, head))
        return future

    def _read_in_background(self, key: Key, head: str) -> None:
        if key in self._reading or self._clock() < self._retry_at.get(key, 0.0):
            return

        async def run() -> None:
            await self._reading.wait(self._start(key, head))

        task = background_task(run())
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    async def _read(self, key: Key, head: str) -> Declaration | None:
        """Read the file at `head` and keep what it declares; None (and nothing kept) when the read failed."""
        repository, folder = key
        file_path = file_in(folder)
        self.reads += 1
        try:
            data = await self.mirrors.read_file(repository, head, file_path, MAX_FILE_BYTES)
        except ValueError as e:  # larger than MAX_FILE_BYTES
            declaration = malformed(str(e))
        except GitregError as e:
            self.read_failures += 1
            self._retry_at[key] = self._clock() + self.retry_seconds
            log.warning(
                "could not read %s of %s (kept what was read before): %s", file_path, mask(repository), e.message
            )
            return None
        else:
            # Parsed off the event loop: up to MAX_FILE_BYTES of hostile TOML.
            declaration = NOTHING if data is None else await run_file_work(self.files, parse, data)
        self._retry_at.pop(key, None)
        self._keep(key, head, declaration)
        return declaration

    def _keep(self, key: Key, head: str, declaration: Declaration) -> None:
        previous = self._known.pop(key, None)
        self._known[key] = _Known(head, declaration)
        while len(self._known) > MAX_KEPT:
            self._known.popitem(last=False)
        if self.state is not None:
            self.state.mark_dirty()
        if declaration.problem is not None and (previous is None or previous.declaration != declaration):
            log.warning("%s (%s at %s)", declaration.problem, mask(key[0]), head[:12])
        if previous is None or previous.declaration != declaration:
            self.on_changed.emit(key[0])

    def _snapshot(self) -> Callable[[], str]:
        entries = [[repo, folder, k.head, k.declaration.to_json()] for (repo, folder), k in self._known.items()]

        def encode() -> str:
            return json.dumps({"format": _FORMAT, "entries": entries})

        return encode

    async def load(self) -> None:
        """What an earlier run read (declarations.json), when there is one."""
        if self.state is None:
            return
        data = await self.state.load()
        for entry in (data or {}).get("entries", [])[-MAX_KEPT:]:
            if not (isinstance(entry, list) and len(entry) == 4 and all(isinstance(x, str) for x in entry[:3])):
                continue
            declaration = from_json(entry[3])
            if declaration is not None:
                self._known[(entry[0], entry[1])] = _Known(entry[2], declaration)

    async def settled(self) -> None:
        """Wait until no read is running (tests, benchmarks)."""
        while self._reading:
            await asyncio.gather(*self._reading.futures(), return_exceptions=True)

    async def close(self) -> None:
        """Stop background reads (shutdown)."""
        tasks: list[asyncio.Future[Any]] = [*self._background, *self._reading.futures()]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


def read_now(git: MirrorGit, scratch: Path, repository: str, head: str, folder: str) -> Declaration:
    """The declaration of (repository, folder) at `head`, read at once in a scratch repository at
    `scratch` (which must not exist; it is left for the caller to remove): `gitreg check --probe`.
    Blocking; raises what git met."""
    git.init(str(scratch))
    git.fetch_head(str(scratch), repository, head)
    try:
        data = git.read_file(str(scratch), head, file_in(folder), MAX_FILE_BYTES)
    except ValueError as e:
        return malformed(str(e))
    return NOTHING if data is None else parse(data)


def file_in(folder: str) -> str:
    """The path of `.gitreg.toml` in a module's folder ("" for the repository root)."""
    folder = folder.strip("/")
    return f"{folder}/{FILE_NAME}" if folder else FILE_NAME
