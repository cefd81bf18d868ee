"""Archive mode: gitreg builds and serves module archives, signed URLs, moved tags, tarball templates.

What `gitreg serve` builds with the index off (tests/support/storage.py make_config): none of these
tests reads the index, and its details reads (scratch fetches of their own) are not these requests'.
"""

from __future__ import annotations

import asyncio
import gzip
import hashlib
import io
import json
import tarfile
import time
from urllib.parse import parse_qsl, urlsplit

import pytest

from gitreg.storage.archives import FIXED_MTIME
from gitreg.web.keys import MIRRORS
from gitreg.web.signing import UrlSigner
from tests.support.app import assert_error
from tests.support.archives import file_text, mono_repo, mono_rule, stored_bytes
from tests.support.repos import GitRepo
from tests.support.storage import make_config

TOKEN = "archive-registry-token-4e1d2c"
SIGNING_KEY = "k" * 40
AUTH = {"tokens": [TOKEN], "signing_key": SIGNING_KEY}
BEARER = {"Authorization": f"Bearer {TOKEN}"}


def members(data: bytes) -> dict[str, tarfile.TarInfo]:
    with tarfile.open(fileobj=io.BytesIO(data), mode="r:gz") as tar:
        return {m.name: m for m in tar.getmembers()}


async def lookup(client, version: str, headers: dict[str, str] | None = None) -> tuple[str, dict]:
    """The archive URL's path + query and the JSON body of a download lookup."""
    path = f"/v1/modules/acme/network/aws/{version}/download"
    resp = await client.get(path, headers=headers or {})
    assert resp.status == 200, await resp.text()
    body = await resp.json()
    assert resp.headers["X-Terraform-Get"] == body["location"]
    # Absolute, on the origin the client reached (no public_url here): scanners resolve no relative one.
    parts = urlsplit(body["location"])
    assert f"{parts.scheme}://{parts.netloc}/" == str(client.make_url("/")), body
    return f"{parts.path}?{parts.query}", body


async def test_archive_download_answer_and_archive_contents(serve_client, tmp_path):
    repo = mono_repo(tmp_path / "repos")
    client = await serve_client(make_config([mono_rule(repo.url)]))
    url, body = await lookup(client, "1.1.0")
    # next to the download URL, ends in .tar.gz so go-getter treats it as an archive
    assert set(body) == {"location"} and url.startswith("/v1/modules/acme/network/aws/1.1.0/archive.tar.gz?checksum=")
    assert url.partition("?")[0] == "/v1/modules/acme/network/aws/1.1.0/archive.tar.gz"
    head = await client.head(url)
    assert head.status == 200
    resp = await client.get(url)
    assert resp.status == 200
    data = await resp.read()
    assert resp.headers["Content-Type"] == "application/gzip"
    assert "Content-Encoding" not in resp.headers  # clients must not un-gzip it on the fly
    assert int(resp.headers["Content-Length"]) == len(data) == int(head.headers["Content-Length"])
    # the checksum go-getter verifies before unpacking is the one of the bytes served
    assert body["location"].endswith(f"/1.1.0/archive.tar.gz?checksum=sha256:{hashlib.sha256(data).hexdigest()}")
    assert resp.headers["ETag"] and resp.headers["ETag"] == head.headers["ETag"]
    # only the module's directory, at the archive root
    assert sorted(n for n, m in members(data).items() if m.isfile()) == ["main.tf", "sub/vars.tf"]
    assert file_text(data, "main.tf") == 'output "v" { value = "net-1.1.0" }\n'
    # the older version is its own archive
    old, _ = await lookup(client, "1.0.0")
    assert file_text(await (await client.get(old)).read(), "main.tf") == 'output "v" { value = "net-1.0.0" }\n'


async def test_archive_of_the_repository_root_and_a_conditional_get(serve_client, repo):
    client = await serve_client(
        make_config(
            [{"namespace": "demo", "name": "hello", "system": "null", "repository": repo.url, "download": "archive"}]
        )
    )
    resp = await client.get("/v1/modules/demo/hello/null/1.1.0/archive.tar.gz")
    assert resp.status == 200
    data = await resp.read()
    assert file_text(data, "main.tf") == 'output "version" { value = "1.1.0" }\n'
    again = await client.get(
        "/v1/modules/demo/hello/null/1.1.0/archive.tar.gz", headers={"If-None-Match": resp.headers["ETag"]}
    )
    assert again.status == 304


