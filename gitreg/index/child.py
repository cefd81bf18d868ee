"""The index process's side of the pipe to the serving process (process.py has the serving side).

IndexSide applies what the serving process says (org listing changes, modules to look at again,
tag lists it fetched, details someone asked for, the leader's index, the lease) to the index
process's services; ReportFeed sends what the index changed, at once and then batched every
FEED_SECONDS, with its status at least every HEARTBEAT_SECONDS (the serving process's watchdog
kills a silent index process). The wire forms are protocol.py's.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from dataclasses import asdict

from gitreg.core.errors import GitregError
from gitreg.git.remote import TagList
from gitreg.index.model import ChangeLog, IndexEntry
from gitreg.index.protocol import (
    FEED_SECONDS,
    FEED_TAIL_SECONDS,
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
    encode_report,
)
from gitreg.index.store import ModuleIndex
from gitreg.orgs.service import OrgCatalog
from gitreg.registry.catalog import Catalog
from gitreg.registry.service import Registry
from gitreg.registry.tags import TagCache

log = logging.getLogger(__name__)


class IndexSide:
    """What the serving process's commands do in the index process (to its application's services)."""

    def __init__(
        self,
        seed: Seed,
        index: ModuleIndex,
        catalog: Catalog,
        orgs: OrgCatalog,
        cache: TagCache,
        registry: Registry,
    ) -> None:
        self.seed = seed
        self.index = index
        self.catalog = catalog
        self.orgs = orgs
        self.cache = cache
        self.registry = registry
        self._org_parts: list[OrgsChanged] = []  # a large listing change's parts so far

    def apply(self, command: Command) -> None:
        match command:
            case OrgsChanged(more=True):
                self._org_parts.append(command)
            case OrgsChanged(complete=complete):
                parts, self._org_parts = [*self._org_parts, command], []
                self.orgs.follow([r for p in parts for r in p.repos], [a for p in parts for a in p.gone], complete)
                self.index.notice(sorted({a for p in parts for a in p.concerned}))
            case Remember(address):
                with contextlib.suppress(GitregError):
                    self.catalog.remember(self.registry.resolve(address))
            case TagsFetched(key, tags, objects):
                self.index.read.tag_objects.keep(key, objects)
                self.cache.accept(key, TagList(tags))
            case Want(address, version):
                self.index.want(address, version)
            case Adopt(text):
                self.index.adopt(text)
            case Leading(leading):
                self.seed.leading = leading  # what the index's leading() answers (browse_services)
                log.info("index process: %s", "builds the index" if leading else "another replica builds it")
            case Seed():
                log.warning("index process: a second seed; ignored")


class ReportFeed:
    """Sends the index's changes (at once, then batched every FEED_SECONDS), and its status when it moved."""

    def __init__(self, index: ModuleIndex, out: asyncio.StreamWriter, resync: bool) -> None:
        self.index = index
        self.out = out
        self._written = False
        self._status: Status | None = None
        self._sent = time.monotonic()  # the last report: one at least every HEARTBEAT_SECONDS
        self._fetched: set[str] = set()  # repositories whose tags this process fetched since the last report
        assert index.changes is not None, "browse_services records the index process's changes from its start"
        self.changes: ChangeLog = index.changes
        if resync:
            addresses = index.addresses()  # listed and untagged
            out.write(encode_report(Reset(frozenset(addresses))))
            for address in addresses:
                self.changes.record(address, index.get(address) or index.untagged(address))

    async def written(self, _text: str) -> None:
        """The index wrote index.json (ModuleIndex.on_written): the serving process publishes it
        (with Redis, when it leads); said at once."""
        self._written = True
        self.changes.ready.set()

    async def run(self) -> None:
        while True:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.changes.ready.wait(), FEED_SECONDS)  # else: the status may have moved
            # Changes went: the next ones wait, to go in one batch FEED_SECONDS later; FEED_TAIL_SECONDS
            # once no module waits to be listed (a listing's last modules are not held back: #33). A
            # status alone holds nothing back.
            if await self.send():
                await asyncio.sleep(FEED_SECONDS if self.index.listing_queued() else FEED_TAIL_SECONDS)

    def fetched(self, key: str) -> None:
        """This process's tag cache fetched new tags of `key` (TagCache.on_fetched): its annotated tags'
        objects go to the serving process with the next report, before the entries made from them."""
        self._fetched.add(key)
        self.changes.ready.set()

    async def send(self) -> bool:
        """Send what changed since the last report, and the status when it moved (or is due as the
        heartbeat); whether anything but the status went."""
        changes, forgotten = self.changes.take()
        reports: list[Report] = [
            EntrySet(entry)
            if isinstance(entry, IndexEntry)
            else UntaggedSet(address, entry)
            if entry is not None
            else EntryDropped(address)
            for address, entry in changes.items()
        ]
        fetched, self._fetched = sorted(self._fetched), set()
        known = self.index.read.tag_objects
        reports[:0] = [TagObjectsKnown(key, objects) for key in fetched if (objects := known.of(key))]
        reports += [Forgotten(address) for address in forgotten]
        if self._written:
            self._written = False
            reports.append(Written())
        index = self.index
        status = Status(index.complete, index.queue_depth(), asdict(index.stats))
        changed = bool(reports)
        if status != self._status or reports or time.monotonic() - self._sent >= HEARTBEAT_SECONDS:
            self._status = status  # unchanged, it is the heartbeat the serving process watches
            reports.append(status)
        if reports:
            self._sent = time.monotonic()
            self.out.write(b"".join(encode_report(report) for report in reports))
            await self.out.drain()
        return changed
