"""Each package's `h1:` hash, computed once from the zip and kept for good (`providers-h1.json`).

A zip named in a signed SHA256SUMS never changes, so its `h1:` (hashes.py) is computed once:
the zip is kept on disk by the Providers (packages.py: streamed from the Git host, its SHA-256
checked on the way), hashed by `hasher` (the serving process gives the parse worker processes: a release's zip is
content whoever can publish a release wrote, and unzipping it is CPU the event loop's GIL must
not share; without one, a worker thread), and the answer kept in memory and written atomically
beside gitreg's other files. Concurrent asks for one zip share one computation.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import Awaitable, Callable
from pathlib import Path

from gitreg.core.errors import GitregError
from gitreg.core.flight import InFlight
from gitreg.providers.hashes import HashError, h1_request
from gitreg.storage.files import write_atomically

log = logging.getLogger(__name__)

FILE_NAME = "providers-h1.json"
MAX_KEPT = 100_000

# The path of a zip -> `{"h1": ...}` or `{"error": why}` (hashes.h1_request, wherever it runs).
Hasher = Callable[[str], Awaitable[dict[str, str]]]
# The verified zip on disk, held while in the `async with` (Providers.kept).
Fetch = Callable[[], contextlib.AbstractAsyncContextManager[Path]]


async def in_thread(path: str) -> dict[str, str]:
    """The hasher without parse workers (`gitreg check --probe`, a HashStore made alone)."""
    return await asyncio.to_thread(h1_request, {"path": path})


class HashStore:
    """SHA-256 of a zip -> its `h1:`; loaded at start, written after each new one."""

    def __init__(self, directory: Path, hasher: Hasher = in_thread) -> None:
        self._path = directory / FILE_NAME
        self.hasher = hasher
        self._known: dict[str, str] = {}
        self._computing: InFlight[str, str | None] = InFlight()
        self._writing = asyncio.Lock()

    def load(self) -> None:
        """Read what earlier runs computed (a missing or unreadable file: nothing known)."""
        try:
            data = json.loads(self._path.read_text())
        except (OSError, ValueError):
            return
        if isinstance(data, dict):
            self._known = {k: v for k, v in data.items() if isinstance(k, str) and isinstance(v, str)}

    def known(self, shasum: str) -> str | None:
        """The `h1:` of the zip whose SHA-256 is `shasum`, when computed already."""
        return self._known.get(shasum)

    async def h1(self, shasum: str, fetch: Fetch, wait: float) -> str | None:
        """The zip's `h1:`, computing it from the file `fetch()` holds when not known; None when it takes
        longer than `wait` seconds (it goes on: a later ask finds it) or cannot be computed."""
        found = self._known.get(shasum)
        if found is not None:
            return found
        future = self._computing.join(shasum, lambda: self._compute(shasum, fetch))
        try:
            return await asyncio.wait_for(InFlight.wait(future), wait)
        except TimeoutError:
            return None

    def _write(self, document: str) -> None:
        self._path.parent.mkdir(parents=True, exist_ok=True)
        write_atomically(self._path, document, ".providers-h1-")

    async def _compute(self, shasum: str, fetch: Fetch) -> str | None:
        try:
            async with fetch() as path:
                answer = await self.hasher(str(path))
        except GitregError as e:
            log.warning("cannot compute the h1 hash of a provider package: %s", e.message)
            return None
        except HashError as e:  # no worker could hash it (not remembered: a later ask tries again)
            log.warning("no h1 hash for a provider package: %s", e)
            return None
        found = answer.get("h1")
        if not isinstance(found, str) or not found.startswith("h1:"):
            log.warning("no h1 hash for a provider package: %s", answer.get("error", "no answer"))
            return None
        self._known[shasum] = found
        while len(self._known) > MAX_KEPT:
            self._known.pop(next(iter(self._known)))
        async with self._writing:  # one write at a time, each of everything known by then
            await asyncio.to_thread(self._write, json.dumps(self._known, sort_keys=True))
        return found
