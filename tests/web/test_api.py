"""The module registry protocol, as Terraform and OpenTofu use it, against real repositories."""

from __future__ import annotations

import asyncio
import logging
import os
from pathlib import Path

import pytest

from gitreg.config.model import Config
from gitreg.core.errors import ConfigError
from gitreg.web.keys import CACHE
from tests.support.app import GIT_PASSWORD, GIT_USER, assert_error, make_config
from tests.support.repos import GitRepo

REGISTRY_TOKEN = "registry-token-7d1e5a0c9b"


def unindexed(modules: list[dict], **sections) -> Config:
    """`gitreg serve`'s config with the index off: these tests read versions and downloads, never the index."""
    return make_config(modules, index={"enabled": False}, **sections)


def rule(repo_url: str, **extra) -> dict:
    return {"namespace": "demo", "name": "hello", "system": "null", "repository": repo_url, **extra}


async def versions_of(client, address: str = "demo/hello/null") -> list[str]:
    resp = await client.get(f"/v1/modules/{address}/versions")
    assert resp.status == 200, await resp.text()
    body = await resp.json()
    assert len(body["modules"]) == 1
    return [v["version"] for v in body["modules"][0]["versions"]]


async def location_of(client, version: str, address: str = "demo/hello/null") -> str:
    resp = await client.get(f"/v1/modules/{address}/{version}/download")
    assert resp.status == 200, await resp.text()
    body = await resp.json()
    assert resp.headers["X-Terraform-Get"] == body["location"]
    return body["location"]


async def test_discovery_document_points_at_the_module_api(serve_client, repo):
    client = await serve_client(unindexed([rule(repo.url)]))
    resp = await client.get("/.well-known/terraform.json")
    assert resp.status == 200
    assert resp.content_type == "application/json"
    assert await resp.json() == {"modules.v1": "/v1/modules/"}


async def test_versions_list_semver_tags_without_v_and_skip_the_rest(serve_client, repo):
    client = await serve_client(unindexed([rule(repo.url)]))
    assert sorted(await versions_of(client)) == ["1.0.0", "1.1.0", "2.0.0-rc.1"]


async def test_download_answers_with_json_body_and_x_terraform_get_header(serve_client, repo):
    client = await serve_client(unindexed([rule(repo.url, download="git")]))
    resp = await client.get("/v1/modules/demo/hello/null/1.1.0/download")
    assert resp.status == 200
    assert resp.content_type == "application/json"
    # OpenTofu reads the body first, Terraform only the header: both must say the same.
    assert await resp.json() == {"location": f"git::{repo.url}?ref=v1.1.0"}
    assert resp.headers["X-Terraform-Get"] == f"git::{repo.url}?ref=v1.1.0"


async def test_a_git_location_carries_ref_alone_unless_the_rule_asks_for_a_shallow_clone(serve_client, repo):
    # Checkov 3.3.30 and tfmodcache 0.1.0 misread any parameter after (or before) `ref` and skip
    # the module: `depth=1` is the rule's choice (`shallow = true`), off by default.
    client = await serve_client(unindexed([rule(repo.url, shallow=True)]))
    assert await location_of(client, "1.1.0") == f"git::{repo.url}?ref=v1.1.0&depth=1"
    for wrong in ({"ref": "commit"}, {"download": "archive"}):
        with pytest.raises(ConfigError, match=r'modules\[0\]\.shallow: applies only with download = "git" and ref'):
            unindexed([rule(repo.url, shallow=True, **wrong)])


async def test_download_accepts_the_version_with_a_leading_v(serve_client, repo):
    client = await serve_client(unindexed([rule(repo.url, download="git")]))
    assert await location_of(client, "v1.0.0") == f"git::{repo.url}?ref=v1.0.0"


async def test_ref_commit_pins_the_peeled_commit_of_an_annotated_tag(serve_client, repo):
    client = await serve_client(unindexed([rule(repo.url, ref="commit", download="git")]))
    sha = repo.tag("v1.1.0", annotated=True, message="again")  # the commit, not the tag object
    assert await location_of(client, "1.1.0") == f"git::{repo.url}?ref={sha}"


