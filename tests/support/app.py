"""An app under test: its config, the app `gitreg serve` builds from it, its one error shape, its index settled.

Every test builds what `gitreg serve` builds: `served_app(config)` (the conftest fixture
`serve_client`), `index.process.serve_role`: with the index on, the serving process and its real
index process (`python -m gitreg.indexer`, about a second of CPU to start: a test that reads no
index turns it off, a module whose tests only read builds one app for the module); with the index
off, one process. The index builder's own tests build what the index process builds
(tests/support/index_process.py). The waits below fit the index process: what it did reaches the
serving process with its next report.
"""

from __future__ import annotations

import asyncio
import dataclasses
import time
from collections.abc import Callable
from typing import Any

from aiohttp import web

from gitreg.config.model import Config
from gitreg.config.parse import parse_config
from gitreg.core.errors import ModuleNotFound
from gitreg.index.process import serve_role
from gitreg.web.app import create_app

GIT_USER = "gitreg-bot"
GIT_PASSWORD = "s3cret-git-password-9f2c"


def make_config(modules: list[dict[str, Any]], **sections: Any) -> Config:
    """A validated Config from rule tables and optional sections (http allowed for test servers)."""
    data: dict[str, Any] = {"modules": modules, **sections}
    data.setdefault("git", {}).setdefault("protocols", ["https", "http", "file"])
    data["git"].setdefault("timeout_seconds", 10)
    return parse_config(data, {})


def served_app(config: Config, clock: Callable[[], float] = time.monotonic) -> web.Application:
    """The app `gitreg serve` builds for `config` (its role: serve_role)."""
    return create_app(config, clock, role=serve_role(config))


async def indexed(client, timeout: float = 30.0):
    """Wait until the app's index has indexed everything it knows of (list and search read it): its
    own builder settled or, built by the index process (served_app), every listable module listed
    or refused there and the process idle."""
    from gitreg.web.keys import CATALOG, INDEX

    index = client.app[INDEX]
    await index.settled(timeout)
    if index.builds:
        return client
    catalog, deadline = client.app[CATALOG], time.monotonic() + timeout
    while not (index.complete and index.queue_depth() == 0 and _all_seen(index, catalog.sources())):
        assert time.monotonic() < deadline, "the index process did not index every listable module"
        await asyncio.sleep(0.05)
    return client


def _all_seen(index, listable) -> bool:
    known = set(index.addresses())
    return all(a in known or isinstance(index.unlisted(a), ModuleNotFound) for a in listable)


async def version_details(client, url: str, timeout: float = 30.0, **kwargs):
    """GET a version's details until they answer: the first asks of a version not read yet are a 503
    (Retry-After) while the index reads it in the background (asked by the first GET). With the index
    process `gitreg serve` runs, the serving process hears that they were read only from its next
    report (every FEED_SECONDS), so one ask after `indexed` may still be a 503: ask again."""
    deadline = time.monotonic() + timeout
    while (resp := await client.get(url, **kwargs)).status == 503:
        assert resp.headers["Retry-After"] == "2"
        why = (await resp.json())["errors"][0]
        assert "being read" in why or "being indexed" in why, why  # (its module not listed yet: indexed)
        assert time.monotonic() < deadline, f"{url}: the index did not read the details"
        await asyncio.sleep(0.1)  # a poll: not `indexed`, which waits for every module, this one's read
    return resp


async def assert_error(resp, status: int, *fragments: str) -> str:
    """Assert the registry's one error shape: status, JSON `{"errors": [str, ...]}`, and what it says."""
    assert resp.status == status, await resp.text()
    assert resp.content_type == "application/json"
    body = await resp.json()
    assert set(body) == {"errors"}
    assert isinstance(body["errors"], list) and body["errors"]
    assert all(isinstance(e, str) and e for e in body["errors"])
    text = " ".join(body["errors"])
    for fragment in fragments:
        assert fragment in text, text
    return text


def with_server(config: Config, **changes: Any) -> Config:
    """The config with [server] fields replaced."""
    return dataclasses.replace(config, server=dataclasses.replace(config.server, **changes))


async def until_listed(client, expected: list[str], timeout: float = 10.0) -> None:
    """Wait until /v1/modules lists the modules named `expected`: a change the serving process
    tells the index process of (a tag list it fetched) is indexed there, and reaches the serving
    process with the index process's next report (`indexed` may return before it)."""
    from tests.support.index import get_json, names  # (index.py builds on this module)

    deadline = time.monotonic() + timeout
    while (listed := names(await get_json(client, "/v1/modules"))) != expected:
        assert time.monotonic() < deadline, f"listed {listed}, not {expected}"
        await asyncio.sleep(0.05)


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
