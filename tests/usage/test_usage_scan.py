""" "Used by": the org's repositories scanned over real git, their module blocks found, and shown by who may read them.

The Git hosts' APIs are the fakes of tests/support/forges.py; the repositories are real, behind
`git http-backend` (tests/support/usage.py builds them), and every git request is counted there.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from gitreg.cli.main import main
from gitreg.config.parse import parse_config
from gitreg.web.app import create_app
from gitreg.web.keys import ORGS, USAGE
from tests.support.forges import FakeForge
from tests.support.githttp import GitHttpServer
from tests.support.orgs import until
from tests.support.usage import CONSUMERS, HOST, add_to, consumer_org

pytestmark = pytest.mark.slow  # several real repositories, fetched and parsed in worker processes

ADMIN = "static-admin-token-6b1f0e3a9c"
ORG_TOKEN = {"gitlab": "glpat-org-listing-token-0001", "github": "ghp_orgListingToken0001"}
ALICE = {"gitlab": "glpat-alice-3Jk9sQ2mZ7xW", "github": "ghp_alice4Vb8Nq1Lr6Yt"}
URL = "/v1/modules/acme/vpc/aws/consumers"


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def config_data(forge: FakeForge, tmp_path: Path, auth: bool = True) -> dict[str, Any]:
    data: dict[str, Any] = {
        "server": {"public_url": f"https://{HOST}"},
        "git": {"protocols": ["http"], "timeout_seconds": 10},
        "storage": {"path": str(tmp_path / "state")},
        "usage": {"scan": True},
        "orgs": [
            {
                "provider": forge.provider,
                "api_url": forge.api_url,
                "group": "acme",
                "namespace": "acme",
                "token": ORG_TOKEN[forge.provider],
                "download": "git",
            }
        ],
    }
    if auth:
        forges = [{"provider": forge.provider, "url": forge.base_url, "api_url": forge.api_url}]
        data["auth"] = {"tokens": [ADMIN], "forges": forges}
    return data


@dataclass
class Site:
    client: Any
    forge: FakeForge
    git: GitHttpServer
    repos: dict[str, Any]
    tmp_path: Path

    @property
    def alice(self) -> str:
        return ALICE[self.forge.provider]

    async def scanned(self) -> None:
        """Wait for the background scan's first pass."""
        usage = self.client.app[USAGE]
        await until(lambda: usage.passes >= 1, timeout=60)

    async def consumers(self, headers: dict[str, str] | None = None, query: str = "") -> dict[str, Any]:
        resp = await self.client.get(URL + query, headers=headers or {})
        assert resp.status == 200, await resp.text()
        return await resp.json()


async def start(aiohttp_client: Any, tmp_path: Path, provider: str, auth: bool = True) -> AsyncIterator[Site]:
    repos = consumer_org(tmp_path / "repos")
    with GitHttpServer(tmp_path / "repos") as git:
        forge = await FakeForge(provider, git, "acme", token=ORG_TOKEN[provider]).start()
        add_to(forge)
        forge.add_user("alice", ALICE[provider], sees=("terraform-aws-vpc", "app-frontend", "platform-live"))
        client = await aiohttp_client(create_app(parse_config(config_data(forge, tmp_path, auth), {})))
        yield Site(client, forge, git, repos, tmp_path)
        await forge.close()


@pytest.fixture(params=["gitlab", "github"])
async def site(request: Any, tmp_path: Path, aiohttp_client: Any) -> AsyncIterator[Site]:
    async for found in start(aiohttp_client, tmp_path, request.param):
        yield found


def consumer_requests(git: GitHttpServer) -> list[Any]:
    """The git requests for the consumer repositories (the module's own also serves the index's ls-remote)."""
    return [r for r in git.requests() if r.path.split("/")[2].removesuffix(".git") in CONSUMERS]


def shown(body: dict[str, Any]) -> list[tuple[str, str, int, str, str | None]]:
    return [
        (c["repository"]["name"], c["file"], c["line"], c["constraint"], c["newest_allowed"]) for c in body["consumers"]
    ]


async def test_a_host_token_sees_the_consumers_it_can_read_by_name_and_counts_the_rest(site: Site) -> None:
    await site.scanned()
    body = await site.consumers(bearer(site.alice))
    assert shown(body) == [
        ("acme/app-frontend", "main.tf", 4, "~> 1.2", "1.4.2"),
        ("acme/platform-live", "envs/dev/network/main.tf", 3, "1.4.2", "1.4.2"),
        ("acme/platform-live", "envs/prod/main.tf", 1, ">= 1.0, < 2.0", "1.4.2"),
    ]
    # secret-app's block is counted, never named; other-host's (another registry) is not a consumer.
    assert (body["hidden"], body["total"], body["repositories"], body["latest"]) == (1, 4, 3, "2.0.0")
    assert "secret-app" not in str(body)
    assert all(c["not_latest_major"] for c in body["consumers"])
    assert body["installs"] == [] and body["meta"] == {"limit": 15, "current_offset": 0}
    assert body["consumers"][0]["repository"]["url"].endswith("acme/app-frontend")
    # Paged like the list endpoints.
    page = await site.consumers(bearer(site.alice), "?limit=2&offset=1")
    assert [c["file"] for c in page["consumers"]] == ["envs/dev/network/main.tf", "envs/prod/main.tf"]
    assert page["meta"]["prev_offset"] == 0 and "next_offset" not in page["meta"]
    # A static token is no Git host identity: the host has not said it can read any of them.
    admin = await site.consumers(bearer(ADMIN))
    assert (admin["consumers"], admin["hidden"]) == ([], 4)