async def test_plus_in_a_tag_is_percent_encoded_in_the_location(serve_client, repo):
    repo.tag("v3.0.0+build.5")
    client = await serve_client(unindexed([rule(repo.url, download="git")]))
    assert "3.0.0+build.5" in await versions_of(client)
    assert await location_of(client, "3.0.0+build.5") == f"git::{repo.url}?ref=v3.0.0%2Bbuild.5"


async def test_monorepo_module_gets_its_subdirectory_and_prefixed_tags(serve_client, tmp_path):
    mono = GitRepo(tmp_path / "repos", "infra")
    mono.commit({"modules/network/main.tf": "# network\n", "modules/compute/main.tf": "# compute\n"})
    mono.tag("network/v1.4.0")
    mono.tag("compute/v9.9.9")
    mono.tag("v7.0.0")
    config = unindexed(
        [
            {
                "namespace": "acme",
                "name": "network",
                "system": "aws",
                "repository": mono.url,
                "path": "modules/network",
                "tag_prefix": "network/",
                "clone_url": "ssh://git@git.example.com/acme/infra.git",
                "download": "git",
            }
        ]
    )
    client = await serve_client(config)
    assert await versions_of(client, "acme/network/aws") == ["1.4.0"]
    location = await location_of(client, "1.4.0", "acme/network/aws")
    assert location == "git::ssh://git@git.example.com/acme/infra.git//modules/network?ref=network/v1.4.0"


async def test_scp_like_clone_url_becomes_an_ssh_url(serve_client, repo):
    client = await serve_client(
        unindexed([rule(repo.url, clone_url="git@git.example.com:demo/hello.git", download="git")])
    )
    assert await location_of(client, "1.0.0") == "git::ssh://git@git.example.com/demo/hello.git?ref=v1.0.0"


async def test_wildcard_rule_fills_placeholders_from_the_request(serve_client, tmp_path):
    vpc = GitRepo(tmp_path / "repos", "terraform-aws-vpc")
    vpc.commit({"main.tf": "# vpc\n"})
    vpc.tag("v0.1.0")
    base = (tmp_path / "repos").as_uri()
    config = unindexed(
        [
            {
                "namespace": "acme",
                "repository": base + "/terraform-{system}-{name}.git",
                "clone_url": "https://git.example.com/{namespace}/terraform-{system}-{name}.git",
                "download": "git",
            }
        ]
    )
    client = await serve_client(config)
    assert await versions_of(client, "acme/vpc/aws") == ["0.1.0"]
    assert await location_of(client, "0.1.0", "acme/vpc/aws") == (
        "git::https://git.example.com/acme/terraform-aws-vpc.git?ref=v0.1.0"
    )


async def test_most_specific_rule_wins_then_the_earlier(serve_client, tmp_path):
    repos = {}
    for name in ("wild", "named", "first", "second"):
        repos[name] = GitRepo(tmp_path / "repos", name)
        repos[name].commit({"main.tf": f"# {name}\n"})
        repos[name].tag("v1.0.0")
    config = unindexed(
        [
            {"namespace": "acme", "repository": repos["wild"].url, "download": "git"},
            {"namespace": "acme", "name": "vpc", "repository": repos["named"].url, "download": "git"},
            {"name": "db", "system": "aws", "repository": repos["first"].url, "download": "git"},
            {"namespace": "acme", "system": "aws", "repository": repos["second"].url, "download": "git"},
        ]
    )
    client = await serve_client(config)
    assert repos["named"].url in await location_of(client, "1.0.0", "acme/vpc/aws")
    assert repos["wild"].url in await location_of(client, "1.0.0", "acme/dns/gcp")
    # acme/db/aws: two rules with two literal fields match; the earlier wins.
    assert repos["first"].url in await location_of(client, "1.0.0", "acme/db/aws")


