"""providers.v1 served from a repository's releases: signed versions listed, downloads answered
with gitreg-signed URLs that stream the private assets, refusals with their reasons."""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import io
import json
import os
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import aiohttp
import pytest

from gitreg.providers.hashes import h1_of_zip
from gitreg.web.keys import PROVIDERS
from tests.support.app import GIT_PASSWORD, GIT_USER, make_config
from tests.support.forges import FakeForge, releasing_github
from tests.support.releases import SigningKey, goreleaser_assets
from tests.support.releases import signing_key as key_in
from tests.support.repos import GitRepo

GH_TOKEN = "ghp_providerreleasesreader01"
STATIC = "static-token-for-providers-0001"
REPO = "terraform-provider-widget"


@pytest.fixture(scope="session")
def other_key(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SigningKey]:
    with key_in(tmp_path_factory.mktemp("gpg-other") / "home", "Mallory <m@example.test>") as key:
        yield key


async def enumerated(client) -> list[str]:
    """The providers /v1/providers lists once the org's first enumeration (in the background) found any."""
    listed: list[str] = []
    for _ in range(500):
        listed = [p["id"] for p in (await (await client.get("/v1/providers")).json())["providers"]]
        if listed:
            break
        await asyncio.sleep(0.02)
    return listed


@pytest.fixture
async def forge(git_http) -> AsyncIterator[FakeForge]:
    async with releasing_github(git_http, GH_TOKEN) as fake:
        yield fake


def provider_config(forge: FakeForge, keys: Path, **sections: Any):
    rule = {
        "namespace": "acme",
        "type": "*",
        "repository": f"{forge.base_url}/acme/terraform-provider-{{type}}",
        "keys": str(keys),
        "provider": "github",
        "api_url": forge.api_url,
    }
    org = {"provider": "github", "api_url": forge.api_url, "group": "acme", "namespace": "acme", "token": GH_TOKEN}
    return make_config([], providers=[rule], orgs=[org], index={"enabled": False}, **sections)


async def test_versions_list_the_signed_releases_with_protocols_and_platforms(
    serve_client, forge, release_key, other_key, tmp_path
):
    forge.add_release(REPO, "v1.0.0", goreleaser_assets("widget", "1.0.0", release_key))
    forge.add_release(REPO, "v1.1.0", goreleaser_assets("widget", "1.1.0", release_key, protocols=None))
    forge.add_release(REPO, "v2.0.0-rc.1", goreleaser_assets("widget", "2.0.0-rc.1", release_key), prerelease=True)
    forge.add_release(REPO, "v3.0.0", goreleaser_assets("widget", "3.0.0", release_key), draft=True)
    forge.add_release(REPO, "v0.9.0", goreleaser_assets("widget", "0.9.0", other_key))
    forge.add_release(REPO, "v0.8.0", goreleaser_assets("widget", "0.8.0", None))
    forge.add_release(REPO, "not-a-version", goreleaser_assets("widget", "0.7.0", release_key))
    changed = goreleaser_assets("widget", "0.6.0", release_key)
    changed["terraform-provider-widget_0.6.0_linux_amd64.zip"] += b"changed after signing"
    forge.add_release(REPO, "v0.6.0", changed)
    unlisted = goreleaser_assets("widget", "0.5.0", release_key)
    unlisted["terraform-provider-widget_0.5.0_windows_amd64.zip"] = b"PK not in the sums"
    forge.add_release(REPO, "v0.5.0", unlisted)
    client = await serve_client(provider_config(forge, release_key.write(tmp_path / "keys.asc")))

    discovery = await (await client.get("/.well-known/terraform.json")).json()
    assert discovery["providers.v1"] == "/v1/providers/"
    resp = await client.get("/v1/providers/acme/widget/versions")
    assert resp.status == 200, await resp.text()
    body = await resp.json()
    platforms = [{"os": "darwin", "arch": "arm64"}, {"os": "linux", "arch": "amd64"}]
    assert body["versions"] == [
        {"version": "2.0.0-rc.1", "protocols": ["6.0"], "platforms": platforms},
        {"version": "1.1.0", "protocols": ["5.0"], "platforms": platforms},
        {"version": "1.0.0", "protocols": ["6.0"], "platforms": platforms},
    ]
    refused = {r.tag: r.reason for r in (await client.app[PROVIDERS].listing("acme", "widget")).refused}
    assert "not one of the configured keys" in refused["v0.9.0"]
    assert "has no signature terraform-provider-widget_0.8.0_SHA256SUMS.sig" in refused["v0.8.0"]
    assert "terraform-provider-widget_0.6.0_linux_amd64.zip does not match SHA256SUMS" in refused["v0.6.0"]
    assert refused["v0.5.0"] == "SHA256SUMS does not list terraform-provider-widget_0.5.0_windows_amd64.zip"
    assert set(refused) == {"v0.9.0", "v0.8.0", "v0.6.0", "v0.5.0"}
    unknown = await client.get("/v1/providers/other/widget/versions")
    assert unknown.status == 404


