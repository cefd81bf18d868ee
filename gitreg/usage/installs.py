"""Observed installs: each `download` answered to a CI job that showed an OIDC token, kept 90 days.

What is counted is the download answer (`.../{version}/download`): what `terraform init` and
`tofu init` ask once per module version they install. The archive fetch that may follow is not
counted again (it is one install, and Terraform fetches it without the job's token).

A download only changes memory (`record`: a dict update, no I/O): the installs are written to
`<[storage] path>/installs.json` in batches (a `StateFile`, every FLUSH_SECONDS and at shutdown,
off the event loop) and, with `[cache] backend = "redis"`, sent to the other replicas every
SHARE_SECONDS (replicas/installs.py); a page or API answer reads a module's shared installs at
most every READ_SECONDS. Hostile callers are bounded: one entry per (project, version) of a module
(the newest time kept), at most MAX_PER_MODULE per module (the oldest dropped), none older than
KEEP_SECONDS. What the file and Redis hold is checked as it is read (replicas.installs.checked_row).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import logging
import time
from collections.abc import AsyncIterator, Callable, Iterable
from pathlib import Path
from typing import Any

from gitreg.core.names import ModuleAddress
from gitreg.replicas.connection import RedisDown
from gitreg.replicas.installs import Row, SharedInstalls, checked_row
from gitreg.storage.state import StateFile
from gitreg.usage.model import Install

log = logging.getLogger(__name__)

FILE_NAME = "installs.json"
FORMAT = 1
KEEP_SECONDS = 90 * 86_400.0
MAX_PER_MODULE = 1_000
FLUSH_SECONDS = 5.0
SHARE_SECONDS = 1.0
READ_SECONDS = 2.0
_TMP_PREFIX = ".installs-"  # temp files of write_atomically (`.installs-*.tmp`)
# Recorded times may run ahead of this replica's clock by this much (another replica's clock).
_AHEAD_SECONDS = 86_400.0

Key = tuple[str, str]  # (project, version): one entry per project and version of a module


class Installs:
    """The observed installs of every module; touched from the event loop only.

    `shared`: the other replicas' installs (None: this replica alone); `clock`: Unix time.
    """

    def __init__(self, path: Path, shared: SharedInstalls | None, clock: Callable[[], float] = time.time) -> None:
        self._shared = shared
        self._clock = clock
        # address -> (project, version) -> install, oldest first (insertion order follows time).
        self._modules: dict[str, dict[Key, Install]] = {}
        self._pending: dict[str, dict[Key, Install]] = {}  # recorded here, not in Redis yet
        self._read_at: dict[str, float] = {}  # when each module's shared installs were last read
        self.state = StateFile(
            path, FORMAT, _TMP_PREFIX, self._snapshot, unreadable="starting with no observed installs", durable=False
        )

    def record(self, project: str, repository: str | None, address: ModuleAddress | str, version: str) -> None:
        """One install of `address` `version` by CI project `project` now (memory only: no I/O)."""
        name = str(address)
        version = version.removeprefix("v")  # `v1.2.3` is the version `1.2.3` (as the download answer finds it)
        install = Install(project, repository, name, version, self._clock())
        key = (project, version)
        module = self._modules.setdefault(name, {})
        module.pop(key, None)  # moved to the end: the newest
        module[key] = install
        if len(module) > MAX_PER_MODULE:
            del module[next(iter(module))]
        self.state.mark_dirty()
        if self._shared is not None:
            self._pending.setdefault(name, {})[key] = install

    def of(self, address: ModuleAddress | str) -> list[Install]:
        """The installs of `address` of the last KEEP_SECONDS, newest first (as this replica knows them)."""
        module = self._modules.get(str(address))
        if not module:
            return []
        oldest = self._clock() - KEEP_SECONDS
        return sorted((i for i in module.values() if i.at >= oldest), key=lambda i: i.at, reverse=True)

    async def current(self, address: ModuleAddress | str) -> list[Install]:
        """`of(address)`, after reading the other replicas' installs of it (at most every READ_SECONDS;
        Redis down: this replica's own)."""
        name = str(address)
        now = self._clock()
        last = self._read_at.get(name)
        if self._shared is not None and (last is None or not 0 <= now - last < READ_SECONDS):
            self._read_at[name] = now
            with contextlib.suppress(RedisDown):
                self._merge(name, await self._shared.read(name, KEEP_SECONDS, MAX_PER_MODULE, now))
        return self.of(name)

    def _merge(self, name: str, rows: Iterable[Row]) -> None:
        """Take installs of `name` read elsewhere (Redis, the file): the newest time per key, bounded."""
        module = dict(self._modules.get(name, {}))
        changed = False
        for project, repository, version, at in rows:
            key = (project, version)
            held = module.get(key)
            if held is None or held.at < at:
                module[key] = Install(project, repository, name, version, at)
                changed = True
        if not changed:
            return
        newest = sorted(module.items(), key=lambda item: item[1].at)[-MAX_PER_MODULE:]
        self._modules[name] = dict(newest)
        self.state.mark_dirty()

    def reconnected(self) -> None:
        """Redis is back (it may have lost everything): every install kept here is sent again."""
        if self._shared is not None:
            self._pending = {name: dict(module) for name, module in self._modules.items() if module}
            self._read_at.clear()

    async def _share(self) -> None:
        """Send what was recorded here to Redis (kept for the next time when it is down)."""
        if self._shared is None or not self._pending:
            return
        pending, self._pending = self._pending, {}
        rows = {name: [_row_of(i) for i in found.values()] for name, found in pending.items()}
        try:
            await self._shared.add(rows, KEEP_SECONDS, MAX_PER_MODULE, self._clock())
        except RedisDown:
            for name, found in pending.items():  # not sent: next time (newer ones recorded meanwhile win)
                newer = self._pending.setdefault(name, {})
                for key, install in found.items():
                    newer.setdefault(key, install)

    async def _sharing(self) -> None:
        while True:
            await asyncio.sleep(SHARE_SECONDS)
            await self._share()

    def _expire(self) -> None:
        """Forget what is older than KEEP_SECONDS (before each write of the file)."""
        oldest = self._clock() - KEEP_SECONDS
        for name in list(self._modules):
            module = self._modules[name]
            if any(i.at < oldest for i in module.values()):
                kept = {k: i for k, i in module.items() if i.at >= oldest}
                if kept:
                    self._modules[name] = kept
                else:
                    del self._modules[name]

    def _take(self, data: dict[str, Any] | None) -> None:
        """Take what installs.json holds (None: nothing); checked, it may be damaged or edited by hand."""
        modules = data.get("installs") if data is not None else None
        if not isinstance(modules, dict):
            return
        now = self._clock()
        for name, rows in modules.items():
            if isinstance(name, str) and isinstance(rows, list):
                self._merge(name, _rows(rows, now - KEEP_SECONDS, now + _AHEAD_SECONDS))
        self.state.dirty = False  # (what was just read is what the file holds)

    def _snapshot(self) -> Callable[[], str]:
        """What installs.json is to hold now (copied on the event loop); its encoder (run off it)."""
        self._expire()
        data = {
            "format": FORMAT,
            "installs": {
                name: [list(_row_of(i)) for i in module.values()] for name, module in sorted(self._modules.items())
            },
        }
        return functools.partial(json.dumps, data, separators=(",", ":"))

    async def lifetime(self) -> AsyncIterator[None]:
        """Load, write and share in the background while the app runs; once more of each at shutdown."""
        self._take(await self.state.load())
        sharing = asyncio.ensure_future(self._sharing()) if self._shared is not None else None
        try:
            async with self.state.flushing(FLUSH_SECONDS):
                yield
        finally:
            if sharing is not None:
                sharing.cancel()
                await asyncio.gather(sharing, return_exceptions=True)
                await self._share()


def _row_of(install: Install) -> Row:
    return install.project, install.repository, install.version, install.at


def _rows(items: list[Any], oldest: float, newest: float) -> Iterable[Row]:
    """The rows of installs.json's list for one module that gitreg could have written."""
    for item in items:
        if isinstance(item, list) and len(item) == 4:
            row = checked_row(item[0], item[1], item[2], item[3], oldest, newest)
            if row is not None:
                yield row