@pytest.mark.slow
async def test_archives_are_reproducible_byte_for_byte(serve_client, tmp_path, monkeypatch):
    repo = mono_repo(tmp_path / "repos")
    built = []
    for round_ in range(2):
        monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / f"state-{round_}"))  # a fresh mirror and store
        client = await serve_client(make_config([mono_rule(repo.url)]))
        resp = await client.get("/v1/modules/acme/network/aws/1.1.0/archive.tar.gz")
        built.append(await resp.read())
        await client.close()
        if round_ == 0:
            await asyncio.sleep(1.1)  # git would stamp a tree archive with the current second
    assert built[0] == built[1]
    assert hashlib.sha256(built[0]).digest() == hashlib.sha256(built[1]).digest()
    assert {m.mtime for m in members(built[0]).values()} == {FIXED_MTIME}
    assert gzip.decompress(built[0])  # a valid gzip stream
    assert built[0][4:8] == b"\0\0\0\0"  # no time in the gzip header


async def test_concurrent_requests_share_one_build_and_one_clone(serve_client, tmp_path):
    repo = mono_repo(tmp_path / "repos")
    client = await serve_client(make_config([mono_rule(repo.url)]))
    url = "/v1/modules/acme/network/aws/1.1.0/archive.tar.gz"
    responses = await asyncio.gather(*(client.get(url) for _ in range(20)))
    bodies = {await r.read() for r in responses}
    assert [r.status for r in responses] == [200] * 20 and len(bodies) == 1
    metrics = await (await client.get("/metrics")).text()
    assert "gitreg_archive_builds_total 1.0" in metrics
    assert client.app[MIRRORS].fetches == 1


@pytest.mark.slow
async def test_archive_cache_stays_under_max_bytes_least_recently_used_first(serve_client, tmp_path):
    import random

    repo = GitRepo(tmp_path / "repos", "big")
    rng = random.Random(7)
    for i in range(3):
        # ~700 KB of incompressible text per version: two archives exceed the 1 MiB bound
        repo.commit({"main.tf": f"# {i}\n", "blob.txt": rng.randbytes(700_000).hex()})
        repo.tag(f"v1.{i}.0")
    # The mirror (~2.4 MiB: all three blobs) and one archive fit; a second archive does not.
    max_bytes = 3 * 1024 * 1024 + 512 * 1024
    client = await serve_client(
        make_config(
            [{"namespace": "demo", "name": "big", "system": "null", "repository": repo.url, "download": "archive"}],
            storage={"path": str(tmp_path / "store"), "max_bytes": max_bytes},
        )
    )
    archives = tmp_path / "store" / "archives"
    for i in range(3):
        resp = await client.get(f"/v1/modules/demo/big/null/1.{i}.0/archive.tar.gz")
        assert resp.status == 200
        assert file_text(await resp.read(), "main.tf") == f"# {i}\n"
        on_disk = list(archives.glob("*.tar.gz"))
        assert len(on_disk) == 1  # the older one went to stay under max_bytes
        assert stored_bytes(tmp_path / "store") <= max_bytes
    # an evicted archive is simply built again
    resp = await client.get("/v1/modules/demo/big/null/1.0.0/archive.tar.gz")
    assert file_text(await resp.read(), "main.tf") == "# 0\n"


