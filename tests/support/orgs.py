"""Org mode's tests: an org table for a fake Git host API, org repositories, listings."""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path
from typing import Any

import aiohttp

from gitreg.core.names import ModuleAddress
from gitreg.orgs.service import OrgCatalog
from gitreg.web.keys import ORGS
from tests.support.app import GIT_PASSWORD, GIT_USER, make_config
from tests.support.forges import FakeForge
from tests.support.githttp import GitHttpServer
from tests.support.repos import GitRepo
from tests.support.webhooks import github_headers, gitlab_headers

API_TOKEN = "ghp_fake-api-token-4f1d2c9e8b7a"


VPC = ModuleAddress("acme", "vpc", "aws")


def module_repo(tmp_path: Path, name: str, versions: tuple[str, ...] = ("1.0.0", "1.1.0")) -> GitRepo:
    """A bare repository under tmp_path/repos (what git_http serves), one tag per version."""
    repo = GitRepo(tmp_path / "repos", name)
    for version in versions:
        repo.commit({"main.tf": f'output "version" {{ value = "{version}" }}\n', "README.md": f"# {name}\n"})
        repo.tag(f"v{version}")
    return repo


def credentials(git_http: GitHttpServer) -> list[dict[str, str]]:
    return [{"url": git_http.base_url + "/", "username": GIT_USER, "password": GIT_PASSWORD}]


def org_table(fake: FakeForge, **extra: Any) -> dict[str, Any]:
    return {
        "provider": fake.provider,
        "api_url": fake.api_url,
        "group": fake.group,
        "namespace": "acme",
        "token": API_TOKEN,
        **extra,
    }


def org_config(fake: FakeForge, git_http: GitHttpServer, modules: list[dict[str, Any]] | None = None, **extra: Any):
    sections: dict[str, Any] = {"orgs": [org_table(fake, **extra.pop("org", {}))], "credentials": credentials(git_http)}
    sections.update(extra)
    return make_config(modules or [], **sections)


async def listed(config, storage: Path | None = None) -> OrgCatalog:
    """An OrgCatalog of `config` after one enumeration of each org (its API session closed after)."""
    catalog = OrgCatalog(config, storage)
    async with aiohttp.ClientSession() as session:
        catalog.open(session)
        for i in range(len(config.orgs)):
            await catalog.enumerate(i)
    return catalog


async def versions_of(client, address: str = "acme/vpc/aws") -> list[str]:
    resp = await client.get(f"/v1/modules/{address}/versions")
    assert resp.status == 200, await resp.text()
    return [v["version"] for v in (await resp.json())["modules"][0]["versions"]]


async def until(predicate, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "timed out"
        await asyncio.sleep(0.02)


async def post_github(client, payload: dict[str, Any], event: str):
    body = json.dumps(payload).encode()
    return await client.post("/webhooks/github", data=body, headers=github_headers(body, event))


async def post_gitlab(client, payload: dict[str, Any], event: str = "System Hook"):
    return await client.post("/webhooks/gitlab", data=json.dumps(payload).encode(), headers=gitlab_headers(event))


def github_tag_push(name: str, org: str = "acme-infra") -> dict[str, Any]:
    """A GitHub tag push event for an org repository: GitHub names it by its github.com URLs
    (gitreg knows them from the API, not from its clone URL)."""
    push = json.loads((Path(__file__).parent.parent / "fixtures/webhooks/github-push-tag.json").read_text())
    push["repository"].update(
        clone_url=f"https://github.com/{org}/{name}.git",
        html_url=f"https://github.com/{org}/{name}",
        ssh_url=f"git@github.com:{org}/{name}.git",
        git_url="git://x/y.git",
    )
    return push


def write_config(tmp_path: Path, fake: FakeForge, git_http: GitHttpServer, extra: str = "") -> Path:
    path = tmp_path / "gitreg.toml"
    path.write_text(
        f'[git]\nprotocols = ["http"]\n[storage]\npath = "{tmp_path / "state"}"\n'
        f'[[orgs]]\nprovider = "{fake.provider}"\napi_url = "{fake.api_url}"\ngroup = "{fake.group}"\n'
        f'namespace = "acme"\ntoken = "${{ORG_TOKEN}}"\n{extra}'
        f'[[credentials]]\nurl = "{git_http.base_url}/"\nusername = "{GIT_USER}"\npassword = "${{GIT_PASSWORD}}"\n'
    )
    return path


OWNER = "acme/team-b/terraform-aws-vpc"
NEWCOMER = "acme/aaa-newcomer/terraform-aws-vpc"


def served_by(client) -> str:
    repo = client.app[ORGS].get(VPC)
    return repo.full_name if repo is not None else ""
