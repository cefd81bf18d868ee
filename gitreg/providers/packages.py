"""Provider packages kept on disk once verified: the second download of a zip is a `sendfile`.

Streaming a zip from the Git host costs gitreg a copy of every byte through Python and its
SHA-256 (bench/providers.py: 1.2-1.7x the direct download on this loopback; the hash alone is
about as much CPU as the transfer). A zip named in a signed SHA256SUMS never changes, so the
first download (or the mirror's `h1:` computation) writes it beside the stream into a temporary
file, and once its SHA-256 matched, renames it to `providers/<sha256>.zip` in `[storage] path`.
Every later download is that file, sent by the kernel (`FileResponse`), with no Git host request
(and no API rate spent). A file is named by its signed digest and only ever renamed into place
whole after the digest matched, so what is served from disk is what the release's signature
covers.

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
from typing import IO

from gitreg.storage.budget import StorageBudget

log = logging.getLogger(__name__)

DIRECTORY = "providers"
KIND = "provider"
_NAME_RE = re.compile(r"[0-9a-f]{64}\.zip")


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

    def writer(self) -> PackageWriter:
        """A temporary file beside the kept ones, for a zip on its way from the Git host."""
        self.directory.mkdir(parents=True, exist_ok=True)
        return PackageWriter(self, tempfile.NamedTemporaryFile(dir=self.directory, prefix="tmp-", delete=False))

    def _keep(self, temp: str, shasum: str) -> None:
        os.chmod(temp, 0o600)
        os.replace(temp, self.path(shasum))

    async def _remove(self, path: str) -> None:
        def unlink() -> None:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(path)

        await asyncio.to_thread(unlink)


class PackageWriter:
    """One zip being written as it streams (`write` on a worker thread, beside its SHA-256), kept by
    `keep` when the digest matches, discarded otherwise."""

    def __init__(self, files: PackageFiles, file: IO[bytes]) -> None:
        self.files = files
        self.file = file
        self.size = 0

    def write(self, chunk: bytes) -> None:
        """Blocking: call it where the chunk is hashed (a worker thread)."""
        self.file.write(chunk)
        self.size += len(chunk)

    async def keep(self, shasum: str) -> Path | None:
        """Rename the complete zip (its SHA-256 is `shasum`: the caller checked it) into place."""
        try:
            await asyncio.to_thread(self.file.close)
            await asyncio.to_thread(self.files._keep, self.file.name, shasum)
        except OSError as e:  # a full disk: the download went through, the zip is not kept
            log.warning("cannot keep a provider package on disk: %s", e)
            await self.discard()
            return None
        path = self.files.path(shasum)
        self.files.budget.add(str(path), self.size, KIND, self.files._remove)
        self.files.budget.hold(str(path))
        self.files.budget.release(str(path))  # over the bound: the least recently used go
        self.files.written += 1
        return path

    async def discard(self) -> None:
        """Drop the temporary file (a mismatch, a cut stream)."""
        await asyncio.to_thread(self.file.close)
        await self.files._remove(self.file.name)
