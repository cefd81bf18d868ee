"""Provider packages kept on disk once verified: the second download of a zip is a file sent from disk.

Streaming a zip from the Git host costs gitreg a copy of every byte through Python and its
SHA-256 (bench/providers.py: 1.2-1.7x the direct download on this loopback; the hash alone is
about as much CPU as the transfer). A zip named in a signed SHA256SUMS never changes, so its one
fetch (fetches.py: started by the download answer, or by the zip request, or by the mirror's `h1:`
computation) writes it into a temporary file here (`create`), and once its SHA-256 matched, renames
it to `providers/<sha256>.zip` in `[storage] path` (`keep`). Every later download is that file,
sent from disk (`FileResponse`: `sendfile` on asyncio's loop, reads on a worker thread on uvloop),
with no Git host request (and no API rate spent). A file is
named by its signed digest and only ever renamed into place whole after the digest matched, so
what is served from disk is what the release's signature covers.

The files count in `[storage] max_bytes` beside the mirrors and archives (storage.budget: least
recently used first, never one being sent); a file that was evicted is fetched again.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import re
import tempfile
from pathlib import Path

from gitreg.storage.budget import StorageBudget

log = logging.getLogger(__name__)

DIRECTORY = "providers"
KIND = "provider"
_NAME_RE = re.compile(r"[0-9a-f]{64}\.zip")
# Free space left on the disk beyond a zip being fetched (the other stores write there too).
RESERVE = 64 * 1024 * 1024


class PackageFiles:
    """Verified provider zips in `directory`, named by their SHA-256, within the storage budget."""

    def __init__(self, directory: Path, budget: StorageBudget | None = None) -> None:
        self.directory = directory
        self.budget = budget or StorageBudget(1 << 62)
        self.written = 0  # zips kept (tests)

    def path(self, shasum: str) -> Path:
        """Where the zip whose SHA-256 is `shasum` is kept."""
        return self.directory / f"{shasum}.zip"

    async def start(self) -> None:
        """Count what earlier runs kept (and remove what they left half-written)."""
        found = await asyncio.to_thread(self._scan)
        self.budget.seed((path, size, used, KIND, self._remove) for path, size, used in found)

    def _scan(self) -> list[tuple[str, int, float]]:
        found: list[tuple[str, int, float]] = []
        if not self.directory.is_dir():  # made by the first zip kept (`gitreg check --probe` makes none)
            return found
        with os.scandir(self.directory) as entries:
            for entry in entries:
                if _NAME_RE.fullmatch(entry.name):
                    st = entry.stat()
                    found.append((entry.path, st.st_size, st.st_mtime))
                else:  # a temporary file a crash left
                    with contextlib.suppress(OSError):
                        os.unlink(entry.path)
        return found

    def open(self, shasum: str) -> Path | None:
        """The kept zip of `shasum`, marked in use (release() it once sent); None when not kept."""
        path = self.path(shasum)
        if not self.budget.touch(str(path)):
            return None
        if not path.is_file():  # removed behind gitreg's back: fetched again (one stat, no read)
            self.budget.forget(str(path))
            return None
        self.budget.hold(str(path))
        return path

    def release(self, path: Path) -> None:
        """The zip is sent: it may be evicted again."""
        self.budget.release(str(path))

    def create(self, size: int | None) -> tuple[int, str]:
        """Blocking: a new temporary file beside the kept ones (its descriptor, read-write, and path) for
        a zip of `size` bytes on its way from the Git host; NoRoom when the disk has not that much free."""
        self.directory.mkdir(parents=True, exist_ok=True)
        free = os.statvfs(self.directory)
        if free.f_bavail * free.f_frsize < (size or 0) + RESERVE:
            raise NoRoom(f"{free.f_bavail * free.f_frsize} bytes free in {self.directory}")
        return tempfile.mkstemp(dir=self.directory, prefix="tmp-")  # mode 0600

    async def keep(self, temp: str, shasum: str, size: int) -> Path | None:
        """Rename the complete temporary file (its SHA-256 is `shasum`: the caller checked it) into place,
        counted in the storage budget; None when it cannot be (it is left to the caller to remove)."""
        path = self.path(shasum)
        try:
            await asyncio.to_thread(os.replace, temp, path)
        except OSError as e:
            log.warning("cannot keep a provider package on disk: %s", e)
            return None
        self.budget.add(str(path), size, KIND, self._remove)
        self.budget.hold(str(path))
        self.budget.release(str(path))  # over the bound: the least recently used go
        self.written += 1
        return path

    def known(self, shasum: str) -> bool:
        """True when the zip of `shasum` is kept (as far as the budget knows: no disk access); marks it used."""
        return self.budget.touch(str(self.path(shasum)))

    async def _remove(self, path: str) -> None:
        def unlink() -> None:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(path)

        await asyncio.to_thread(unlink)


class NoRoom(OSError):
    """The disk has no room for a zip: it is streamed without being kept."""