async def test_a_download_answer_gives_signed_urls_that_stream_the_private_assets_without_a_token(
    serve_client, forge, release_key, tmp_path
):
    files = goreleaser_assets("widget", "1.0.0", release_key)
    forge.add_release(REPO, "v1.0.0", files)
    config = provider_config(
        forge, release_key.write(tmp_path / "keys.asc"), auth={"tokens": [STATIC], "signing_key": "k" * 40}
    )
    client = await serve_client(config)
    headers = {"Authorization": f"Bearer {STATIC}"}
    assert (await client.get("/v1/providers/acme/widget/versions")).status == 401
    resp = await client.get("/v1/providers/acme/widget/1.0.0/download/linux/amd64", headers=headers)
    assert resp.status == 200, await resp.text()
    answer = await resp.json()
    name = "terraform-provider-widget_1.0.0_linux_amd64.zip"
    assert answer["filename"] == name and (answer["os"], answer["arch"]) == ("linux", "amd64")
    assert answer["shasum"] == hashlib.sha256(files[name]).hexdigest()
    assert answer["protocols"] == ["6.0"]
    assert answer["packages"] == {  # OpenTofu 1.12: every platform, zh: first (h1: once the mirror computed it)
        f"{os_}_{arch}": {
            "hashes": [f"zh:{hashlib.sha256(data).hexdigest()}"],
            "package_size": len(data),
        }
        for os_, arch in (("linux", "amd64"), ("darwin", "arm64"))
        for data in [files[f"terraform-provider-widget_1.0.0_{os_}_{arch}.zip"]]
    }
    (key,) = answer["signing_keys"]["gpg_public_keys"]
    assert key["key_id"] == release_key.fingerprint[-16:] and "BEGIN PGP PUBLIC KEY BLOCK" in key["ascii_armor"]
    expected = {
        "download_url": files[name],
        "shasums_url": files["terraform-provider-widget_1.0.0_SHA256SUMS"],
        "shasums_signature_url": files["terraform-provider-widget_1.0.0_SHA256SUMS.sig"],
    }
    for field, data in expected.items():
        url = urlsplit(answer[field])
        assert "signature=" in url.query and "expires=" in url.query and GH_TOKEN not in answer[field]
        got = await client.get(f"{url.path}?{url.query}")  # no Authorization, as Terraform fetches them
        assert got.status == 200, await got.text()
        assert await got.read() == data
        head = await client.head(f"{url.path}?{url.query}")
        assert head.status == 200 and await head.read() == b""
        unsigned = await client.get(url.path)
        assert unsigned.status == 403
    assert all("Authorization" not in h for h in forge.storage.seen)  # type: ignore[union-attr]
    missing = await client.get("/v1/providers/acme/widget/1.0.0/download/windows/amd64", headers=headers)
    assert missing.status == 404
    assert (await client.get("/v1/providers/acme/widget/9.9.9/download/linux/amd64", headers=headers)).status == 404


