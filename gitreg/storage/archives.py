"""Archive mode: a module version as a .tar.gz that gitreg builds from its own mirror and serves.

An archive is keyed by (repository, subdirectory, commit SHA), a `ContentKey`: its content never changes,
so it is built once. The module's files sit at the archive root (`git archive <sha>:<path>`).
Archives are byte-for-byte reproducible: every entry gets one fixed time (git would stamp a
tree with the current time) and the gzip header carries no time or name. A build is written
to `tmp-*` and renamed into place with `os.replace` only when complete, so a crash never leaves
something that is served; leftovers are removed at start.

Archives and mirrors share `[storage] max_bytes` (`budget`), least recently used first. A
build stops as soon as its output passes the bound (an archive that can never be kept is
refused with 507, and the refusal is remembered: the bytes of a key never change). An archive
is held while its response is sent (`hold`/`release`), so eviction never deletes one that was
just handed out for serving.
"""

from __future__ import annotations

import asyncio
import contextlib
import gzip
import hashlib
import logging
import math
import os
import shutil
import uuid
from collections.abc import Callable
from concurrent.futures import Executor
from pathlib import Path
from typing import BinaryIO, TypeVar, cast

from gitreg.core.content import ContentKey
from gitreg.core.errors import (
    DISK_FULL,
    DiskFull,
    GitregError,
    StorageFull,
    UpstreamUnavailable,
    VersionNotFound,
    disk_full,
)
from gitreg.core.flight import InFlight, Remembered
from gitreg.core.urls import mask, origin_label
from gitreg.git.mirror import MirrorGit, NoSuchTree
from gitreg.git.pool import GitPool
from gitreg.storage.budget import mib
from gitreg.storage.files import run_file_work
from gitreg.storage.mirrors import MirrorStore

log = logging.getLogger(__name__)
T = TypeVar("T")

# zlib's default level, the one `gzip` and `git archive --format=tar.gz` use.
GZIP_LEVEL = 6
# Refused keys remembered (an archive too large for [storage] max_bytes stays too large).
MAX_REFUSED = 1024


class NotArchivable(GitregError):
    """The module's tree cannot be shipped as an archive (it has submodules)."""

    status = 409


class MissingCommit(Exception):
    """The mirror does not hold the commit (yet)."""


class _TooLarge(Exception):
    """A build's output passed its size limit."""


class _Limited:
    """The archive file being written, refusing to grow past `limit` bytes."""

    def __init__(self, out: BinaryIO, limit: int | None) -> None:
        self.out = out
        self.limit = limit
        self.size = 0

    def write(self, data: bytes) -> int:
        self.size += len(data)
        if self.limit is not None and self.size > self.limit:
            raise _TooLarge
        return self.out.write(data)

    def flush(self) -> None:
        self.out.flush()


class ArchiveBuilder:
    """The git side of a build, run in the executor: checks, `git archive`, normalization."""

    def __init__(self, git: MirrorGit) -> None:
        self.git = git

    def build(self, mirror: Path, key: ContentKey, dest: Path, max_bytes: int | None = None) -> None:
        """Write the archive of `key` from `mirror` to `dest` (a temporary name the caller renames).

        One git process: `git archive <sha>:<path>` puts the module's files at the root. Its
        tar is restamped (see normalize) and gzipped as git writes it, so git and gzip run
        side by side, as in `git archive | gzip`. Past `max_bytes` of output git is stopped
        and StorageFull raised: such an archive could never be kept.
        """
        try:
            with open(dest, "wb") as out:
                limited = cast(BinaryIO, _Limited(out, max_bytes))
                submodules = self.git.archive(str(mirror), key.sha, key.path, lambda tar: normalize(tar, limited))
        except _TooLarge:
            assert max_bytes is not None
            raise StorageFull(
                f"the archive of commit {key.sha[:12]}{f' ({key.path})' if key.path else ''} is larger than "
                f'[storage] max_bytes ({mib(max_bytes)}); raise max_bytes, or serve this module with download = "git"'
            ) from None
        except NoSuchTree as e:
            if e.commit_missing:
                raise MissingCommit(key.sha) from None  # not fetched yet: the caller fetches and retries
            raise VersionNotFound(
                f"commit {key.sha[:12]} has no directory {key.path!r}: check the rule's `path`"
            ) from None
        if submodules:
            shown = ", ".join(repr(f"{key.path}/{s}" if key.path else s) for s in submodules[:5])
            raise NotArchivable(
                f"the module at commit {key.sha[:12]} contains Git submodules ({shown}), which an archive cannot "
                'include; serve it with download = "git" (clients then need access to the submodules too)'
            )


