"""A file on disk as a response, held against eviction until it was sent: a module's archive
(registry/archives), a provider's kept zip (providers/packages.py).

aiohttp's `FileResponse` sends it with the kernel's `sendfile` on asyncio's event loop; uvloop,
`gitreg serve`'s loop, has no `loop.sendfile`, so there the file is read on a worker thread and
written, SEND_CHUNK bytes at a time: 1 MiB rather than aiohttp's 256 KiB sends a 40 MiB file in
about 60% of the time (a quarter of the trips to the worker thread).
"""

from __future__ import annotations

import os
import weakref
from collections.abc import Callable
from typing import Any

from aiohttp import web
from aiohttp.abc import AbstractStreamWriter

SEND_CHUNK = 1024 * 1024


class HeldFileResponse(web.FileResponse):
    """A FileResponse for a file held against eviction until it was opened and sent (then `release`)."""

    def __init__(self, path: str | os.PathLike[str], release: Callable[[], None], **kwargs: Any) -> None:
        super().__init__(path, chunk_size=SEND_CHUNK, **kwargs)
        # A response never sent (the client left before) still releases, when it is dropped.
        self._release = weakref.finalize(self, release)
        self._release.atexit = False

    async def prepare(self, request: web.BaseRequest) -> AbstractStreamWriter | None:
        """Open and send the file, then release it (a finalizer runs once)."""
        try:
            return await super().prepare(request)
        finally:
            self._release()