async def test_a_zip_changed_after_signing_is_refused_or_cut_short_and_each_release_is_verified_once(
    serve_client, forge, release_key, tmp_path
):
    small = goreleaser_assets("widget", "1.0.0", release_key)
    large = goreleaser_assets("widget", "2.0.0", release_key, payload=3_000_000)
    forge.add_release(REPO, "v1.0.0", small)
    forge.add_release(REPO, "v2.0.0", large)
    config = provider_config(forge, release_key.write(tmp_path / "keys.asc"), cache={"ttl_seconds": 0})
    client = await serve_client(config)
    for version, files in (("1.0.0", small), ("2.0.0", large)):
        name = f"terraform-provider-widget_{version}_linux_amd64.zip"
        # Changed behind the release's back (its listed digest still the signed one), before the download
        # answer started fetching it.
        forge.replace_asset(REPO, f"v{version}", name, files[name][:-1] + bytes([files[name][-1] ^ 1]))
        answer = await (await client.get(f"/v1/providers/acme/widget/{version}/download/linux/amd64")).json()
        url = urlsplit(answer["download_url"])
        resp = await client.get(f"{url.path}?{url.query}")
        if version == "1.0.0":  # found out before the first byte left: a clear refusal
            assert resp.status == 502
            assert "does not match SHA256SUMS" in (await resp.json())["errors"][0]
        else:  # found out at the last bytes (past the first MiB): the connection is cut, the body short
            assert resp.status == 200
            with pytest.raises(aiohttp.ClientPayloadError):
                await resp.read()
    # The list is read again (ttl 0), the releases' signatures are not checked again.
    asset_reads = len(forge.requests("/releases/assets/"))
    assert (await client.get("/v1/providers/acme/widget/versions")).status == 200
    assert len(forge.requests("/releases/assets/")) == asset_reads
    assert len(forge.requests("/releases")) > asset_reads


async def test_the_network_mirror_lists_versions_and_archives_with_h1_hashes_computed_once(
    serve_client, forge, release_key, tmp_path
):
    files = goreleaser_assets("widget", "1.0.0", release_key)
    release = forge.add_release(REPO, "v1.0.0", files)
    zip_paths = {a["url"].split("/repos/", 1)[1] for a in release["assets"] if a["name"].endswith(".zip")}
    forge.add_release(REPO, "v1.1.0-beta.1", goreleaser_assets("widget", "1.1.0-beta.1", release_key))
    config = provider_config(forge, release_key.write(tmp_path / "keys.asc"), storage={"path": str(tmp_path / "st")})
    client = await serve_client(config)
    host = f"{client.server.host}:{client.server.port}"
    index = await client.get(f"/v1/mirror/{host}/acme/widget/index.json")
    assert index.status == 200 and index.content_type == "application/json"
    assert await index.json() == {"versions": {"1.1.0-beta.1": {}, "1.0.0": {}}}
    other = await client.get("/v1/mirror/registry.terraform.io/acme/widget/index.json")
    assert other.status == 404
    resp = await client.get(f"/v1/mirror/{host}/acme/widget/1.0.0.json")
    assert resp.status == 200, await resp.text()
    archives = (await resp.json())["archives"]
    assert set(archives) == {"linux_amd64", "darwin_arm64"}
    for platform, archive in archives.items():
        data = files[f"terraform-provider-widget_1.0.0_{platform}.zip"]
        assert archive["hashes"] == [h1_of_zip(io.BytesIO(data)), f"zh:{hashlib.sha256(data).hexdigest()}"]
        url = urlsplit(archive["url"])
        assert not url.netloc and "signature=" in url.query  # resolved against the answer's own URL
        assert await (await client.get(archive["url"])).read() == data

    # Computed once: asked again (and after a restart, from the file), the zips are not read again.
    def zip_reads() -> int:
        return sum(r.path.split("/repos/", 1)[1] in zip_paths for r in forge.requests("/releases/assets/"))

    downloads = zip_reads()
    # Each zip read once from the host: the h1 computation kept it, the test's download is that file.
    assert downloads == 2, [(r.path, r.status) for r in forge.requests("/releases/assets/")]
    again_archives = (await (await client.get(f"/v1/mirror/{host}/acme/widget/1.0.0.json")).json())["archives"]
    assert {p: a["hashes"] for p, a in again_archives.items()} == {p: a["hashes"] for p, a in archives.items()}
    await client.close()
    again = await serve_client(config)
    host = f"{again.server.host}:{again.server.port}"
    assert (await (await again.get(f"/v1/mirror/{host}/acme/widget/1.0.0.json")).json())["archives"].keys() == {
        "linux_amd64",
        "darwin_arm64",
    }
    assert zip_reads() == downloads, [(r.path, r.status) for r in forge.requests("/releases/assets/")]