# Every entry gets this time (1980-01-01, as reproducible builds use): the bytes of an archive
# then depend only on the tree. (git stamps a tree archive with the current time.)
FIXED_MTIME = 315532800
_BLOCK = 512


def normalize(tar_in: BinaryIO, out: BinaryIO, mtime: int = FIXED_MTIME) -> list[str]:
    """Gzip `git archive`'s tar with every header's mtime set to `mtime`; the submodules found.

    One streaming pass over the headers (file data is copied untouched), so it costs little
    more than gzip itself. The gzip header carries no time or name: same tree, same bytes.
    A submodule is an empty directory entry in `git archive`'s output (git trees never hold
    empty directories): those are returned so the caller can refuse the archive.
    """
    stamp = b"%011o\0" % mtime
    submodules: list[str] = []
    open_dir: str | None = None
    long_name: str | None = None  # from a pax header: the next entry's real path
    with gzip.GzipFile(filename="", mode="wb", fileobj=out, mtime=0, compresslevel=GZIP_LEVEL) as gz:
        while True:
            header = tar_in.read(_BLOCK)
            if len(header) < _BLOCK or header == b"\0" * _BLOCK:
                gz.write(header)
                shutil.copyfileobj(tar_in, gz)  # the end-of-archive blocks
                break
            typeflag = header[156:157]
            size = _octal(header[124:136])
            padded = -(-size // _BLOCK) * _BLOCK
            data = b""
            if typeflag == b"x" and size <= 1 << 20:
                data = tar_in.read(padded)
                long_name = _pax_path(data[:size])
            elif typeflag != b"g":
                if long_name is not None:
                    name, long_name = long_name, None
                else:
                    prefix = header[345:500].rstrip(b"\0")
                    name = ((prefix + b"/" if prefix else b"") + header[0:100].rstrip(b"\0")).decode("utf-8", "replace")
                if typeflag == b"5" and not name.endswith("/"):
                    name += "/"
                if open_dir is not None and not name.startswith(open_dir):
                    submodules.append(open_dir.rstrip("/"))
                open_dir = name if typeflag == b"5" else None
            header = header[:136] + stamp + b" " * 8 + header[156:]
            checksum = sum(header)
            gz.write(header[:148] + b"%06o\0 " % checksum + header[156:])
            if data:
                gz.write(data)
                continue
            remaining = padded
            while remaining:
                chunk = tar_in.read(min(remaining, 1 << 20))
                if not chunk:
                    raise UpstreamUnavailable("git archive's output ended early")
                gz.write(chunk)
                remaining -= len(chunk)
    if open_dir is not None:
        submodules.append(open_dir.rstrip("/"))
    return submodules


class _Digest:
    """A write-only file that hashes what is written (SHA-256)."""

    def __init__(self) -> None:
        self.hash = hashlib.sha256()

    def write(self, data: bytes) -> int:
        self.hash.update(data)
        return len(data)

    def flush(self) -> None:
        pass


def archive_digest(tar: BinaryIO) -> str | None:
    """The SHA-256 of the archive ArchiveBuilder makes from `git archive`'s tar `tar` (the same bytes:
    normalize is all that differs from git's output); None when it holds submodules (not archivable).
    Lets the details read, which runs that very `git archive`, say the archive's sha256 without a build."""
    digest = _Digest()
    if normalize(tar, cast(BinaryIO, digest)):
        return None
    return digest.hash.hexdigest()


def _pax_path(records: bytes) -> str | None:
    """The `path` of a pax extended header ("<len> path=<value>\\n" records)."""
    for line in records.split(b"\n"):
        _, _, record = line.partition(b" ")
        key, sep, value = record.partition(b"=")
        if sep and key == b"path":
            return value.decode("utf-8", "replace")
    return None


def _octal(field: bytes) -> int:
    if field[:1] == b"\x80":  # base-256, for sizes over 8 GiB
        return int.from_bytes(field[1:], "big")
    text = field.rstrip(b"\0 ").strip()
    return int(text, 8) if text else 0


class ArchiveStore:
    """Archives on disk under the storage bound, built once per key even under concurrent requests."""

    def __init__(
        self,
        root: Path,
        mirrors: MirrorStore,
        builder: ArchiveBuilder,
        pool: GitPool,
        max_bytes: int,
        files: Executor | None = None,
    ) -> None:
        self.root = root
        self.mirrors = mirrors
        self.builder = builder
        self.pool = pool
        self.files = files
        self.max_bytes = max_bytes  # the largest archive kept (the whole [storage] bound)
        self.budget = mirrors.budget  # shared with the mirrors: one [storage] max_bytes
        self._building: InFlight[ContentKey, Path] = InFlight(self._built)
        # For good (math.inf): a key's bytes never change, so an archive too large stays too large.
        self._refused: Remembered[ContentKey, StorageFull] = Remembered(math.inf, MAX_REFUSED)
        self._checksums: dict[str, str] = {}  # file name -> SHA-256 hex of the archive as built (or first read)
        self._prefix = f"{root}{os.sep}"
        self.builds = 0

    async def prepare(self) -> None:
        """Create the directory, remove half-written builds, and count what is there in the budget.

        One directory read and a stat per archive: done before the port opens (an archive the
        budget does not know would be built again). Eviction waits for the mirrors' scan
        (MirrorStore.scan): least recently used first needs the sizes of both.
        """
        found = await self._call(self._scan)
        self.budget.seed((self._prefix + name, size, used, "archive", self._remove) for name, size, used in found)

    def _scan(self) -> list[tuple[str, int, float]]:
        self.root.mkdir(parents=True, exist_ok=True)
        found = []
        for entry in self.root.iterdir():
            if entry.name.startswith("tmp-") or not entry.name.endswith(".tar.gz"):
                entry.unlink(missing_ok=True)  # a build cut short: never served
                continue
            st = entry.stat()
            found.append((entry.name, st.st_size, st.st_atime))
        return found

    @property
    def total_bytes(self) -> int:
        """Bytes of archives on disk."""
        return self.budget.usage("archive")[1]

    @property
    def count(self) -> int:
        """Archives on disk."""
        return self.budget.usage("archive")[0]

    async def _call(self, fn: Callable[..., T], *args: object) -> T:
        """Blocking file work (renames, removals, the directory scan): the app's file executor, not a git slot."""
        return await run_file_work(self.files, fn, *args)

    def cached(self, key: ContentKey) -> str | None:
        """The archive's path when it is already built (and mark it recently used)."""
        path = self._prefix + key.archive_name  # str, not Path: this is the warm path
        if self.budget.touch(path):
            if os.path.isfile(path):
                return path
            self.budget.forget(path)  # removed behind our back: build it again
        return None

    def start(self, key: ContentKey) -> asyncio.Future[Path]:
        """The build of `key`: the running one if any, else a new one."""
        return self._building.join(key, lambda: self._build(key))

    async def hold(self, key: ContentKey) -> str:
        """The archive of `key`, built if needed and held: eviction skips it until release(path).

        Held in the same step as it is found, so nothing can remove it in between. (A fresh
        build can be evicted before its waiters wake up when storage is very tight: then
        it is built again.)
        """
        for _ in range(3):
            path = self.cached(key)
            if path is not None:
                self.budget.hold(path)
                return path
            # Shielded: one impatient client hanging up must not cancel the build the others wait for.
            await self._building.wait(self.start(key))
        raise StorageFull(
            f"the archive of commit {key.sha[:12]} was removed again before it could be sent: [storage] max_bytes "
            f"({mib(self.max_bytes)}) is too small for the archives being served at once; raise it"
        )

    def release(self, path: str) -> None:
        """End a hold(): the archive may be evicted again."""
        self.budget.release(path)

    def _built(self, key: ContentKey, task: asyncio.Future[Path]) -> None:
        # Logged here, as one line: the download lookup stops waiting after a while and the
        # client may never fetch the archive, and asyncio would log the failure nobody awaited
        # as "Task exception was never retrieved" with a traceback. Waiters still get the error.
        error = None if task.cancelled() else task.exception()
        if error is not None and not isinstance(error, StorageFull):  # StorageFull is logged where it is found
            reason = error.message if isinstance(error, GitregError) else f"{type(error).__name__}: {error}"
            log.warning("building the archive of %s at %s failed: %s", mask(key.repository), key.sha[:12], reason)

    async def checksum(self, key: ContentKey) -> str | None:
        """The SHA-256 (hex) of the archive of `key`; None when it is not built. Hashed once, off the loop."""
        path = self.cached(key)
        if path is None:
            return None
        digest = self._checksums.get(key.archive_name)
        if digest is None:  # built by an earlier run: hashed on first use
            digest = self._checksums[key.archive_name] = await self._call(sha256_file, path)
        return digest

    async def _build(self, key: ContentKey) -> Path:
        refused = self._refused.recall(key)
        if refused is not None:
            raise refused
        final = self.root / key.archive_name
        tmp = self.root / f"tmp-{uuid.uuid4().hex}.tar.gz"
        log.info(
            "building the archive of %s at %s%s",
            mask(key.repository),
            key.sha[:12],
            f" ({key.path})" if key.path else "",
        )
        try:
            # Held: no eviction removes the mirror while it is fetched or read.
            async with self.mirrors.hold(key.repository) as mirror:
                try:
                    if not mirror.is_dir():
                        raise MissingCommit(key.sha)
                    # The usual case (mirror present, commit in it) costs no extra git process.
                    await self._build_into(tmp, mirror, key)
                except MissingCommit:
                    mirror = await self.mirrors.ensure(key.repository, key.sha)
                    try:
                        await self._build_into(tmp, mirror, key)
                    except MissingCommit:
                        raise UpstreamUnavailable(
                            f"commit {key.sha[:12]} is not in {mask(key.repository)} any more (was the tag moved "
                            "and the old commit deleted?); set [git] allow_moved_tags = true to serve where the tag "
                            "is now"
                        ) from None
            # Hashed before it is servable: clients verify the bytes gitreg built, not what is on disk later.
            self._checksums[key.archive_name] = await self._call(sha256_file, tmp)
            # An eviction of an older copy of this very file must finish before the new one takes its name.
            await self.budget.settled(str(final))
            # Renamed into place only when complete: a crash leaves a tmp-* file, removed at start.
            # (No fsync: a crash of gitreg loses nothing written; see README "Storage".)
            size = await self._call(_place, tmp, final)
        finally:
            await self._call(_unlink, tmp)
        self.builds += 1
        path = str(final)
        self.budget.add(path, size, "archive", self._remove)  # the newest entry: never what makes room
        await self.budget.evict()
        return final

    async def _build_into(self, tmp: Path, mirror: Path, key: ContentKey) -> None:
        try:
            await self.pool.run(self.builder.build, mirror, key, tmp, self.max_bytes, host=origin_label(key.repository))
        except (DiskFull, OSError) as e:
            if isinstance(e, OSError) and e.errno not in DISK_FULL:
                raise
            # Not remembered like StorageFull below: the build succeeds once space is freed.
            raise disk_full(self.root.parent, f"the archive of {mask(key.repository)} at {key.sha[:12]}") from None
        except StorageFull as e:
            # Too large for the bound: a key's bytes never change, so neither does this answer.
            self._refused.remember(key, e)
            log.warning("%s", e.message)
            raise

    async def _remove(self, path: str) -> None:
        """Evict one archive. (One being sent stays readable through its open file until the response ends.)"""
        self._checksums.pop(os.path.basename(path), None)
        await self._call(_unlink, path)


def _place(tmp: Path, final: Path) -> int:
    """Rename a finished build into place; its size."""
    os.replace(tmp, final)
    return final.stat().st_size


def _unlink(path: str | Path) -> None:
    with contextlib.suppress(FileNotFoundError):
        os.unlink(path)


def sha256_file(path: str | Path) -> str:
    """The SHA-256 (hex) of a file, read in 1 MiB blocks (blocking: run it in a thread)."""
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(1 << 20):
            digest.update(block)
    return digest.hexdigest()
