"""`download = "redirect"` on a `[[providers]]` rule: a zip request answers 302 to the short-lived
storage URL the host's asset API redirects to (GitHub's presigned URL), so the bytes never pass
through gitreg; a zip already kept is still sent from disk; a host that answers the bytes itself
gets them proxied as with the default."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import aiohttp
import pytest

from gitreg.web.keys import PROVIDERS
from tests.support.app import make_config
from tests.support.forges import FakeForge, releasing_github
from tests.support.releases import FakeStorage, SigningKey, goreleaser_assets

GH_TOKEN = "ghp_providerredirectreader01"
REPO = "terraform-provider-widget"
NAME = "terraform-provider-widget_1.0.0_linux_amd64.zip"


@pytest.fixture
async def forge(git_http) -> AsyncIterator[FakeForge]:
    async with releasing_github(git_http, GH_TOKEN) as fake:
        yield fake


def config_for(forge: FakeForge, release_key: SigningKey, tmp_path: Path, token: str = GH_TOKEN, **rule: Any):
    rule = {
        "namespace": "acme",
        "type": "*",
        "repository": f"{forge.base_url}/acme/terraform-provider-{{type}}",
        "keys": str(release_key.write(tmp_path / "keys.asc")),
        "download": "redirect",
        **rule,
    }
    org = {"provider": forge.provider, "api_url": forge.api_url, "group": "acme", "namespace": "acme", "token": token}
    return make_config(
        [], providers=[rule], orgs=[org], index={"enabled": False}, storage={"path": str(tmp_path / "st")}
    )


async def released(forge: FakeForge, release_key: SigningKey) -> tuple[dict[str, bytes], str]:
    """Release v1.0.0 of acme/widget: its files and the API path of the linux_amd64 zip."""
    files = goreleaser_assets("widget", "1.0.0", release_key, payload=300_000)
    release = forge.add_release(REPO, "v1.0.0", files)
    return files, next(urlsplit(a["url"]).path for a in release["assets"] if a["name"] == NAME)


async def signed_zip(client) -> str:
    resp = await client.get("/v1/providers/acme/widget/1.0.0/download/linux/amd64")
    assert resp.status == 200, await resp.text()
    url = urlsplit((await resp.json())["download_url"])
    return f"{url.path}?{url.query}"


async def test_a_zip_request_is_sent_to_the_hosts_storage_and_its_bytes_never_pass_through_gitreg(
    serve_client, forge, release_key, tmp_path
):
    files, asset = await released(forge, release_key)
    client = await serve_client(config_for(forge, release_key, tmp_path))
    signed = await signed_zip(client)
    for method in ("HEAD", "GET"):
        resp = await client.request(method, signed, allow_redirects=False)
        assert resp.status == 302, await resp.text()
        location = resp.headers["Location"]
        assert location.startswith(f"{forge.storage.base_url}/objects/") and "X-Amz-Signature=" in location
        assert GH_TOKEN not in location and resp.headers["Cache-Control"] == "no-store"
    async with aiohttp.ClientSession() as http, http.get(location) as got:  # what the client does next
        assert got.status == 200 and await got.read() == files[NAME]
    assert all("Authorization" not in seen for seen in forge.storage.seen)
    # One asset API request per zip request (each storage URL is fresh: they expire within minutes),
    # nothing fetched nor kept by gitreg, not even on the download answer.
    assert len(forge.requests(asset)) == 2
    assert client.app[PROVIDERS].fetches.started == 0
    assert not list((tmp_path / "st").glob("providers/*.zip"))


async def test_a_zip_already_kept_is_sent_from_disk_without_asking_the_host(serve_client, forge, release_key, tmp_path):
    files, asset = await released(forge, release_key)
    client = await serve_client(config_for(forge, release_key, tmp_path))
    providers = client.app[PROVIDERS]
    version = await providers.version("acme", "widget", "1.0.0")
    package = version.by_name(NAME)
    assert package is not None
    async with providers.kept("acme", "widget", package):  # as the mirror's `h1:` hashes keep it
        pass
    asked = len(forge.requests(asset))
    resp = await client.get(await signed_zip(client), allow_redirects=False)
    assert resp.status == 200 and await resp.read() == files[NAME]
    assert len(forge.requests(asset)) == asked


async def test_a_host_that_answers_the_bytes_itself_has_them_proxied(serve_client, git_http, release_key, tmp_path):
    forge = await FakeForge("github", git_http, "acme", token=GH_TOKEN).start()  # no storage host: 200s
    try:
        files, asset = await released(forge, release_key)
        client = await serve_client(config_for(forge, release_key, tmp_path))
        resp = await client.get(await signed_zip(client), allow_redirects=False)
        assert resp.status == 200 and await resp.read() == files[NAME]
        assert len(forge.requests(asset)) == 2  # once for a storage URL (none came), once for the bytes
    finally:
        await forge.close()


async def test_a_host_refusing_the_asset_is_a_502_that_names_it_and_not_the_token(
    serve_client, forge, release_key, tmp_path
):
    await released(forge, release_key)
    client = await serve_client(config_for(forge, release_key, tmp_path))
    signed = await signed_zip(client)
    forge.token = "ghp_rotatedaway000000000001"  # gitreg's token no longer valid for the asset
    resp = await client.get(signed, allow_redirects=False)
    body = await resp.text()
    assert resp.status == 502, body
    assert "terraform-provider-widget_1.0.0_linux_amd64.zip" in body and "HTTP 401" in body
    assert GH_TOKEN not in body and "Location" not in resp.headers


async def test_a_gitlab_release_link_leads_through_its_package_url_to_the_object_storage(
    serve_client, git_http, release_key, tmp_path
):
    token = "glpat-providerredirectreader"
    forge = await FakeForge("gitlab", git_http, "acme", token=token).start()
    forge.storage = await FakeStorage().start()  # object storage, proxy_download off: presigned redirects
    try:
        files = goreleaser_assets("widget", "1.0.0", release_key, payload=300_000)
        forge.add_release(REPO, "v1.0.0", files)  # links to /-/releases/...: to the package URL, then storage
        rule = {"provider": "gitlab", "api_url": forge.api_url}
        client = await serve_client(config_for(forge, release_key, tmp_path, token=token, **rule))
        resp = await client.get(await signed_zip(client), allow_redirects=False)
        assert resp.status == 302, await resp.text()
        location = resp.headers["Location"]
        assert location.startswith(f"{forge.storage.base_url}/objects/") and token not in location
        async with aiohttp.ClientSession() as http, http.get(location) as got:
            assert await got.read() == files[NAME]
    finally:
        await forge.storage.close()
        await forge.close()
