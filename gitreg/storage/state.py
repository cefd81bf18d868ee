"""A persisted JSON state file of gitreg's (catalog.json, index.json, orgs.json): read, set aside
and written one way.

State lives in memory and is served from there; the file only lets a restart begin where the
last run stopped, so no problem with it is ever fatal:
- read at start (`load`): temp files a crash left are removed first; a missing file is no
  state; a file that cannot be read or parsed is moved aside to `<name>.damaged` and logged,
  once; a document of another format (or not a JSON object) is no state either;
- written whole and only when something changed (`mark_dirty`, `flush`): the owner's snapshot
  is taken on the event loop (cheap copies), encoded and written off it (`run_file_work`),
  atomically (`write_atomically`: the old file or the new one, never half of one). A failed
  write is logged and tried again at the next flush;
- flushed every few seconds while the app runs and once more at shutdown (`flushing`), so a
  crash loses at most a few seconds of changes.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
from collections.abc import AsyncIterator, Callable
from concurrent.futures import Executor
from pathlib import Path
from typing import Any

from gitreg.core.events import AsyncSignal
from gitreg.storage.files import collector_paused, remove_leftovers, run_file_work, write_atomically

log = logging.getLogger(__name__)

# Called on the event loop when a flush is due: takes what must be read there (copies of the
# owner's state) and returns the encoder, which runs off the loop and returns the file's text.
Snapshot = Callable[[], Callable[[], str]]


class StateFile:
    """One JSON state file, `{"format": <format_version>, ...}` at `path`: its dirty flag and writes.

    `prefix` names the temp files of its writes (`<prefix>*.tmp`, beside it); `unreadable` says
    in the log what a damaged file means ("the index is built again"); `durable`: fsync each
    write (off for a file rewritten every few seconds that can be rebuilt). Flushes are
    serialized; touch it from the event loop only.
    """

    def __init__(
        self,
        path: Path,
        format_version: int,
        prefix: str,
        snapshot: Snapshot,
        *,
        unreadable: str,
        durable: bool = True,
        executor: Executor | None = None,
    ) -> None:
        self.path = path
        self.format_version = format_version
        self.prefix = prefix
        self.unreadable = unreadable
        self.durable = durable
        self.executor = executor
        self.dirty = False
        self.writes = 0
        # Told the text of each write, after it (with Redis, the index is published to the other replicas).
        self.on_written: AsyncSignal[[str]] = AsyncSignal()
        self._snapshot = snapshot
        self._lock = asyncio.Lock()

    def mark_dirty(self) -> None:
        """Something changed: the next flush writes the file."""
        self.dirty = True

    def parse(self, text: str) -> dict[str, Any] | None:
        """The document in `text` when it is one of this format, else None (it may come from elsewhere)."""
        try:
            data = json.loads(text)
        except (ValueError, RecursionError):
            return None
        return self._document(data)

    def read(self) -> dict[str, Any] | None:
        """The document on disk, None when there is none to take (see the module docstring). Blocking."""
        remove_leftovers(self.path, self.prefix)
        try:
            # Parsed with the collector paused: a large file becomes a million objects, all kept.
            with collector_paused():
                data = json.loads(self.path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            return None
        except (OSError, ValueError, RecursionError) as e:
            aside = self.path.with_name(self.path.name + ".damaged")
            log.warning(
                "%s could not be read (%s); %s, the old file is %s",
                self.path,
                type(e).__name__,
                self.unreadable,
                aside.name,
            )
            with contextlib.suppress(OSError):
                os.replace(self.path, aside)
            return None
        return self._document(data)

    async def load(self) -> dict[str, Any] | None:
        """read(), off the event loop."""
        return await run_file_work(self.executor, self.read)

    def _document(self, data: Any) -> dict[str, Any] | None:
        if not isinstance(data, dict) or data.get("format") != self.format_version:
            return None
        return data

    async def flush(self) -> str | None:
        """Write the file if it is dirty, then tell on_written: the text written, or None (nothing
        changed, or the write failed)."""
        async with self._lock:
            if not self.dirty:
                return None
            encode = self._snapshot()
            self.dirty = False
            # Shielded: cancelled in the middle (shutdown stops the flush loop), the write still
            # finishes before the cancellation goes on, so the last flush never finds the file
            # marked written while an older text is still on its way to disk.
            write = asyncio.ensure_future(run_file_work(self.executor, self._write, encode))
            try:
                text = await asyncio.shield(write)
            except asyncio.CancelledError:
                with contextlib.suppress(Exception):
                    await write
                raise
            except OSError as e:
                self.dirty = True  # try again at the next flush
                log.warning("could not write %s: %s", self.path, e)
                return None
            self.writes += 1
        await self.on_written.emit(text)
        return text

    def _write(self, encode: Callable[[], str]) -> str:
        text = encode()
        write_atomically(self.path, text, self.prefix, self.durable)
        return text

    async def run(self, interval: float) -> None:
        """Flush every `interval` seconds until cancelled."""
        while True:
            await asyncio.sleep(interval)
            await self.flush()

    @contextlib.asynccontextmanager
    async def flushing(self, interval: float) -> AsyncIterator[None]:
        """Flush every `interval` seconds inside the block, and once more when it ends (shutdown)."""
        task = asyncio.ensure_future(self.run(interval))
        try:
            yield
        finally:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
            await self.flush()
