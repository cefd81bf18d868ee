"""An app under test: its config, the app `gitreg serve` builds from it, its one error shape, its index settled.

Which app a test builds (tests/conftest.py's fixtures say which they use):
- `served_app(config)`: exactly what `gitreg serve` builds (`index.process.serve_role`): with the
  index on, the serving process and its real index process (`python -m gitreg.indexer`, ~0.5 s to
  start: build it once per module where the tests only read); with the index off, one process.
- `in_process_index_app(config)`: the index built inside the serving process (Role.ALL with the
  index on), a set-up `gitreg serve` never runs. What `make_client` still builds for a config
  with the index on (the tests not converted yet); with the index off it is the same as served_app.
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
from gitreg.index.process import Role, serve_role
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


def in_process_index_app(config: Config, clock: Callable[[], float] = time.monotonic) -> web.Application:
    """The index built in the serving process (a set-up of the tests only; see the module docstring)."""
    return create_app(config, clock, role=Role.ALL)


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


async def version_details(client, url: str, **kwargs):
    """GET a version's details: the first ask of a version not read yet is a 503 (Retry-After)
    while the index reads it in the background; once it has, the details answer (200)."""
    resp = await client.get(url, **kwargs)
    if resp.status == 503:
        assert resp.headers["Retry-After"] == "2"
        assert "being read" in (await resp.json())["errors"][0]
        await indexed(client)
        resp = await client.get(url, **kwargs)
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