@pytest.mark.parametrize("provider", ["github", "gitlab"])
async def test_a_host_token_reads_a_provider_when_it_can_read_its_repository(
    serve_client, git_http, release_key, tmp_path, provider
):
    org_token = {"github": GH_TOKEN, "gitlab": "glpat-providerreleasesreader"}[provider]
    alice = {"github": "ghp_alicealicealice000001", "gitlab": "glpat-alicealicealice01"}[provider]
    forge = await FakeForge(provider, git_http, "acme", token=org_token).start()
    try:
        files = {}
        for type_ in ("widget", "gadget"):
            forge.add(f"terraform-provider-{type_}")
            files[type_] = goreleaser_assets(type_, "1.0.0", release_key)
            forge.add_release(f"terraform-provider-{type_}", "v1.0.0", files[type_], package=provider == "gitlab")
        forge.add_user("alice", alice, sees=("terraform-provider-widget",))
        rule = {
            "namespace": "acme",
            "type": "*",
            "repository": f"{forge.base_url}/acme/terraform-provider-{{type}}",
            "keys": str(release_key.write(tmp_path / "keys.asc")),
        }
        org = {"provider": provider, "api_url": forge.api_url, "group": "acme", "namespace": "acme", "token": org_token}
        forges = [{"provider": provider, "url": forge.base_url, "api_url": forge.api_url}]
        config = make_config(
            [], providers=[rule], orgs=[org], index={"enabled": False}, auth={"forges": forges, "signing_key": "k" * 40}
        )
        client = await serve_client(config)
        headers = {"Authorization": f"Bearer {alice}"}
        resp = await client.get("/v1/providers/acme/widget/versions", headers=headers)
        assert resp.status == 200, await resp.text()
        assert [v["version"] for v in (await resp.json())["versions"]] == ["1.0.0"]
        answer = await (
            await client.get("/v1/providers/acme/widget/1.0.0/download/linux/amd64", headers=headers)
        ).json()
        url = urlsplit(answer["download_url"])
        zip_bytes = await (await client.get(f"{url.path}?{url.query}")).read()
        assert zip_bytes == files["widget"]["terraform-provider-widget_1.0.0_linux_amd64.zip"]
        refused = await client.get("/v1/providers/acme/gadget/versions", headers=headers)
        assert refused.status == 403
        assert "cannot read acme/terraform-provider-gadget" in (await refused.json())["errors"][0]
        assert "provider acme/gadget" in (await refused.json())["errors"][0]
    finally:
        await forge.close()


async def test_providers_are_listed_by_the_api_and_on_pages_with_a_block_to_paste(
    serve_client, forge, release_key, tmp_path
):
    forge.add_release(REPO, "v1.2.0", goreleaser_assets("widget", "1.2.0", release_key))
    forge.add_release(REPO, "v1.1.0", goreleaser_assets("widget", "1.1.0", None))
    config = provider_config(forge, release_key.write(tmp_path / "keys.asc"))
    client = await serve_client(config)
    assert (await client.get("/providers/acme/widget")).status == 200
    listed = await (await client.get("/v1/providers")).json()
    assert listed == {
        "providers": [{"id": "acme/widget", "namespace": "acme", "type": "widget", "versions": ["1.2.0"]}]
    }
    assert (await (await client.get("/v1/providers?namespace=other")).json()) == {"providers": []}
    page = await (await client.get("/providers/acme/widget")).text()
    host = f"{client.server.host}:{client.server.port}"
    assert f"source  = &#34;{host}/acme/widget&#34;" in page and "version = &#34;~&gt; 1.2&#34;" in page
    assert release_key.fingerprint[-16:] in page and "linux_amd64" in page
    assert "v1.1.0: the release has no signature" in page
    index = await (await client.get("/providers")).text()
    assert 'href="/providers/acme/widget"' in index and "1.2.0" in index
    assert 'href="/providers"' in await (await client.get("/")).text()
    assert (await client.get("/providers/acme/nothing")).status == 404