async def test_a_module_with_submodules_is_refused_with_the_reason(serve_client, tmp_path):
    dep = GitRepo(tmp_path / "repos", "dep")
    dep_sha = dep.commit({"x.tf": "\n"})
    repo = GitRepo(tmp_path / "repos", "withsub")
    repo.commit({"main.tf": "\n", ".gitmodules": '[submodule "vendor/dep"]\n\tpath = vendor/dep\n\turl = ../dep.git\n'})
    repo.git("update-index", "--add", "--cacheinfo", f"160000,{dep_sha},vendor/dep")
    repo.git("commit", "--quiet", "-m", "add submodule")
    repo.git("push", "--quiet", "origin", "main")
    repo.tag("v1.0.0")
    client = await serve_client(
        make_config(
            [{"namespace": "demo", "name": "sub", "system": "null", "repository": repo.url, "download": "archive"}]
        )
    )
    resp = await client.get("/v1/modules/demo/sub/null/1.0.0/download")
    await assert_error(resp, 409, "submodules", "vendor/dep", 'download = "git"')
    resp = await client.get("/v1/modules/demo/sub/null/1.0.0/archive.tar.gz")
    await assert_error(resp, 409, "submodules")


async def test_a_missing_module_directory_is_a_clear_404(serve_client, tmp_path):
    repo = mono_repo(tmp_path / "repos")
    client = await serve_client(make_config([mono_rule(repo.url, path="modules/nope")]))
    resp = await client.get("/v1/modules/acme/network/aws/1.1.0/archive.tar.gz")
    await assert_error(resp, 404, "modules/nope")


# --- signed URLs -------------------------------------------------------------------------------


async def test_signed_archive_url_valid_expired_tampered_and_wrong_path(serve_client, tmp_path):
    repo = mono_repo(tmp_path / "repos")
    client = await serve_client(make_config([mono_rule(repo.url)], auth=AUTH))
    url, body = await lookup(client, "1.1.0", BEARER)
    assert body["use_registry_credentials"] is True  # OpenTofu >= 1.12 sends its token instead
    parts = urlsplit(url)
    query = dict(parse_qsl(parts.query))
    assert set(query) == {"expires", "signature", "checksum"}  # checksum: go-getter strips it before fetching
    assert TOKEN not in url and SIGNING_KEY not in url
    # valid: no token needed, GET and HEAD
    assert (await client.head(url)).status == 200
    resp = await client.get(url)
    assert resp.status == 200 and file_text(await resp.read(), "main.tf") == 'output "v" { value = "net-1.1.0" }\n'
    # tampered signature
    bad = query["signature"][:-2] + ("AA" if not query["signature"].endswith("AA") else "BB")
    resp = await client.get(parts.path, params={"expires": query["expires"], "signature": bad})
    await assert_error(resp, 403, "signature")
    # tampered expiry (pushed into the future)
    resp = await client.get(
        parts.path, params={"expires": str(int(query["expires"]) + 3600), "signature": query["signature"]}
    )
    await assert_error(resp, 403, "signature")
    # wrong path: the 1.1.0 signature on the 1.0.0 archive
    resp = await client.get(parts.path.replace("/1.1.0/", "/1.0.0/"), params=query)
    await assert_error(resp, 403, "signature")
    # expired: signed with the same key, an hour ago
    past = dict(parse_qsl(UrlSigner(SIGNING_KEY, 600).sign(parts.path, now=time.time() - 3600)))
    resp = await client.get(parts.path, params=past)
    await assert_error(resp, 403, "expired")
    # garbage
    resp = await client.get(parts.path, params={"expires": "soon", "signature": "x"})
    await assert_error(resp, 403)
    # no signature and no token: the bearer challenge
    resp = await client.get(parts.path)
    await assert_error(resp, 401)
    assert resp.headers["WWW-Authenticate"].startswith("Bearer")
    # the registry token instead of a signature (OpenTofu's use_registry_credentials)
    resp = await client.get(parts.path, headers=BEARER)
    assert resp.status == 200


async def test_a_signature_from_another_key_is_refused(serve_client, tmp_path):
    repo = mono_repo(tmp_path / "repos")
    client = await serve_client(make_config([mono_rule(repo.url)], auth=AUTH))
    path = "/v1/modules/acme/network/aws/1.1.0/archive.tar.gz"
    forged = dict(parse_qsl(UrlSigner("z" * 40, 600).sign(path)))
    await assert_error(await client.get(path, params=forged), 403, "signature")


