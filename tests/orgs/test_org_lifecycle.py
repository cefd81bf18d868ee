"""An org module's `.gitreg.toml` (#35): read from the org repository's default branch, re-read on a
push webhook that names the repository by its github.com URLs."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest

from tests.support.app import assert_error
from tests.support.forges import FakeForge
from tests.support.lifecycle import DECLARED, DEPRECATION, REVOKED_REASON, module_repo
from tests.support.orgs import API_TOKEN, github_tag_push, org_config, post_github
from tests.support.webhooks import WEBHOOKS

pytestmark = pytest.mark.slow  # real git over HTTP, a fake GitHub API


@pytest.fixture
async def github(git_http) -> AsyncIterator[FakeForge]:
    fake = await FakeForge("github", git_http, "acme-infra", token=API_TOKEN).start()
    yield fake
    await fake.close()


async def versions_answer(client) -> list[dict]:
    resp = await client.get("/v1/modules/acme/vpc/aws/versions")
    assert resp.status == 200, await resp.text()
    return (await resp.json())["modules"][0]["versions"]


@pytest.mark.parametrize("download", ["git", "archive"])
async def test_an_org_module_follows_its_gitreg_toml_and_a_push_to_its_default_branch(
    serve_client, github, git_http, tmp_path, download
):
    repo = module_repo(tmp_path / "repos", "terraform-aws-vpc", declared=None)
    github.add("terraform-aws-vpc")
    config = org_config(
        github,
        git_http,
        org={"download": download},
        cache={"ttl_seconds": 3600},
        webhooks=WEBHOOKS,
        index={"enabled": False},  # versions and downloads only: what `gitreg serve` builds with the index off
    )
    client = await serve_client(config)
    assert [v["version"] for v in await versions_answer(client)] == ["2.0.0", "1.4.2", "1.4.1"]
    repo.commit({".gitreg.toml": DECLARED}, "retire versions")
    push = github_tag_push("terraform-aws-vpc") | {"ref": "refs/heads/main"}
    push["repository"]["default_branch"] = "main"
    resp = await post_github(client, push, "push")
    assert resp.status == 200, await resp.text()
    expected = [{"version": "2.0.0"}, {"version": "1.4.1", "deprecation": DEPRECATION}]
    for _ in range(200):  # the refresh runs in the background; the file is read once it saw the new commit
        answer = await versions_answer(client)
        if answer == expected:
            break
        await asyncio.sleep(0.05)
    assert answer == expected
    await assert_error(await client.get("/v1/modules/acme/vpc/aws/1.4.2/download"), 410, REVOKED_REASON)