async def test_a_release_webhook_makes_the_next_versions_answer_read_the_releases_again(
    serve_client, forge, release_key, tmp_path
):
    secret = "webhook-secret-for-releases-01"
    forge.add_release(REPO, "v1.0.0", goreleaser_assets("widget", "1.0.0", release_key))
    config = provider_config(
        forge, release_key.write(tmp_path / "keys.asc"), webhooks={"github_secret": secret}, cache={"ttl_seconds": 3600}
    )
    client = await serve_client(config)

    async def versions() -> list[str]:
        return [
            v["version"] for v in (await (await client.get("/v1/providers/acme/widget/versions")).json())["versions"]
        ]

    assert await versions() == ["1.0.0"]
    forge.add_release(REPO, "v1.1.0", goreleaser_assets("widget", "1.1.0", release_key))
    assert await versions() == ["1.0.0"]  # cached like a tag list
    repository = {"full_name": f"acme/{REPO}", "html_url": f"{forge.base_url}/acme/{REPO}"}
    body = json.dumps({"action": "published", "release": {"tag_name": "v1.1.0"}, "repository": repository}).encode()
    signature = "sha256=" + hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()
    headers = {"X-GitHub-Event": "release", "X-Hub-Signature-256": signature, "Content-Type": "application/json"}
    resp = await client.post("/webhooks/github", data=body, headers=headers)
    assert resp.status == 200, await resp.text()
    assert (await resp.json())["providers"] == 1
    assert await versions() == ["1.1.0", "1.0.0"]


async def test_a_keys_file_gpg_cannot_read_refuses_every_release_saying_why(serve_client, forge, release_key, tmp_path):
    forge.add_release(REPO, "v1.0.0", goreleaser_assets("widget", "1.0.0", release_key))
    broken = tmp_path / "broken.asc"
    broken.write_text("-----BEGIN PGP PUBLIC KEY BLOCK-----\n\nnot base64 at all\n-----END PGP PUBLIC KEY BLOCK-----\n")
    client = await serve_client(provider_config(forge, broken))
    resp = await client.get("/v1/providers/acme/widget/versions")
    assert resp.status == 200
    body = await resp.json()
    assert body["versions"] == []
    assert f"the keys file {broken} cannot be used" in body["warnings"][0]


async def test_an_org_with_providers_true_serves_its_provider_repositories(serve_client, forge, release_key, tmp_path):
    forge.add_release(REPO, "v1.0.0", goreleaser_assets("widget", "1.0.0", release_key))
    keys = release_key.write(tmp_path / "keys.asc")
    org = {"provider": "github", "api_url": forge.api_url, "group": "acme", "namespace": "acme", "token": GH_TOKEN}
    config = make_config([], orgs=[{**org, "providers": True, "provider_keys": str(keys)}], index={"enabled": False})
    client = await serve_client(config)
    resp = await client.get("/v1/providers/acme/widget/versions")
    assert resp.status == 200, await resp.text()
    assert [v["version"] for v in (await resp.json())["versions"]] == ["1.0.0"]
    assert (await client.get("/v1/providers/acme/gadget/versions")).status == 404  # no such repository


async def test_an_orgs_provider_repositories_are_listed_before_anyone_asks_for_them(
    serve_client, forge, release_key, tmp_path
):
    for type_ in ("widget", "gadget"):
        forge.add(f"terraform-provider-{type_}")
        forge.add_release(f"terraform-provider-{type_}", "v1.0.0", goreleaser_assets(type_, "1.0.0", release_key))
    forge.add("terraform-aws-vpc")  # a module, not a provider
    forge.add("terraform-provider-")  # no type: not a provider
    keys = release_key.write(tmp_path / "keys.asc")
    org = {"provider": "github", "api_url": forge.api_url, "group": "acme", "namespace": "acme", "token": GH_TOKEN}
    config = make_config([], orgs=[{**org, "providers": True, "provider_keys": str(keys)}], index={"enabled": False})
    client = await serve_client(config)
    assert await enumerated(client) == ["acme/gadget", "acme/widget"]
    page = await (await client.get("/providers")).text()
    assert 'href="/providers/acme/gadget"' in page and 'href="/providers/acme/widget"' in page