async def test_anonymous_readers_of_an_open_registry_see_counts_only(tmp_path: Path, aiohttp_client: Any) -> None:
    async for site in start(aiohttp_client, tmp_path, "github", auth=False):
        await site.scanned()
        body = await site.consumers()
        assert (body["consumers"], body["hidden"], body["repositories"]) == ([], 4, 3)
        resp = await site.client.get("/v1/modules/acme/nothing/aws/consumers")
        assert resp.status == 404


async def test_an_unchanged_repository_costs_no_git_call_on_later_refreshes_nor_after_a_restart(
    tmp_path: Path, aiohttp_client: Any
) -> None:
    async for site in start(aiohttp_client, tmp_path, "gitlab"):
        await site.scanned()
        usage = site.client.app[USAGE]
        assert usage.last.read == 5
        site.git.reset_counters()
        await site.client.app[ORGS].enumerate(0)
        stats = await usage.refresh()
        assert (stats.unchanged, stats.read) == (5, 0)
        assert consumer_requests(site.git) == []  # not one git request for an unchanged repository
        await site.client.close()
        # A restart reads usage.json: nothing is fetched again.
        site.git.reset_counters()
        site.client = await aiohttp_client(create_app(parse_config(config_data(site.forge, tmp_path), {})))
        await site.scanned()
        usage = site.client.app[USAGE]
        assert (usage.last.unchanged, usage.last.read) == (5, 0)
        assert consumer_requests(site.git) == []
        # A push to one consumer: only that repository is read again.
        site.repos["app-frontend"].commit({"main.tf": f'module "vpc" {{\n  source = "{HOST}/acme/vpc/aws"\n}}\n'})
        site.forge.touch("app-frontend", when=time.time() - 1800)
        await site.client.app[ORGS].enumerate(0)
        await usage.refresh()  # (or the background pass the listing's change woke did it)
        assert {r.path.split("/")[2] for r in consumer_requests(site.git)} == {"app-frontend.git"}
        body = await site.consumers(bearer(site.alice))
        assert ("acme/app-frontend", "main.tf", 1, "", "2.0.0") in shown(body)


def test_check_probe_consumers_prints_the_modules_consumers(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    consumer_org(tmp_path / "repos")
    with GitHttpServer(tmp_path / "repos") as git:
        forge = FakeForge("github", git, "acme", token=ORG_TOKEN["github"])
        with forge.in_thread():
            add_to(forge)
            config = tmp_path / "gitreg.toml"
            config.write_text(
                f'[server]\npublic_url = "https://{HOST}"\n[git]\nprotocols = ["http"]\n'
                f'[storage]\npath = "{tmp_path / "state"}"\n'
                f'[[orgs]]\nprovider = "github"\napi_url = "{forge.api_url}"\ngroup = "acme"\nnamespace = "acme"\n'
                f'token = "{ORG_TOKEN["github"]}"\ndownload = "git"\n'
            )
            code = main(["check", "--config", str(config), "--probe", "--consumers", "acme/vpc/aws"])
    out = capsys.readouterr().out
    assert code == 0, out
    assert "acme/vpc/aws: 4 module block(s) in 3 repositor(ies) call it" in out
    assert "acme/secret-app main.tf:1 version 2.0.0 -> 2.0.0" in out
    assert "acme/platform-live envs/dev/network/main.tf:3 version 1.4.2 -> 1.4.2 [not on the latest major]" in out
    assert "other-host" not in out
    assert not (tmp_path / "state" / "usage.json").exists()  # a probe persists nothing


async def test_consumers_are_flagged_by_the_modules_gitreg_toml(tmp_path: Path, aiohttp_client: Any) -> None:
    async for site in start(aiohttp_client, tmp_path, "github"):
        # The module retires versions on its default branch: 1.4.2 revoked, everything before 1.3 deprecated.
        declared = '[[revoked]]\nversions = "= 1.4.2"\nreason = "leaks"\n'
        declared += '[[deprecated]]\nversions = "< 1.3.0"\nreason = "old"\n'
        site.repos["terraform-aws-vpc"].commit({".gitreg.toml": declared}, "retire versions")
        await site.scanned()
        flags: dict[str, tuple[str | None, bool, bool]] = {}
        deadline = time.monotonic() + 30
        while flags.get("envs/dev/network/main.tf", (None, False, False))[2] is not True:
            assert time.monotonic() < deadline, flags
            body = await site.consumers(bearer(site.alice))  # the first asks fetch the tags, then the file
            flags = {
                c["file"]: (c["newest_allowed"], c["allows_deprecated"], c["pinned_revoked"]) for c in body["consumers"]
            }
            await asyncio.sleep(0.1)
        assert flags == {
            "main.tf": ("1.2.0", True, False),  # ~> 1.2 now resolves to 1.2.0 (1.4.2 is revoked), which is deprecated
            "envs/prod/main.tf": ("1.2.0", True, False),
            "envs/dev/network/main.tf": (None, False, True),  # pinned to the revoked 1.4.2: nothing it allows is served
        }
