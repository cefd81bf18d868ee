"""An [[orgs]] entry with no `download` key serves its modules as archives (issue 35: archive is the default)."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from tests.support.forges import FakeForge
from tests.support.orgs import API_TOKEN, module_repo, org_config


@pytest.fixture
async def github(git_http) -> AsyncIterator[FakeForge]:
    fake = await FakeForge("github", git_http, "acme-infra", token=API_TOKEN, max_per_page=2).start()
    yield fake
    await fake.close()


async def test_an_org_module_with_no_download_key_is_served_as_a_checksummed_archive(
    serve_client, github, git_http, tmp_path
):
    module_repo(tmp_path, "terraform-aws-vpc", ("1.0.0",))
    github.add("terraform-aws-vpc")
    config = org_config(github, git_http, storage={"path": str(tmp_path / "store")}, index={"enabled": False})
    assert config.orgs[0].download == "archive"
    client = await serve_client(config)
    resp = await client.get("/v1/modules/acme/vpc/aws/1.0.0/download")
    assert resp.status == 200, await resp.text()
    location = resp.headers["X-Terraform-Get"]
    assert "/v1/modules/acme/vpc/aws/1.0.0/archive.tar.gz?checksum=sha256:" in location
    archive = await client.get("/v1/modules/acme/vpc/aws/1.0.0/archive.tar.gz")
    assert archive.status == 200 and (await archive.read())[:2] == b"\x1f\x8b"
