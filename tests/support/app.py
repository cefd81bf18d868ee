"""An app under test: its config, its one error shape, its index settled."""

from __future__ import annotations

import dataclasses
from typing import Any

from gitreg.config.model import Config
from gitreg.config.parse import parse_config

GIT_USER = "gitreg-bot"
GIT_PASSWORD = "s3cret-git-password-9f2c"


def make_config(modules: list[dict[str, Any]], **sections: Any) -> Config:
    """A validated Config from rule tables and optional sections (http allowed for test servers)."""
    data: dict[str, Any] = {"modules": modules, **sections}
    data.setdefault("git", {}).setdefault("protocols", ["https", "http", "file"])
    data["git"].setdefault("timeout_seconds", 10)
    return parse_config(data, {})


async def indexed(client):
    """Wait until the app's index has indexed everything it knows of (list and search read it)."""
    from gitreg.web.keys import INDEX

    await client.app[INDEX].settled()
    return client


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