async def test_a_verified_zip_is_kept_and_later_downloads_come_from_disk_without_the_host(
    serve_client, forge, release_key, tmp_path
):
    files = goreleaser_assets("widget", "1.0.0", release_key, payload=300_000)
    release = forge.add_release(REPO, "v1.0.0", files)
    name = "terraform-provider-widget_1.0.0_linux_amd64.zip"
    asset = next(a["url"].split("/repos/", 1)[1] for a in release["assets"] if a["name"] == name)
    config = provider_config(forge, release_key.write(tmp_path / "keys.asc"), storage={"path": str(tmp_path / "st")})

    def reads() -> int:
        return sum(r.path.endswith(asset) for r in forge.requests("/releases/assets/"))

    client = await serve_client(config)
    answer = await (await client.get("/v1/providers/acme/widget/1.0.0/download/linux/amd64")).json()
    url = urlsplit(answer["download_url"])
    signed = f"{url.path}?{url.query}"
    for _ in range(3):
        resp = await client.get(signed)
        assert resp.status == 200 and resp.content_type == "application/zip"
        assert await resp.read() == files[name]
    assert reads() == 1  # the first download kept it; the others are that file
    head = await client.head(signed)
    assert head.status == 200 and head.content_length == len(files[name])
    kept = list((tmp_path / "st" / "providers").iterdir())
    assert [p.name for p in kept] == [f"{hashlib.sha256(files[name]).hexdigest()}.zip"]
    await client.close()
    again = await serve_client(config)  # a restart keeps them too
    answer = await (await again.get("/v1/providers/acme/widget/1.0.0/download/linux/amd64")).json()
    url = urlsplit(answer["download_url"])
    assert await (await again.get(f"{url.path}?{url.query}")).read() == files[name]
    assert reads() == 1
    assert (await again.get(url.path)).status == 403  # still only by a signed URL


async def test_the_mirrors_h1_hashes_are_computed_in_a_parse_worker_process(serve_client, forge, release_key, tmp_path):
    files = goreleaser_assets("widget", "1.0.0", release_key)
    forge.add_release(REPO, "v1.0.0", files)
    config = provider_config(forge, release_key.write(tmp_path / "keys.asc"), storage={"path": str(tmp_path / "st")})
    client = await serve_client(config)
    host = f"{client.server.host}:{client.server.port}"
    archives = (await (await client.get(f"/v1/mirror/{host}/acme/widget/1.0.0.json")).json())["archives"]
    data = files["terraform-provider-widget_1.0.0_linux_amd64.zip"]
    assert archives["linux_amd64"]["hashes"][0] == h1_of_zip(io.BytesIO(data))
    workers = client.app[PROVIDERS].hashes.hasher.workers  # the parse workers (index/parse_workers.py)
    assert workers.started == 1 and all(pid != os.getpid() for pid in workers.pids())


async def test_the_provider_page_shows_the_readme_of_the_latest_releases_tag_sanitized(
    serve_client, git_http, forge, release_key, tmp_path
):
    repo = GitRepo(git_http.root, REPO)
    repo.commit({"README.md": "# Widget v1\n"})
    repo.tag("v1.0.0")
    readme = (
        "# Widget provider\n\nSee [the docs](docs/index.md).\n\n<script>alert(1)</script><b onclick='x()'>bold</b>\n"
    )
    repo.commit({"README.md": readme})
    repo.tag("v1.1.0")
    repo.commit({"README.md": "# Not released yet\n"})
    forge.add(REPO)  # its clone URL: the git server's
    forge.add_release(REPO, "v1.0.0", goreleaser_assets("widget", "1.0.0", release_key))
    forge.add_release(REPO, "v1.1.0", goreleaser_assets("widget", "1.1.0", release_key))
    credentials = [{"url": f"{git_http.base_url}/", "username": GIT_USER, "password": GIT_PASSWORD}]
    client = await serve_client(
        provider_config(forge, release_key.write(tmp_path / "keys.asc"), credentials=credentials)
    )
    for _ in range(2):
        page = await (await client.get("/providers/acme/widget")).text()
        assert ">Widget provider</h1>" in page and "Not released yet" not in page and "Widget v1" not in page
        assert "<script>alert" not in page and "onclick" not in page and "<b>bold</b>" in page
        assert "/blob/v1.1.0/docs/index.md" in page  # a relative link: into the repository at the release's tag
    assert client.app[PROVIDERS].readmes.reads == 1  # remembered per commit


def test_a_tests_signing_key_leaves_no_gpg_agent_behind(tmp_path):
    home = tmp_path / "home"

    def agents() -> list[str]:
        found = []
        for proc in Path("/proc").iterdir():
            try:
                cmdline = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode()
            except OSError:
                continue
            if "gpg-agent" in cmdline and str(home) in cmdline:
                found.append(cmdline)
        return found

    with key_in(home) as key:
        assert key.sign(b"SHA256SUMS")
        assert agents()  # signing started one for this home
    for _ in range(100):
        if not agents():
            break
        time.sleep(0.05)
    assert agents() == []