async def test_scoped_token_cannot_fetch_another_namespaces_archive(serve_client, tmp_path):
    repo = mono_repo(tmp_path / "repos")
    auth = {"tokens": [{"token": TOKEN, "namespaces": ["other"]}], "signing_key": SIGNING_KEY}
    client = await serve_client(make_config([mono_rule(repo.url)], auth=auth))
    resp = await client.get("/v1/modules/acme/network/aws/1.1.0/archive.tar.gz", headers=BEARER)
    await assert_error(resp, 403)
    resp = await client.get("/v1/modules/acme/network/aws/1.1.0/download", headers=BEARER)
    await assert_error(resp, 403)


async def test_absolute_archive_url_with_public_url(serve_client, tmp_path):
    repo = mono_repo(tmp_path / "repos")
    config = make_config([mono_rule(repo.url)], auth=AUTH, server={"public_url": "https://registry.example.com/"})
    client = await serve_client(config)
    resp = await client.get("/v1/modules/acme/network/aws/1.1.0/download", headers=BEARER)
    location = (await resp.json())["location"]
    assert location.startswith("https://registry.example.com/v1/modules/acme/network/aws/1.1.0/archive.tar.gz?expires=")
    parts = urlsplit(location)
    assert (await client.get(f"{parts.path}?{parts.query}")).status == 200


async def download_location(client, headers: dict[str, str]) -> str:
    resp = await client.get("/v1/modules/acme/network/aws/1.1.0/download", headers={**BEARER, **headers})
    assert resp.status == 200, await resp.text()
    location: str = (await resp.json())["location"]
    assert resp.headers["X-Terraform-Get"] == location
    return location


async def test_a_forged_host_never_moves_the_archive_url_off_public_url(serve_client, tmp_path):
    repo = mono_repo(tmp_path / "repos")
    server = {"public_url": "https://registry.example.com", "trusted_proxies": ["127.0.0.1"]}
    client = await serve_client(make_config([mono_rule(repo.url)], auth=AUTH, server=server))
    for headers in (
        {"Host": "evil.example"},
        {"X-Forwarded-Host": "evil.example", "X-Forwarded-Proto": "http"},  # even from a trusted proxy
    ):
        location = await download_location(client, headers)
        assert location.startswith("https://registry.example.com/v1/modules/acme/network/aws/1.1.0/archive.tar.gz?")


@pytest.mark.parametrize(
    "host",
    ["evil.example/x?", "user@evil.example", "evil.example:99999", "a b", "[not-ipv6]:80", "evil.example#"],
)
async def test_a_host_header_that_is_no_host_leaves_the_archive_url_relative(serve_client, tmp_path, host):
    repo = mono_repo(tmp_path / "repos")
    client = await serve_client(make_config([mono_rule(repo.url)], auth=AUTH))
    location = await download_location(client, {"Host": host})
    assert location.startswith("./archive.tar.gz?expires="), location


async def test_archive_url_follows_the_host_and_a_trusted_proxys_forwarded_origin(serve_client, tmp_path):
    repo = mono_repo(tmp_path / "repos")
    forwarded = {"X-Forwarded-Proto": "https", "X-Forwarded-Host": "registry.corp.example, proxy.internal"}
    path = "/v1/modules/acme/network/aws/1.1.0/archive.tar.gz?"
    # Not from a trusted proxy: the forwarded headers are anyone's, the connection's Host counts.
    client = await serve_client(make_config([mono_rule(repo.url)], auth=AUTH))
    assert (await download_location(client, {"Host": "Registry.Example.test:8080", **forwarded})).startswith(
        f"http://registry.example.test:8080{path}"
    )
    trusted = make_config([mono_rule(repo.url)], auth=AUTH, server={"trusted_proxies": ["127.0.0.0/8"]})
    client = await serve_client(trusted)
    assert (await download_location(client, forwarded)).startswith(f"https://registry.corp.example{path}")
    # A trusted proxy that forwards no host: the Host it sent.
    location = await download_location(client, {"Host": "[::1]:8443", "X-Forwarded-Proto": "https"})
    assert location.startswith(f"https://[::1]:8443{path}")


def test_archive_mode_with_tokens_and_no_signing_key_is_a_valid_config():
    # Archive is the default download mode: a config with registry auth and no [auth] signing_key
    # (which started before, in git mode) still starts; `gitreg serve` keeps a key in its storage.
    from gitreg.config.parse import parse_config

    for rule in (mono_rule("file:///r.git"), {"namespace": "a", "repository": "file:///r.git"}):
        config = parse_config({"auth": {"tokens": [TOKEN]}, "modules": [rule]}, {})
        assert config.modules[0].download == "archive" and config.auth.signing_key is None


