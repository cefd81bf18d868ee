"""Signed releases in org mode (#35): `require_signed` on an `[[orgs]]` entry serves only its signed versions."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from tests.support.app import assert_error
from tests.support.forges import FakeForge
from tests.support.orgs import API_TOKEN, org_config, versions_of
from tests.support.repos import GitRepo
from tests.support.signing import allowed_signers, ssh_key, ssh_signed_tag

# Real keys, signed repositories and verifications: over a second a test on a loaded machine.
pytestmark = pytest.mark.slow


@pytest.fixture
async def github(git_http) -> AsyncIterator[FakeForge]:
    fake = await FakeForge("github", git_http, "acme-infra", token=API_TOKEN).start()
    yield fake
    await fake.close()


@pytest.mark.parametrize("download", ["git", "archive"])
async def test_an_org_with_require_signed_serves_only_the_signed_versions_of_its_modules(
    serve_client, github, git_http, tmp_path, download
):
    key = ssh_key(tmp_path / "keys", "release")
    allowed = allowed_signers(tmp_path / "keys" / "allowed_signers", {"release@example.com": key})
    repo = GitRepo(tmp_path / "repos", "terraform-aws-vpc")
    repo.commit({"main.tf": "# 1.0.0\n"})
    ssh_signed_tag(repo, "v1.0.0", key)
    repo.commit({"main.tf": "# 1.1.0\n"})
    repo.tag("v1.1.0")  # pushed by anyone with push rights, signed by nobody
    github.add("terraform-aws-vpc")
    config = org_config(
        github,
        git_http,
        org={"require_signed": True, "download": download},
        signing={"allowed_signers": str(allowed)},  # [signing] require stays false: the org's key decides
        storage={"path": str(tmp_path / "state")},
        index={"enabled": False},  # versions and downloads only
    )
    client = await serve_client(config)
    assert await versions_of(client) == ["1.0.0"]
    assert (await client.get("/v1/modules/acme/vpc/aws/1.0.0/download")).status == 200
    refused = await client.get("/v1/modules/acme/vpc/aws/1.1.0/download")
    await assert_error(refused, 403, "version 1.1.0 is not served", "neither its tag nor its commit is signed")
