"""A version's signature in its details API and on its page (#35): who signed it, or why it is not served."""

from __future__ import annotations

import html
from collections.abc import AsyncIterator

import pytest
import pytest_asyncio
from aiohttp.test_utils import TestClient, TestServer

from tests.support.app import indexed_in_full, make_config, served_app, version_details
from tests.support.repos import GitRepo
from tests.support.signing import allowed_signers, ssh_key, ssh_signed_tag

# Real keys, signed repositories and verifications: over a second a test on a loaded machine. The
# tests only read what `gitreg serve` builds (its index process too): one app for the module, on
# the module's event loop.
pytestmark = [pytest.mark.slow, pytest.mark.asyncio(loop_scope="module")]


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def client(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[TestClient]:
    tmp_path = tmp_path_factory.mktemp("signature-details")
    key = ssh_key(tmp_path / "keys", "alice")
    allowed = allowed_signers(tmp_path / "keys" / "allowed_signers", {"alice@example.com": key})
    repo = GitRepo(tmp_path / "repos", "vpc")
    repo.commit({"main.tf": 'variable "cidr" {}\n', "README.md": "# vpc\n"})
    ssh_signed_tag(repo, "v1.0.0", key)
    repo.commit({"main.tf": 'variable "cidr" {}\n# two\n'})
    repo.tag("v1.1.0", annotated=True)
    module = {"namespace": "acme", "name": "vpc", "system": "aws", "repository": repo.url, "download": "archive"}
    config = make_config(
        [module],
        signing={"allowed_signers": str(allowed), "require": True},
        storage={"path": str(tmp_path / "state")},
    )
    async with TestClient(TestServer(served_app(config))) as client:
        yield await indexed_in_full(client)


async def test_the_details_name_the_signer_and_fingerprint_of_a_signed_version(client):
    resp = await version_details(client, "/v1/modules/acme/vpc/aws/1.0.0")
    body = await resp.json()
    assert body["signature"]["signer"] == "alice@example.com"
    assert body["signature"]["fingerprint"].startswith("SHA256:")
    assert (body["signature"]["format"], body["signature"]["signed"]) == ("ssh", "tag")
    assert body["signature_refused"] is None


async def test_an_unsigned_version_is_shown_to_readers_with_why_it_is_not_served(client):
    resp = await version_details(client, "/v1/modules/acme/vpc/aws/1.1.0")
    assert resp.status == 200
    body = await resp.json()
    assert body["signature"] is None
    assert "neither its tag nor its commit is signed" in body["signature_refused"]
    assert body["versions"] == ["1.1.0", "1.0.0"]  # listed for readers, marked
    assert body["refused_versions"] == ["1.1.0"]


async def test_the_module_page_says_signed_by_or_why_a_version_is_not_served(client):
    await version_details(client, "/v1/modules/acme/vpc/aws/1.0.0")
    signed = html.unescape(await (await client.get("/modules/acme/vpc/aws/1.0.0")).text())
    assert "Signed by <strong>alice@example.com</strong>" in signed
    assert "SHA256:" in signed
    unsigned = html.unescape(await (await client.get("/modules/acme/vpc/aws/1.1.0")).text())
    assert "Not served to Terraform: version 1.1.0 is not served" in unsigned
    assert "Signed by" not in unsigned
    assert '<span class="badge">not served</span>' in unsigned
