"""Bare mirrors of served repositories under `[storage] path`, for archives and module details.

A mirror is created in a temporary directory and renamed into place only when its first
fetch succeeded, so a crash never leaves a half-made mirror that looks complete. It is
fetched again only when a commit we need is missing (the tag list changed). A failed clone or
fetch is remembered for `[cache] error_retry_seconds`, like a failed `ls-remote`: requests in
that window get the same answer without another transfer.

Mirrors count against `[storage] max_bytes` together with the archives (see `budget`); a
mirror in use (held: a fetch, an archive build, module details reading it) is never removed.
A removed mirror is first renamed to `tmp-*`, so a crash in the middle of deleting it never
leaves a half-deleted mirror under its real name.

Moved tags: each commit gitreg pinned for a tag (`pins`) has a ref in the mirror,
`refs/gitreg/pins/<sha>`, kept by `MirrorGit.set_pin_refs` before and after each fetch (see
`gitreg.git.mirror`): a pinned commit stays reachable after its tag moved upstream.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
import os
import shutil
import time
import uuid
from collections.abc import AsyncIterator, Callable, Collection, Mapping
from concurrent.futures import Executor
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypeVar

from gitreg.core.errors import DISK_FULL, DiskFull, GitregError, StorageFull, disk_full
from gitreg.core.flight import InFlight, Remembered
from gitreg.core.urls import mask, origin_label
from gitreg.git.mirror import MirrorGit
from gitreg.git.pool import GitPool
from gitreg.storage.budget import StorageBudget, mib
from gitreg.storage.files import run_file_work, tree_bytes

log = logging.getLogger(__name__)
T = TypeVar("T")

# Remembered failures are per repository URL; beyond this many, the oldest are forgotten.
MAX_REMEMBERED = 10_000


@dataclass
class _UrlLock:
    """A per-URL lock that is dropped from the table when nobody holds or waits for it."""

    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    users: int = 0


class MirrorStore:
    """One bare mirror per repository URL, created and updated under a per-URL lock."""

    def __init__(
        self,
        root: Path,
        git: MirrorGit,
        pool: GitPool,
        files: Executor | None = None,
        budget: StorageBudget | None = None,
        error_retry_seconds: float = 0.0,
        pinned: Callable[[str], Collection[str]] | None = None,
        clock: Callable[[], float] = time.monotonic,
        scratch_only: bool = False,
    ) -> None:
        self.root = root
        self.git = git
        self.pool = pool
        self.files = files
        # Without a budget (a tool, a test of one piece) nothing is ever removed.
        self.budget = budget if budget is not None else StorageBudget(1 << 62)
        self.pinned = pinned or (lambda url: ())
        self._locks: dict[str, _UrlLock] = {}
        self._failures: Remembered[str, GitregError] = Remembered(error_retry_seconds, MAX_REMEMBERED, clock)
        self.fetches = 0  # fetches of trees (mirrors, scratch fetches for details and files)
        # The index process reads commits from scratch fetches only: the mirrors are the serving
        # process's (its per-URL locks, its [storage] max_bytes budget and eviction).
        self.scratch_only = scratch_only
        # What an earlier run left, from prepare() until scan() went through it: temp
        # directories (a clone or a removal cut short) and mirrors not yet cleaned up.
        self._leftovers: list[str] = []
        self._mirrors: list[str] = []
        self._unchecked: set[str] = set()
        self._checking: InFlight[str, tuple[int, float] | None] = InFlight()
        self.scanned = asyncio.Event()  # set once scan() counted every mirror in the budget

    async def prepare(self) -> None:
        """Create the directory and list what an earlier run left (one directory read: start is not held up).

        The slow part, cleaning up and measuring each mirror, is scan()'s, in the background. The
        mirrors found are held until then: none is evicted before its size is known.
        """
        self._leftovers, self._mirrors = await self._call(self._list)
        self._unchecked = set(self._mirrors)
        for key in self._mirrors:
            self.budget.hold(key)

    def _list(self) -> tuple[list[str], list[str]]:
        self.root.mkdir(parents=True, exist_ok=True)
        leftovers, mirrors = [], []
        with os.scandir(self.root) as entries:
            for entry in entries:
                if entry.name.startswith("tmp-"):
                    leftovers.append(entry.path)
                elif entry.name.endswith(".git"):
                    mirrors.append(entry.path)
        return leftovers, mirrors

    async def scan(self) -> None:
        """After start, in the background: remove what a crash left, count the mirrors in the budget, evict.

        Only what prepare() listed: a temp directory or mirror this run made is not touched. A
        mirror a request needs before the scan reached it is cleaned up first (see hold()).
        """
        leftovers, mirrors = self._leftovers, self._mirrors
        self._leftovers, self._mirrors = [], []
        try:
            for path in leftovers:
                await self._call(_remove_tree, path)
            found = []
            for key in mirrors:
                measured = await self._checked(key)
                if measured is None:  # a request had it cleaned already: measure only
                    measured = await self._call(_mirror_size, key)
                if measured is not None:
                    found.append((key, *measured, "mirror", self._remove))
            # Those made or fetched meanwhile are in the budget already, measured then: counted once.
            self.budget.seed(found)
        except Exception:
            # What is counted still stays under the bound. (Not on a cancel: that is shutdown, no evicting then.)
            self.budget.release_all(mirrors)
            raise
        self.budget.release_all(mirrors)
        self.scanned.set()
        await self.budget.evict()

    async def _checked(self, key: str) -> tuple[int, float] | None:
        """Clean up the mirror at `key` if this run has not yet: stale locks and half-written packs go
        before any git runs in it. Its (size, mtime) when this call cleaned it, else None."""
        task = self._checking.get(key)
        if task is None:
            if key not in self._unchecked:
                return None
            self._unchecked.discard(key)
            task = self._checking.start(key, self._call(_clean_mirror, key))
        # Shielded: a request that gives up must not leave a half-cleaned mirror for the next one.
        return await self._checking.wait(task)

    def path_for(self, url: str) -> Path:
        """Where the mirror of `url` lives (a hash: URLs are not file names)."""
        return self.root / (hashlib.sha256(url.encode()).hexdigest()[:40] + ".git")

    async def _call(self, fn: Callable[..., T], *args: object) -> T:
        """Blocking file work (sizes, renames, removals): the app's file executor, never a git slot."""
        return await run_file_work(self.files, fn, *args)

    async def _git(self, url: str, fn: Callable[..., T], *args: object) -> T:
        """Blocking git work for `url`'s mirror: through the git pool, under `url`'s host limit.

        A full disk is a DiskFull naming the storage path, whether git or gitreg met it.
        """
        try:
            return await self.pool.run(fn, *args, host=origin_label(url))
        except DiskFull:
            raise disk_full(self.root.parent, f"the mirror of {mask(url)}") from None
        except OSError as e:
            if e.errno not in DISK_FULL:
                raise
            raise disk_full(self.root.parent, f"the mirror of {mask(url)}") from None

    @contextlib.asynccontextmanager
    async def hold(self, url: str) -> AsyncIterator[Path]:
        """The path of `url`'s mirror (it may not exist yet), kept from eviction inside the block."""
        path = self.path_for(url)
        key = str(path)
        self.budget.hold(key)
        try:
            if self._unchecked or self._checking:
                await self._checked(key)  # from before this start, and the scan has not reached it yet
            await self.budget.settled(key)  # an eviction that started before us finishes first
            self.budget.touch(key)
            yield path
        finally:
            self.budget.release(key)

    @contextlib.asynccontextmanager
    async def use(self, url: str, sha: str) -> AsyncIterator[Path]:
        """The mirror of `url`, holding commit `sha`, kept from eviction inside the block."""
        async with self.hold(url):
            yield await self.ensure(url, sha)

    @contextlib.asynccontextmanager
    async def snapshot(self, url: str, tag: str, sha: str, mirror: bool = False) -> AsyncIterator[Path]:
        """A repository holding commit `sha` (tag `tag` of `url`) to read files from, inside the block.

        `url`'s mirror when gitreg keeps one, or must (`mirror`: the module is served as
        archives, which are built from it); otherwise a shallow fetch of that one tag into a
        scratch repository, removed after the block: module details need one commit's files, not
        the whole history on disk (an org of thousands of repositories would otherwise be
        mirrored in full just to be described).
        """
        if not self.scratch_only and (mirror or self.path_for(url).is_dir()):
            async with self.use(url, sha) as kept:
                yield kept
            return
        self._raise_remembered(url)
        self.fetches += 1
        tmp = self.root / f"tmp-{uuid.uuid4().hex}"
        try:
            await self._git(url, self.git.init, str(tmp))
            await self._fetch(tmp, url, (tag, sha))
            self._check_fits(url, await self._call(tree_bytes, str(tmp)))
            yield tmp
        finally:
            await self._call(_remove_tree, str(tmp))

    async def known_tag_dates(self, url: str) -> dict[str, str] | None:
        """Tag name -> ISO 8601 date of every tag the mirror of `url` holds; {} with no mirror (a page
        asks: nothing is fetched), None when it could not be read now (busy, being replaced)."""
        path = self.path_for(url)
        if self.scratch_only or not path.is_dir():
            return {}
        try:
            return await self._git(url, self.git.tag_dates, str(path))
        except (GitregError, OSError):
            return None

    async def fetched_tag_dates(self, url: str, tags: Mapping[str, str]) -> dict[str, str]:
        """Tag name -> ISO 8601 date of `tags` (tag -> commit SHA) of `url`, read from the host in one
        fetch of their tag objects and commits, no files, into a scratch repository removed after.
        Raises what the fetch met; a failure is not remembered (nothing but a page's dates waits on it)."""
        self._raise_remembered(url)  # a clone or fetch failed moments ago: not asked again yet
        tmp = self.root / f"tmp-{uuid.uuid4().hex}"
        try:
            await self._git(url, self.git.init, str(tmp))
            return await self._git(url, self.git.fetch_tag_dates, str(tmp), url, tags)
        finally:
            await self._call(_remove_tree, str(tmp))

    async def read_file(self, url: str, sha: str, file_path: str, limit: int) -> bytes | None:
        """The file `file_path` of commit `sha` of `url` (None: no such file), from a shallow fetch of that
        one commit (by object name) into a scratch repository, removed after. ValueError when the file
        is larger than `limit`. Failures are not remembered here: the caller keeps what it read last
        and asks again later. (Not from a mirror: a mirror holds tags, and the default branch's commit
        is rarely one; nor does it count in `fetches`, the trees fetched for archives and details.)"""
        self._raise_remembered(url)
        tmp = self.root / f"tmp-{uuid.uuid4().hex}"
        try:
            await self._git(url, self.git.init, str(tmp))
            await self._git(url, self.git.fetch_head, str(tmp), url, sha)
            return await self._git(url, self.git.read_file, str(tmp), sha, file_path, limit)
        finally:
            await self._call(_remove_tree, str(tmp))

    async def ensure(self, url: str, sha: str) -> Path:
        """The mirror of `url`, holding commit `sha` (cloned or fetched as needed). Call it inside hold()."""
        path = self.path_for(url)
        if path.is_dir() and await self._git(url, self.git.has_commit, str(path), sha):
            return path
        async with self._locked(url):
            if path.is_dir():
                if not await self._git(url, self.git.has_commit, str(path), sha):
                    self._raise_remembered(url)
                    log.info("fetching tags of %s into its mirror", mask(url))
                    self.fetches += 1
                    # Pins first: the fetch prunes and moves tags, and a pinned commit must keep a ref.
                    await self._sync_pins(path, url)
                    await self._fetch(path, url)
                    await self._sync_pins(path, url)
                    size = await self._call(tree_bytes, str(path))
                    self.budget.add(str(path), size, "mirror", self._remove)
                    self._check_fits(url, size)
                    await self.budget.evict()
            else:
                self._raise_remembered(url)
                log.info("creating a mirror of %s", mask(url))
                self.fetches += 1
                tmp = self.root / f"tmp-{uuid.uuid4().hex}"
                try:
                    await self._git(url, self.git.init, str(tmp))
                    await self._fetch(tmp, url)
                    await self._sync_pins(tmp, url)
                    size = await self._call(tree_bytes, str(tmp))
                    self._check_fits(url, size)
                    await self._call(os.replace, tmp, path)
                finally:
                    await self._call(_remove_tree, str(tmp))
                self.budget.add(str(path), size, "mirror", self._remove)
                await self.budget.evict()
        return path

    @contextlib.asynccontextmanager
    async def _locked(self, url: str) -> AsyncIterator[None]:
        entry = self._locks.get(url)
        if entry is None:
            entry = self._locks[url] = _UrlLock()
        entry.users += 1
        try:
            async with entry.lock:
                yield
        finally:
            entry.users -= 1
            if entry.users == 0:
                del self._locks[url]  # nobody holds or waits for it: the table does not grow forever

    def _check_fits(self, url: str, size: int) -> None:
        if size > self.budget.max_bytes:
            error = StorageFull(
                f"the mirror of {mask(url)} takes {mib(size)}, more than [storage] max_bytes "
                f"({mib(self.budget.max_bytes)}) by itself; raise max_bytes to serve this repository as archives"
            )
            log.warning("%s", error.message)
            self._failures.remember(url, error)
            raise error

    async def _fetch(self, path: Path, url: str, tagged: tuple[str, str] | None = None) -> None:
        """Fetch `url`'s tags (or one (tag, commit) alone, shallow) into the repository at `path`; a
        failure is remembered for error_retry_seconds."""
        try:
            if tagged is None:
                await self._git(url, self.git.fetch_tags, str(path), url)
            else:
                await self._git(url, self.git.fetch_tag, str(path), url, *tagged)
        except DiskFull:
            raise  # not remembered: serving recovers as soon as space is freed
        except GitregError as e:
            self._failures.remember(url, e)
            raise

    def _raise_remembered(self, url: str) -> None:
        """The answer of a clone or fetch that failed moments ago, without another transfer."""
        error = self._failures.recall(url)
        if error is not None:
            raise error

    async def _sync_pins(self, path: Path, url: str) -> None:
        """Make the mirror's refs/gitreg/pins/* the commits pinned for `url` (see `pins`)."""
        try:
            await self._git(url, self.git.set_pin_refs, str(path), frozenset(self.pinned(url)))
        except Exception as e:  # noqa: BLE001 - serving goes on; only a moved tag's old commit is at risk
            log.warning("could not update the pinned-commit refs of the mirror of %s: %s", mask(url), e)

    async def _remove(self, path: str) -> None:
        """Evict one mirror: renamed to tmp-* at once (never half-deleted under its name), then deleted."""
        await self._call(_discard, path, str(self.root / f"tmp-{uuid.uuid4().hex}"))