async def test_unknown_module_without_a_rule_is_404(serve_client, repo):
    client = await serve_client(unindexed([rule(repo.url)]))
    await assert_error(await client.get("/v1/modules/other/hello/null/versions"), 404, "no [[modules]] rule")


async def test_rule_whose_repository_does_not_exist_is_404_and_cached_briefly(serve_client, tmp_path):
    base = (tmp_path / "repos").as_uri()
    (tmp_path / "repos").mkdir()
    client = await serve_client(unindexed([{"namespace": "acme", "repository": base + "/{name}.git"}]))
    for _ in range(3):
        await assert_error(await client.get("/v1/modules/acme/typo/aws/versions"), 404, "does not exist upstream")
    assert client.app[CACHE].stats.refreshes == 1  # a typo does not become a flood of git calls


async def test_unknown_version_is_404_and_names_what_exists(serve_client, repo):
    client = await serve_client(unindexed([rule(repo.url)]))
    await assert_error(await client.get("/v1/modules/demo/hello/null/9.9.9/download"), 404, "no version 9.9.9", "1.1.0")


@pytest.mark.parametrize("version", ["1.0", "latest", "1.0.0.0", "01.0.0", "v", "1.0.0-"])
async def test_malformed_version_is_400(serve_client, repo, version):
    client = await serve_client(unindexed([rule(repo.url)]))
    await assert_error(await client.get(f"/v1/modules/demo/hello/null/{version}/download"), 400, "not a SemVer version")


@pytest.mark.parametrize(
    "path",
    [
        "/v1/modules/-demo/hello/null/versions",
        "/v1/modules/demo/hello-/null/versions",
        "/v1/modules/demo/hello/Null/versions",
        "/v1/modules/demo/hel.lo/null/versions",
        "/v1/modules/demo/he%2Fllo/null/versions",
        "/v1/modules/demo/%2E%2E/null/versions",
        "/v1/modules/demo/hello/nu%00ll/versions",
        "/v1/modules/de%CE%BCo/hello/null/versions",
        "/v1/modules/" + "a" * 65 + "/hello/null/versions",
        "/v1/modules/demo/hello/" + "a" * 65 + "/1.0.0/download",
    ],
)
async def test_segments_outside_the_grammar_are_rejected_before_any_git_call(serve_client, tmp_path, path):
    # A wildcard rule that would happily turn any name into a repository URL.
    base = (tmp_path / "repos").as_uri()
    client = await serve_client(unindexed([{"repository": base + "/{namespace}/{name}-{system}.git"}]))
    resp = await client.get(path)
    assert 400 <= resp.status < 500
    await assert_error(resp, resp.status)
    assert client.app[CACHE].stats.refreshes == 0


async def test_unknown_endpoints_and_methods_get_the_json_error_shape(serve_client, repo):
    client = await serve_client(unindexed([rule(repo.url)]))
    await assert_error(await client.get("/v1/nope"), 404, "no such endpoint")
    await assert_error(await client.post("/v1/modules/demo/hello/null/versions"), 405, "not allowed")


@pytest.mark.slow
async def test_new_tag_appears_once_the_ttl_has_passed(serve_client, repo):
    # 2 s: the first answer also waits for the default branch's .gitreg.toml (#35), a local fetch that can
    # take half a second on a loaded machine, while the TTL already runs.
    client = await serve_client(unindexed([rule(repo.url)], cache={"ttl_seconds": 2}))
    assert "1.2.0" not in await versions_of(client)
    repo.tag("v1.2.0")
    assert "1.2.0" not in await versions_of(client)  # cached: no git call inside the TTL
    await asyncio.sleep(2.1)
    assert "1.2.0" in await versions_of(client)
    assert client.app[CACHE].stats.refreshes == 2