# --- moved tags --------------------------------------------------------------------------------


async def test_moved_tag_keeps_serving_the_first_commit_across_restarts(serve_client, tmp_path):
    repo = GitRepo(tmp_path / "repos", "moving")
    first = repo.commit({"main.tf": "# first\n"})
    repo.tag("v1.0.0")
    rule = {"namespace": "demo", "name": "moving", "system": "null", "repository": repo.url, "download": "archive"}
    config = make_config([rule], cache={"ttl_seconds": 0}, storage={"path": str(tmp_path / "store")})
    client = await serve_client(config)
    url = "/v1/modules/demo/moving/null/1.0.0/archive.tar.gz"
    assert file_text(await (await client.get(url)).read(), "main.tf") == "# first\n"
    second = repo.commit({"main.tf": "# second\n"})
    repo.tag("v1.0.0")  # force-moved
    assert second != first
    resp = await client.get(url)
    assert file_text(await resp.read(), "main.tf") == "# first\n"
    metrics = await (await client.get("/metrics")).text()
    assert "gitreg_moved_tags_total 1.0" in metrics
    await client.close()
    # a restart remembers the first commit
    client = await serve_client(config)
    assert file_text(await (await client.get(url)).read(), "main.tf") == "# first\n"
    await client.close()
    # allow_moved_tags: follow the tag
    allowing = make_config(
        [rule], cache={"ttl_seconds": 0}, storage={"path": str(tmp_path / "store")}, git={"allow_moved_tags": True}
    )
    client = await serve_client(allowing)
    assert file_text(await (await client.get(url)).read(), "main.tf") == "# second\n"


async def test_moved_tag_with_ref_commit_pins_the_first_sha_and_logs_it(serve_client, tmp_path, caplog):
    repo = GitRepo(tmp_path / "repos", "moving")
    first = repo.commit({"main.tf": "# first\n"})
    repo.tag("v1.0.0")
    config = make_config(
        [
            {
                "namespace": "demo",
                "name": "moving",
                "system": "null",
                "repository": repo.url,
                "ref": "commit",
                "download": "git",
            }
        ],
        cache={"ttl_seconds": 0},
    )
    client = await serve_client(config)
    resp = await client.get("/v1/modules/demo/moving/null/1.0.0/download")
    assert (await resp.json())["location"].endswith(f"?ref={first}")
    second = repo.commit({"main.tf": "# second\n"})
    repo.tag("v1.0.0")
    resp = await client.get("/v1/modules/demo/moving/null/1.0.0/download")
    assert (await resp.json())["location"].endswith(f"?ref={first}")
    moved = [r for r in caplog.records if "moved" in r.getMessage()]
    assert moved and first[:12] in moved[0].getMessage() and second[:12] in moved[0].getMessage()
    assert moved[0].levelname == "WARNING"


async def test_a_torn_pin_record_is_ignored_and_repaired(tmp_path):
    from gitreg.storage.pins import TagPins

    path = tmp_path / "tagpins.jsonl"
    pins = TagPins(path)
    assert await pins.pin("file:///r.git", "v1.0.0", "a" * 40, allow_moved=False, follows_tag=False) == "a" * 40
    path.write_bytes(path.read_bytes() + b'{"repository": "file:///r.git", "tag": "v2.0.0", "sh')  # a crash mid-write
    again = TagPins(path)
    assert len(again) == 1
    assert await again.pin("file:///r.git", "v1.0.0", "b" * 40, allow_moved=False, follows_tag=False) == "a" * 40
    assert path.read_bytes().endswith(b"\n") and all(json.loads(line) for line in path.read_bytes().splitlines())


# --- host tarball templates --------------------------------------------------------------------