def _clean_mirror(path: str) -> tuple[int, float] | None:
    """Remove what a killed git left in a mirror; its (size, mtime) after that, None when it is gone.

    Stale `*.lock` files (they would block the next fetch) and a killed fetch's half-written
    pack or loose object (never referenced, only disk used). One walk does both. Blocking.
    """
    objects = os.path.join(path, "objects")
    pack = os.path.join(objects, "pack")
    total = 0
    for top, _dirs, files in os.walk(path):
        loose = os.path.dirname(top) == objects and len(os.path.basename(top)) == 2
        for name in files:
            full = os.path.join(top, name)
            with contextlib.suppress(OSError):  # removed meanwhile
                if (
                    name.endswith(".lock")
                    or (top == pack and name.startswith("tmp_"))
                    or (loose and name.startswith("tmp_obj_"))
                ):
                    os.unlink(full)
                else:
                    total += os.lstat(full).st_size
    return _with_mtime(path, total)


def _mirror_size(path: str) -> tuple[int, float] | None:
    """A mirror's (size, mtime), None when it is gone. Blocking."""
    return _with_mtime(path, tree_bytes(path))


def _with_mtime(path: str, size: int) -> tuple[int, float] | None:
    try:
        return size, os.stat(path).st_mtime
    except OSError:
        return None


def _remove_tree(path: str) -> None:
    if os.path.exists(path):
        shutil.rmtree(path, ignore_errors=True)


def _discard(path: str, trash: str) -> None:
    try:
        os.replace(path, trash)
    except FileNotFoundError:
        return
    shutil.rmtree(trash, ignore_errors=True)