async def test_modules_sharing_a_repository_share_one_tag_list(serve_client, tmp_path):
    mono = GitRepo(tmp_path / "repos", "infra")
    mono.commit({"a/main.tf": "#\n", "b/main.tf": "#\n"})
    mono.tag("a/v1.0.0")
    mono.tag("b/v2.0.0")
    client = await serve_client(
        unindexed(
            [
                {
                    "namespace": "acme",
                    "name": "a",
                    "system": "aws",
                    "repository": mono.url,
                    "path": "a",
                    "tag_prefix": "a/",
                },
                {
                    "namespace": "acme",
                    "name": "b",
                    "system": "aws",
                    "repository": mono.url,
                    "path": "b",
                    "tag_prefix": "b/",
                },
            ]
        )
    )
    assert await versions_of(client, "acme/a/aws") == ["1.0.0"]
    assert await versions_of(client, "acme/b/aws") == ["2.0.0"]
    assert client.app[CACHE].stats.refreshes == 1


async def test_concurrent_requests_for_a_cold_repository_make_one_git_call(serve_client, git_http, tmp_path):
    GitRepo(tmp_path / "repos", "public").commit({"main.tf": "#\n"})
    client = await serve_client(unindexed([rule(git_http.url("public.git"))]))
    results = await asyncio.gather(*(client.get("/v1/modules/demo/hello/null/versions") for _ in range(20)))
    assert all(r.status == 200 for r in results)
    assert git_http.ref_listings("public.git") == 1  # (and one fetch of its .gitreg.toml, #35: no listing)


# --- private repositories over real smart HTTP ---------------------------------------------


def private_repo(tmp_path: Path) -> GitRepo:
    r = GitRepo(tmp_path / "repos", "private")
    r.commit({"main.tf": "# private\n"})
    r.tag("v1.0.0")
    return r


async def test_private_repository_is_listed_with_configured_credentials(serve_client, git_http, tmp_path):
    private_repo(tmp_path)
    config = unindexed(
        [rule(git_http.url("private.git"), download="git")],
        credentials=[{"url": git_http.base_url + "/", "username": GIT_USER, "password": GIT_PASSWORD}],
    )
    client = await serve_client(config)
    assert await versions_of(client) == ["1.0.0"]
    location = await location_of(client, "1.0.0")
    assert location == f"git::{git_http.url('private.git')}?ref=v1.0.0"
    assert GIT_PASSWORD not in location


async def test_private_repository_without_credentials_fails_fast_with_502(serve_client, git_http, tmp_path):
    private_repo(tmp_path)
    client = await serve_client(unindexed([rule(git_http.url("private.git"))]))
    text = await assert_error(await client.get("/v1/modules/demo/hello/null/versions"), 502, "refused")
    assert "[[credentials]]" in text


async def test_wrong_credentials_are_502_and_the_password_is_never_shown(serve_client, git_http, tmp_path, caplog):
    private_repo(tmp_path)
    config = unindexed(
        [rule(git_http.url("private.git"))],
        credentials=[{"url": git_http.base_url + "/", "username": GIT_USER, "password": "wrong-password-123"}],
    )
    caplog.set_level(logging.DEBUG)
    client = await serve_client(config)
    resp = await client.get("/v1/modules/demo/hello/null/versions")
    text = await assert_error(resp, 502)
    assert "wrong-password-123" not in text
    assert "wrong-password-123" not in caplog.text


@pytest.mark.slow
async def test_git_password_never_appears_in_argv_logs_or_responses(serve_client, git_http, tmp_path, caplog):
    private_repo(tmp_path)
    config = unindexed(
        [rule(git_http.url("private.git"))],
        credentials=[{"url": git_http.base_url + "/", "username": GIT_USER, "password": GIT_PASSWORD}],
    )
    caplog.set_level(logging.DEBUG)
    client = await serve_client(config)
    git_http.mode, git_http.delay = "slow", 1.5  # keep git running while we look at it
    request = asyncio.ensure_future(client.get("/v1/modules/demo/hello/null/versions"))
    cmdlines = []
    for _ in range(40):
        await asyncio.sleep(0.05)
        cmdlines += [c for c in _git_cmdlines() if "private.git" in c]
        if cmdlines:
            break
    git_http.mode = "ok"
    resp = await request
    body = await resp.text()
    assert cmdlines, "saw no git process to inspect"
    assert all(GIT_PASSWORD not in c and "Authorization" not in c for c in cmdlines)
    assert GIT_PASSWORD not in body
    assert GIT_PASSWORD not in caplog.text
    # and the upstream did receive the credential, through git's environment
    auth_headers = [r.headers.get("Authorization", "") for r in git_http.requests()]
    assert any(h.startswith("Basic ") for h in auth_headers)


