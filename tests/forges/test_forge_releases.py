"""The Git hosts' release APIs: releases and their assets read with gitreg's token, private
assets' bytes fetched through GitHub's redirect to its storage host without the token."""

from __future__ import annotations

import aiohttp
import pytest

from gitreg.config.model import OrgConfig
from gitreg.forges.base import ForgeError
from gitreg.forges.hosts import client_for
from gitreg.forges.releases import open_asset, read_asset
from tests.support.forges import FakeForge
from tests.support.releases import FakeStorage

TOKEN = {"github": "ghp_releasesreadertoken0000", "gitlab": "glpat-releasesreadertoken"}


def org(forge: FakeForge, token: str | None) -> OrgConfig:
    return OrgConfig(provider=forge.provider, api_url=forge.api_url, group="acme", namespace="acme", token=token)  # type: ignore[arg-type]


async def test_github_releases_and_a_private_asset_through_the_storage_redirect_without_the_token(git_http):
    forge = await FakeForge("github", git_http, "acme", token=TOKEN["github"]).start()
    storage = await FakeStorage().start()
    forge.storage = storage
    files = {"a_SHA256SUMS": b"sums\n", "a_linux_amd64.zip": b"PK zip bytes" * 1000}
    forge.add_release("terraform-provider-widget", "v1.0.0", files)
    forge.add_release("terraform-provider-widget", "v1.1.0", {"x": b"draft"}, draft=True)
    forge.add_release("terraform-provider-widget", "v2.0.0-rc.1", {"y": b"pre"}, prerelease=True)
    try:
        async with aiohttp.ClientSession() as session:
            client = client_for(org(forge, TOKEN["github"]), session)
            releases = await client.releases("acme/terraform-provider-widget")
            assert [(r.tag, r.draft, r.prerelease) for r in releases] == [
                ("v2.0.0-rc.1", False, True),
                ("v1.1.0", True, False),
                ("v1.0.0", False, False),
            ]
            zip_asset = releases[2].asset("a_linux_amd64.zip")
            assert zip_asset is not None and zip_asset.size == len(files["a_linux_amd64.zip"])
            assert zip_asset.digest is not None and zip_asset.digest.startswith("sha256:")
            data = await read_asset(client, zip_asset, client.asset_headers(), 1 << 20)
            assert data == files["a_linux_amd64.zip"]
            # The API saw the token; the storage host never did.
            asked = forge.requests("/releases/assets/")
            assert asked[-1].headers["Authorization"] == f"Bearer {TOKEN['github']}"
            assert asked[-1].headers["Accept"] == "application/octet-stream" and asked[-1].status == 302
            assert storage.seen and all("Authorization" not in h for h in storage.seen)
            # Without gitreg's token the private repository's releases are refused.
            anonymous = client_for(org(forge, None), session)
            with pytest.raises(ForgeError) as refused:
                await anonymous.releases("acme/terraform-provider-widget")
            assert refused.value.reason == "unauthorized"
    finally:
        await storage.close()
        await forge.close()


async def test_gitlab_release_links_and_generic_packages_are_read_with_the_token(git_http):
    forge = await FakeForge("gitlab", git_http, "acme", token=TOKEN["gitlab"]).start()
    forge.add_release("terraform-provider-dns", "v0.1.0", {"b_SHA256SUMS": b"link bytes"})
    forge.add_release("terraform-provider-dns", "v0.2.0", {"b_SHA256SUMS": b"package bytes"}, package=True)
    try:
        async with aiohttp.ClientSession() as session:
            client = client_for(org(forge, TOKEN["gitlab"]), session)
            releases = await client.releases("acme/terraform-provider-dns")
            assert [r.tag for r in releases] == ["v0.2.0", "v0.1.0"]
            package, link = (r.asset("b_SHA256SUMS") for r in releases)
            assert package is not None and "/packages/generic/" in package.url
            assert link is not None and "/-/releases/" in link.url
            assert await read_asset(client, package, client.asset_headers(), 100) == b"package bytes"
            assert await read_asset(client, link, client.asset_headers(), 100) == b"link bytes"
            assert forge.requests("/packages/generic/")[-1].headers["PRIVATE-TOKEN"] == TOKEN["gitlab"]
            with pytest.raises(ForgeError, match="larger than 5 bytes"):
                await read_asset(client, package, client.asset_headers(), 5)
            async with open_asset(client, link, client.asset_headers()) as resp:
                assert resp.status == 200
    finally:
        await forge.close()


def test_release_webhook_payloads_name_the_repository_and_the_tag():
    from gitreg.forges import github, gitlab
    from gitreg.forges.payloads import MalformedPayload

    hub = github.release_event(
        {"action": "published", "release": {"tag_name": "v1.2.0"}, "repository": {"html_url": "https://github.com/a/b"}}
    )
    assert (hub.urls, hub.ref) == (("https://github.com/a/b",), "refs/tags/v1.2.0")
    lab = gitlab.release_event(
        {
            "object_kind": "release",
            "action": "create",
            "tag": "v2.0.0",
            "project": {"web_url": "https://gl.example/g/p"},
        }
    )
    assert lab is not None and (lab.urls, lab.ref) == (("https://gl.example/g/p",), "refs/tags/v2.0.0")
    assert gitlab.release_event({"object_kind": "push"}) is None
    with pytest.raises(MalformedPayload):
        github.release_event({"action": "published", "repository": {"html_url": "https://github.com/a/b"}})
