"""The usage scan: every repository the `[[orgs]]` list, its default branch's `.tf` files read, the
`module` blocks that call this registry recorded (store.py).

Incremental: a repository whose push marker is the one it was read at costs nothing (no git
call); one whose marker moved costs an `ls-remote` of its HEAD, and a read only when that commit
moved (an empty marker is treated as moved, and so is one too recent to trust: GitLab moves
`updated_at` at most every few minutes, so a push just after another may leave it as it was).
A read is one shallow clone and two local commands (git/shallow.py) in the git pool at
BACKGROUND priority, at most `concurrency` at a time (the pool's queue is never flooded); files
that name none of `[usage] hosts` are dropped in the pool's thread, the rest parsed in the parse
workers (usage/parse.py) within `[index] parse_seconds`.
What grows with the org (filtering the listing, comparing markers) runs on a thread or in
slices: a pass never holds the event loop (bench/usage_scale.py measures it).

A git failure is not a result: the repository keeps its last entry and is tried again on the next
pass. A file that cannot be parsed (or a parse out of budget) is a result: noted, not retried
until the repository changes.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import shutil
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gitreg.config.model import Config, OrgConfig
from gitreg.core.errors import GitregError
from gitreg.core.urls import mask, origin_label
from gitreg.forges.records import RepoRecord
from gitreg.git.pool import GitPool, Priority
from gitreg.git.shallow import BranchFiles, ShallowReader
from gitreg.index.parse_workers import BudgetExceeded, ParseWorkers, WorkerFailed
from gitreg.orgs.model import git_hosts, link, timestamp, unusable
from gitreg.usage.model import Consumer
from gitreg.usage.parse import consumers_in
from gitreg.usage.store import RepoScan, UsageStore

log = logging.getLogger(__name__)

SLICE = 2000  # listing entries compared per slice of the event loop
# The orgs' listings, per org: (its config, a snapshot of its repository records).
Listings = Callable[[], list[tuple[OrgConfig, list[RepoRecord]]]]


@dataclass(frozen=True)
class Target:
    """One repository to look at: where to fetch it, how to show it, its push marker."""

    repository: str
    full_name: str
    web_url: str
    namespace: str
    marker: str
    # The marker may lag a push (GitLab throttles `updated_at`): asked again (one ls-remote) while recent.
    recent: bool = False


@dataclass
class PassStats:
    """What one pass did."""

    repositories: int = 0
    unchanged: int = 0  # marker unchanged: no git call
    same_commit: int = 0  # marker moved, commit not: one ls-remote
    read: int = 0  # fetched and parsed
    failed: int = 0  # a git failure: tried again next pass
    forgotten: int = 0  # no longer listed


def targets(listings: list[tuple[OrgConfig, list[RepoRecord]]], protocols: tuple[str, ...]) -> list[Target]:
    """Every repository of the listings whose https clone URL gitreg may fetch (on a thread: grows with the org)."""
    found: dict[str, Target] = {}
    now = time.time()
    for org, records in listings:
        hosts = git_hosts(org)
        for rec in records:
            if rec.https_url in found or unusable(rec.https_url, hosts, protocols, "https") is not None:
                continue
            marker = timestamp(rec.pushed_at)
            recent = rec.pushed_throttle > 0 and (marker is None or now - marker < rec.pushed_throttle)
            web = link(rec.web_url)
            found[rec.https_url] = Target(rec.https_url, rec.full_name, web, org.namespace, rec.pushed_at, recent)
    return list(found.values())


def relevant(files: BranchFiles, hosts: Sequence[str]) -> BranchFiles:
    """`files` without those that cannot name a module of `hosts` (in the pool's thread: no parse for them)."""
    needles = [h.lower().encode() for h in hosts]
    kept = {}
    for name, data in files.files.items():
        lowered = data.lower()
        if b"module" in lowered and any(n in lowered for n in needles):
            kept[name] = data
    return dataclasses.replace(files, files=kept)


class UsageScanner:
    """Passes over the orgs' repositories, recording what each one's default branch calls."""

    def __init__(
        self,
        config: Config,
        listings: Listings,
        store: UsageStore,
        pool: GitPool,
        reader: ShallowReader,
        workers: ParseWorkers,
        scratch: Path,
        concurrency: int | None = None,
    ) -> None:
        self.config = config
        self.hosts = config.usage.hosts
        self.listings = listings
        self.store = store
        self.pool = pool
        self.reader = reader
        self.workers = workers
        self.scratch = scratch
        self.concurrency = concurrency or max(1, min(4, config.git.max_concurrency // 2))
        self.last = PassStats()
        self.lock = asyncio.Lock()  # one pass at a time

    async def refresh(self, complete: bool = True) -> PassStats:
        """One pass over every listed repository, in this process; `complete`: the listings are whole,
        so a repository not in them is forgotten."""
        async with self.lock:
            todo, stats = await self.plan(complete)
            await self.scan(todo, stats)
            await self.store.flush()
            self.last = stats
            return stats

    async def plan(self, complete: bool = True) -> tuple[list[Target], PassStats]:
        """The repositories a pass must look at (marker moved, or never read); the rest counted unchanged
        (no git call). With `complete`, a repository no longer listed is forgotten. Hold `lock`."""
        loop = asyncio.get_running_loop()
        found = await loop.run_in_executor(None, targets, self.listings(), self.config.git.protocols)
        stats = PassStats(repositories=len(found))
        todo = []
        for start in range(0, len(found), SLICE):
            for target in found[start : start + SLICE]:
                old = self.store.get(target.repository)
                if old is not None and target.marker and old.marker == target.marker and not target.recent:
                    if (old.full_name, old.web_url) != (target.full_name, target.web_url):
                        self.store.put(dataclasses.replace(old, full_name=target.full_name, web_url=target.web_url))
                    stats.unchanged += 1
                else:
                    todo.append(target)
            await asyncio.sleep(0)
        if complete:
            stats.forgotten = self.store.keep_only(t.repository for t in found)
        return todo, stats

    async def scan(self, todo: list[Target], stats: PassStats) -> None:
        """Read each of `todo` (git, then the parse workers), `concurrency` at a time, into the store."""
        if not todo:
            return
        await asyncio.to_thread(self.scratch.mkdir, parents=True, exist_ok=True)
        queue: asyncio.Queue[Target] = asyncio.Queue()
        for target in todo:
            queue.put_nowait(target)
        await asyncio.gather(*(self._drain(queue, stats) for _ in range(min(self.concurrency, len(todo)))))

    async def _drain(self, queue: asyncio.Queue[Target], stats: PassStats) -> None:
        while not queue.empty():
            target = queue.get_nowait()
            try:
                await self._scan(target, stats)
            except GitregError as e:  # (Overloaded, UpstreamUnavailable, DiskFull...): next pass
                stats.failed += 1
                log.info("usage scan: %s not read (%s); tried again on the next pass", mask(target.repository), e)
            except Exception:  # a bug or the disk: this repository only, the pass goes on
                stats.failed += 1
                log.exception("usage scan: %s not read; tried again on the next pass", mask(target.repository))

    async def _scan(self, target: Target, stats: PassStats) -> None:
        host = origin_label(target.repository)
        old = self.store.get(target.repository)
        if old is not None and old.commit:
            head = await self.pool.run(self.reader.head, target.repository, host=host, priority=Priority.BACKGROUND)
            if head == old.commit:
                self.store.put(dataclasses.replace(old, marker=target.marker, full_name=target.full_name))
                stats.same_commit += 1
                return
        files = await self.pool.run(self._read, target.repository, host=host, priority=Priority.BACKGROUND)
        consumers, notes = await self._parse(target, files)
        entry = RepoScan(
            target.repository,
            target.full_name,
            target.web_url,
            target.namespace,
            target.marker,
            files.commit,
            consumers,
            (*files.notes, *notes),
        )
        self.store.put(entry)
        stats.read += 1

    def _read(self, url: str) -> BranchFiles:
        """Blocking (a pool job): the default branch's `.tf` files that may name this registry."""
        return relevant(self.reader.read(str(self.scratch), url), self.hosts)

    async def _parse(self, target: Target, files: BranchFiles) -> tuple[tuple[Consumer, ...], list[str]]:
        if not files.files:
            return (), []
        request = {"hosts": list(self.hosts), "files": sorted(files.files.items())}
        try:
            async with self.workers.budget(self.config.index.parse_seconds) as call:
                answer: Any = await call(request)
        except BudgetExceeded:
            return (), [f"its .tf files took longer than {self.config.index.parse_seconds:g} s to parse; not read"]
        except (WorkerFailed, OSError) as e:
            return (), [f"its .tf files could not be parsed ({e})"]
        return _consumers(target, answer)

    def clean_scratch(self) -> None:
        """Blocking: remove what a pass cut short left in the scratch directory."""
        shutil.rmtree(self.scratch, ignore_errors=True)


def _consumers(target: Target, answer: Any) -> tuple[tuple[Consumer, ...], list[str]]:
    """The worker's answer, checked (it was computed from hostile input)."""
    if not isinstance(answer, dict) or "error" in answer:
        return (), ["its .tf files could not be parsed (out of memory)"]
    consumers = []
    for item in answer.get("consumers", [])[:10_000]:
        try:
            consumers.append(
                Consumer(
                    target.repository,
                    str(item["file"]),
                    int(item["line"]),
                    str(item["address"]),
                    str(item["constraint"]),
                )
            )
        except (KeyError, TypeError, ValueError):
            continue
    notes = [str(n)[:300] for n in answer.get("notes", [])[:50]]
    return tuple(consumers), notes


# The parse workers' handler for the scan (runs in the worker process).
HANDLER = f"{consumers_in.__module__}:{consumers_in.__name__}"