def _git_cmdlines() -> list[str]:
    out = []
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            raw = Path(f"/proc/{pid}/cmdline").read_bytes()
        except OSError:
            continue
        if b"git" in raw:
            out.append(raw.replace(b"\0", b" ").decode(errors="replace"))
    return out


# --- upstream failures --------------------------------------------------------------------


@pytest.mark.parametrize("mode", ["error", "garbage", "down"])
async def test_failing_git_host_is_502_with_a_clear_message(serve_client, git_http, tmp_path, mode):
    GitRepo(tmp_path / "repos", "public").commit({"main.tf": "#\n"})
    client = await serve_client(unindexed([rule(git_http.url("public.git"))]))
    git_http.mode = mode
    await assert_error(await client.get("/v1/modules/demo/hello/null/versions"), 502, "public.git")


@pytest.mark.slow
async def test_slow_git_host_is_504_after_the_timeout(serve_client, git_http, tmp_path):
    GitRepo(tmp_path / "repos", "public").commit({"main.tf": "#\n"})
    client = await serve_client(unindexed([rule(git_http.url("public.git"))], git={"timeout_seconds": 1}))
    git_http.mode, git_http.delay = "slow", 20
    loop = asyncio.get_running_loop()
    started = loop.time()
    await assert_error(await client.get("/v1/modules/demo/hello/null/versions"), 504, "did not answer within 1s")
    assert loop.time() - started < 8  # killed at the timeout, not left hanging


async def test_last_good_tags_are_served_when_a_refresh_fails(serve_client, git_http, tmp_path):
    GitRepo(tmp_path / "repos", "public").commit({"main.tf": "#\n"})
    client = await serve_client(unindexed([rule(git_http.url("public.git"))], cache={"ttl_seconds": 0.2}))
    assert await versions_of(client) == []
    git_http.mode = "error"
    await asyncio.sleep(0.3)
    assert await versions_of(client) == []  # stale-if-error: still 200
    assert client.app[CACHE].stats.stale_served == 1


# --- registry authentication --------------------------------------------------------------


async def test_registry_token_is_required_on_the_api_but_not_on_discovery(serve_client, repo):
    client = await serve_client(unindexed([rule(repo.url)], auth={"tokens": [REGISTRY_TOKEN]}))
    resp = await client.get("/v1/modules/demo/hello/null/versions")
    await assert_error(resp, 401, "TF_TOKEN_")
    assert resp.headers["WWW-Authenticate"].startswith("Bearer")
    resp = await client.get(
        "/v1/modules/demo/hello/null/versions", headers={"Authorization": "Bearer wrong-token-000000"}
    )
    await assert_error(resp, 401, "not valid")
    resp = await client.get(
        "/v1/modules/demo/hello/null/versions", headers={"Authorization": f"Basic {REGISTRY_TOKEN}"}
    )
    await assert_error(resp, 401, "Bearer")
    resp = await client.get(
        "/v1/modules/demo/hello/null/versions", headers={"Authorization": f"Bearer {REGISTRY_TOKEN}"}
    )
    assert resp.status == 200
    assert (await client.get("/.well-known/terraform.json")).status == 200
    assert (await client.get("/healthz")).status == 200
    assert client.app[CACHE].stats.refreshes == 1  # unauthorized requests never reached git


async def test_unauthorized_requests_for_unknown_paths_get_401_not_404(serve_client, repo):
    client = await serve_client(unindexed([rule(repo.url)], auth={"tokens": [REGISTRY_TOKEN]}))
    await assert_error(await client.get("/v1/modules/secret/thing/aws/versions"), 401)