async def test_kept_zips_count_in_the_storage_bound_and_the_least_recently_used_goes(
    serve_client, forge, release_key, tmp_path
):
    zips = {}
    for version in ("1.0.0", "2.0.0"):
        files = goreleaser_assets("widget", version, release_key, platforms=(("linux", "amd64"),), payload=700_000)
        forge.add_release(REPO, f"v{version}", files)
        zips[version] = files[f"terraform-provider-widget_{version}_linux_amd64.zip"]
    storage = {"path": str(tmp_path / "st"), "max_bytes": 1024 * 1024}  # room for one of them
    client = await serve_client(provider_config(forge, release_key.write(tmp_path / "keys.asc"), storage=storage))
    kept = tmp_path / "st" / "providers"

    async def download(version: str) -> bytes:
        answer = await (await client.get(f"/v1/providers/acme/widget/{version}/download/linux/amd64")).json()
        url = urlsplit(answer["download_url"])
        return await (await client.get(f"{url.path}?{url.query}")).read()

    assert await download("1.0.0") == zips["1.0.0"]
    assert await download("2.0.0") == zips["2.0.0"]
    newest = f"{hashlib.sha256(zips['2.0.0']).hexdigest()}.zip"
    for _ in range(250):  # eviction runs in the background
        if [p.name for p in kept.iterdir()] == [newest]:
            break
        await asyncio.sleep(0.02)
    assert [p.name for p in kept.iterdir()] == [newest]
    reads = len(forge.requests("/releases/assets/"))
    assert await download("1.0.0") == zips["1.0.0"]  # fetched from the host again
    assert len(forge.requests("/releases/assets/")) > reads


async def test_a_clone_url_the_api_names_on_another_host_is_not_read(
    serve_client, git_http, forge, release_key, tmp_path
):
    repo = GitRepo(git_http.root, REPO)
    repo.commit({"README.md": "# Widget provider\n"})
    repo.tag("v1.0.0")
    listed = forge.add(REPO)
    elsewhere = listed["clone_url"].replace("127.0.0.1", "localhost")  # the same server under another name
    with forge._lock:
        forge._repos[REPO]["clone_url"] = elsewhere
    forge.add_release(REPO, "v1.0.0", goreleaser_assets("widget", "1.0.0", release_key))
    credentials = [
        {"url": url, "username": GIT_USER, "password": GIT_PASSWORD}
        for url in (f"{git_http.base_url}/", f"{git_http.base_url.replace('127.0.0.1', 'localhost')}/")
    ]
    config = provider_config(forge, release_key.write(tmp_path / "keys.asc"), credentials=credentials)
    client = await serve_client(config)
    page = await client.get("/providers/acme/widget")
    assert page.status == 200
    assert "Widget provider" not in await page.text()
    assert client.app[PROVIDERS].readmes.reads == 0


async def test_an_orgs_provider_repositories_on_a_gitlab_under_a_sub_path_are_listed_and_served(
    serve_client, git_http, release_key, tmp_path
):
    token = "glpat-providersubpathreader01"
    forge = await FakeForge("gitlab", git_http, "acme", token=token, api_path="/gitlab").start()
    try:
        files = goreleaser_assets("widget", "1.0.0", release_key)
        forge.add(REPO)
        forge.add_release(REPO, "v1.0.0", files)
        assert forge.api_url.endswith("/gitlab/api/v4")
        org = {"provider": "gitlab", "api_url": forge.api_url, "group": "acme", "namespace": "acme", "token": token}
        org |= {"providers": True, "provider_keys": str(release_key.write(tmp_path / "keys.asc"))}
        client = await serve_client(make_config([], orgs=[org], index={"enabled": False}))
        assert await enumerated(client) == ["acme/widget"]
        versions = await client.get("/v1/providers/acme/widget/versions")
        assert [v["version"] for v in (await versions.json())["versions"]] == ["1.0.0"]
        answer = await (await client.get("/v1/providers/acme/widget/1.0.0/download/linux/amd64")).json()
        url = urlsplit(answer["download_url"])
        assert await (await client.get(f"{url.path}?{url.query}")).read() == files[answer["filename"]]
    finally:
        await forge.close()