@pytest.mark.parametrize(
    ("template", "extra", "expected"),
    [
        (
            "https://codeload.github.com/acme/infra/tar.gz/{tag}",
            {},
            "https://codeload.github.com/acme/infra/tar.gz/network/v1.1.0//infra-network-v1.1.0/modules/network?archive=tar.gz",
        ),
        (
            "https://codeload.github.com/acme/infra/tar.gz/{sha}",
            {},
            "https://codeload.github.com/acme/infra/tar.gz/{sha}//infra-{sha}/modules/network?archive=tar.gz",
        ),
        (
            "https://gitlab.example.com/acme/infra/-/archive/{tag}/infra.tar.gz",
            {},
            "https://gitlab.example.com/acme/infra/-/archive/network/v1.1.0/infra.tar.gz//infra-network-v1.1.0-{sha}/modules/network",
        ),
        (
            "https://files.example.com/{name}-{version}.tgz",
            {"archive_root": "pkg-{version}"},
            "https://files.example.com/network-1.1.0.tgz//pkg-1.1.0/modules/network",
        ),
    ],
)
async def test_tarball_template_locations(serve_client, tmp_path, template, extra, expected):
    repo = mono_repo(tmp_path / "repos")
    sha = repo.git("rev-parse", "network/v1.1.0^{commit}")
    client = await serve_client(make_config([mono_rule(repo.url, download=template, **extra)]))
    resp = await client.get("/v1/modules/acme/network/aws/1.1.0/download")
    assert (await resp.json())["location"] == expected.replace("{sha}", sha)


async def test_github_tarball_template_strips_a_v_prefix(serve_client, repo):
    client = await serve_client(
        make_config(
            [
                {
                    "namespace": "demo",
                    "name": "hello",
                    "system": "null",
                    "repository": repo.url,
                    "download": "https://codeload.github.com/demo/terraform-null-hello/tar.gz/{tag}",
                }
            ]
        )
    )
    resp = await client.get("/v1/modules/demo/hello/null/1.1.0/download")
    assert (await resp.json())["location"] == (
        "https://codeload.github.com/demo/terraform-null-hello/tar.gz/v1.1.0//terraform-null-hello-1.1.0?archive=tar.gz"
    )


def test_archive_root_needs_a_template():
    from gitreg.config.parse import parse_config
    from gitreg.core.errors import ConfigError

    with pytest.raises(ConfigError) as e:
        parse_config({"modules": [{"namespace": "a", "repository": "file:///r.git", "archive_root": "x"}]}, {})
    assert e.value.problems == [
        "modules[0].archive_root: applies only to an https:// tarball URL template in `download`"
    ]


async def test_long_paths_symlinks_and_a_nested_submodule(serve_client, tmp_path):
    long_dir = "d" * 60 + "/" + "e" * 60
    repo = GitRepo(tmp_path / "repos", "odd")
    repo.commit({f"modules/m/{long_dir}/{'f' * 90}.tf": "# long\n", "modules/m/main.tf": "# main\n"})
    (repo.work / "modules/m/link.tf").symlink_to("main.tf")
    repo.commit({})
    repo.tag("v1.0.0")
    dep_sha = GitRepo(tmp_path / "repos", "dep").commit({"x.tf": "\n"})
    repo.git("update-index", "--add", "--cacheinfo", f"160000,{dep_sha},modules/m/{long_dir}/vendored")
    repo.git("commit", "--quiet", "-m", "submodule deep inside")
    repo.git("push", "--quiet", "origin", "main")
    repo.tag("v1.1.0")
    client = await serve_client(
        make_config(
            [
                {
                    "namespace": "demo",
                    "name": "odd",
                    "system": "null",
                    "repository": repo.url,
                    "path": "modules/m",
                    "download": "archive",
                }
            ]
        )
    )
    data = await (await client.get("/v1/modules/demo/odd/null/1.0.0/archive.tar.gz")).read()
    found = members(data)
    assert file_text(data, f"{long_dir}/{'f' * 90}.tf") == "# long\n"
    assert found["link.tf"].issym() and found["link.tf"].linkname == "main.tf"
    assert {m.mtime for m in found.values()} == {FIXED_MTIME}
    resp = await client.get("/v1/modules/demo/odd/null/1.1.0/download")
    await assert_error(resp, 409, "submodules", f"modules/m/{long_dir}/vendored")
