"""Waiting for what `gitreg serve`'s index process reads on request (tests/web).

tests/support/app.py's `version_details` asks once more after `indexed(client)`; with a real index
process (`served_app`) that can be too soon: the Want goes down the pipe, and the queue depth the
serving process knows is the one the index process last reported (every FEED_SECONDS), so
`indexed` may return before the read even started. `details_read` asks again until the read is done.
"""

from __future__ import annotations

import asyncio
import time

from tests.support.app import indexed


async def details_read(client, url: str, timeout: float = 30.0, **kwargs):
    """GET a version's details: the first asks of a version not read yet are a 503 (Retry-After)
    while the index reads it in the background; once it has, the details answer (200)."""
    deadline = time.monotonic() + timeout
    resp = await client.get(url, **kwargs)
    while resp.status == 503:
        assert resp.headers["Retry-After"] == "2"
        assert "being read" in (await resp.json())["errors"][0]
        assert time.monotonic() < deadline, f"{url}: the index did not read the details"
        await indexed(client)
        await asyncio.sleep(0.05)  # (a poll, as indexed's: the entry comes with the next report)
        resp = await client.get(url, **kwargs)
    return resp


async def reindexed(client, timeout: float = 30.0):
    """`indexed(client)`, and a whole pass over every listable module done since the app started.

    After a restart the serving process loads index.json (complete, as it was written) and its
    index process has reported nothing yet: `indexed` would return at once, before the pass that
    drops what went away. The pass count comes with the index process's status, after the changes
    of that pass (child.py ReportFeed.send); an in-process builder counts its own.
    """
    from gitreg.web.keys import INDEX

    deadline = time.monotonic() + timeout
    while not client.app[INDEX].stats.passes:
        assert time.monotonic() < deadline, "the index made no pass over every listable module"
        await asyncio.sleep(0.05)
    return await indexed(client, timeout)


async def indexed_in_full(client, timeout: float = 30.0):
    """`indexed(client)`, and every listed module's latest version's details read (IndexEntry.details):
    pages show them, and the list sorts by their date. An in-process builder's `settled` counted its
    details reads in flight; the queue depth an index process reports does not (IndexBuilder.depth),
    so with the index process `gitreg serve` runs, `indexed` may return while they are being read."""
    from gitreg.web.keys import INDEX

    await indexed(client, timeout)
    index, deadline = client.app[INDEX], time.monotonic() + timeout
    while not all(entry.details for a in index.addresses() if (entry := index.get(a)) is not None):
        assert time.monotonic() < deadline, "the index did not read every listed module's details"
        await asyncio.sleep(0.05)
    return client
