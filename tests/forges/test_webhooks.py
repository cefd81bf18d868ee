"""GitHub and GitLab webhooks: a signed tag event makes a new tag visible at once; nothing else does."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

import pytest

from gitreg.web.keys import CACHE
from tests.support.app import GIT_PASSWORD, GIT_USER, assert_error, make_config
from tests.support.process import run_gitreg
from tests.support.repos import GitRepo
from tests.support.webhooks import (
    GITHUB_SECRET,
    GITLAB_TOKEN,
    WEBHOOKS,
    fixture,
    github_headers,
    gitlab_headers,
    pointed_at,
    post_github,
    post_gitlab,
)

REGISTRY_TOKEN = "registry-token-7d1e5a0c9b"
# What the realistic payloads name: GitHub's Codertocat/Hello-World, a GitLab project in a subgroup.
GITHUB_CLONE = "https://github.com/Codertocat/Hello-World.git"
GITLAB_CLONE = "git@gitlab.example.com:acme/platform/networking/terraform-aws-vpc.git"


async def versions_of(client, address: str = "demo/hello/null") -> list[str]:
    resp = await client.get(f"/v1/modules/{address}/versions")
    assert resp.status == 200, await resp.text()
    return [v["version"] for v in (await resp.json())["modules"][0]["versions"]]


def public_repo(tmp_path: Path, name: str = "public") -> GitRepo:
    r = GitRepo(tmp_path / "repos", name)
    r.commit({"main.tf": "# module\n"})
    r.tag("v1.0.0")
    return r


def rule(url: str, **extra: Any) -> dict[str, Any]:
    return {"namespace": "demo", "name": "hello", "system": "null", "repository": url, **extra}


async def long_ttl_client(serve_client, rules: list[dict[str, Any]], **sections: Any):
    """A registry whose tag lists never expire during the test: only a webhook can show a new tag.
    What `gitreg serve` builds with the index off: these tests read no list, search or details."""
    sections.setdefault("webhooks", WEBHOOKS)
    sections.setdefault("index", {"enabled": False})
    return await serve_client(make_config(rules, cache={"ttl_seconds": 3600}, **sections))


# --- a signed tag event makes the new tag visible without waiting for the TTL ------------------


async def test_signed_github_tag_push_makes_a_new_tag_visible_without_waiting_for_the_ttl(
    serve_client, git_http, tmp_path
):
    repo = public_repo(tmp_path)
    url = git_http.url("public.git")
    client = await long_ttl_client(serve_client, [rule(url)])
    assert await versions_of(client) == ["1.0.0"]
    repo.tag("v1.2.0")
    assert await versions_of(client) == ["1.0.0"]  # cached for an hour
    resp = await post_github(client, pointed_at(fixture("github-push-tag.json"), url))
    assert resp.status == 200, await resp.text()
    assert (await resp.json())["result"] == "refreshing"
    assert await versions_of(client) == ["1.2.0", "1.0.0"]


async def test_github_payload_matches_the_rule_by_its_clone_url(serve_client, git_http, tmp_path):
    # gitreg lists tags from a URL of its own; clients (and GitHub's payload) know the repository
    # as github.com/Codertocat/Hello-World: the unmodified payload must still refresh it.
    repo = public_repo(tmp_path)
    client = await long_ttl_client(serve_client, [rule(git_http.url("public.git"), clone_url=GITHUB_CLONE)])
    assert await versions_of(client) == ["1.0.0"]
    repo.tag("v1.2.0")
    resp = await post_github(client, fixture("github-create-tag.json"), event="create")
    assert resp.status == 200, await resp.text()
    assert await versions_of(client) == ["1.2.0", "1.0.0"]


async def test_signed_gitlab_tag_push_of_a_subgroup_project_makes_the_new_tag_visible(serve_client, git_http, tmp_path):
    repo = public_repo(tmp_path)
    # The rule names the project scp-style; the payload by https, ssh and web URLs, in a subgroup.
    client = await long_ttl_client(serve_client, [rule(git_http.url("public.git"), clone_url=GITLAB_CLONE)])
    assert await versions_of(client) == ["1.0.0"]
    repo.tag("v1.2.0")
    resp = await post_gitlab(client, fixture("gitlab-tag-push.json"))
    assert resp.status == 200, await resp.text()
    assert await versions_of(client) == ["1.2.0", "1.0.0"]


async def test_gitlab_push_hook_for_a_tag_ref_also_refreshes(serve_client, git_http, tmp_path):
    repo = public_repo(tmp_path)
    client = await long_ttl_client(serve_client, [rule(git_http.url("public.git"), clone_url=GITLAB_CLONE)])
    assert await versions_of(client) == ["1.0.0"]
    repo.tag("v1.2.0")
    payload = fixture("gitlab-push-branch.json") | {"ref": "refs/tags/v1.2.0"}
    resp = await post_gitlab(client, payload, event="Push Hook")
    assert resp.status == 200, await resp.text()
    assert await versions_of(client) == ["1.2.0", "1.0.0"]


async def test_webhook_refreshes_repositories_a_wildcard_rule_has_resolved(serve_client, git_http, tmp_path):
    repo = public_repo(tmp_path, "terraform-aws-vpc")
    wildcard = {"namespace": "acme", "repository": git_http.base_url + "/terraform-{system}-{name}.git"}
    credentials = [{"url": git_http.base_url + "/", "username": GIT_USER, "password": GIT_PASSWORD}]
    client = await long_ttl_client(serve_client, [wildcard], credentials=credentials)
    assert await versions_of(client, "acme/vpc/aws") == ["1.0.0"]
    repo.tag("v1.2.0")
    # Another spelling of the same repository: no .git, other case, a trailing slash.
    payload = pointed_at(fixture("github-push-tag.json"), git_http.base_url.upper() + "/Terraform-AWS-VPC/")
    resp = await post_github(client, payload)
    assert resp.status == 200, await resp.text()
    assert await versions_of(client, "acme/vpc/aws") == ["1.2.0", "1.0.0"]


async def test_after_a_webhook_the_refresh_runs_in_the_background_once(serve_client, git_http, tmp_path):
    repo = public_repo(tmp_path)
    url = git_http.url("public.git")
    # Counts the cache's git calls: no background index asking too (long_ttl_client: the index is off).
    client = await long_ttl_client(serve_client, [rule(url)])
    await versions_of(client)
    repo.tag("v1.2.0")
    resp = await post_github(client, pointed_at(fixture("github-push-tag.json"), url))
    assert resp.status == 200
    cache = client.app[CACHE]
    for _ in range(200):  # the refresh needs no request to run
        if cache.stats.refreshes == 2 and not cache._inflight:
            break
        await asyncio.sleep(0.02)
    assert cache.stats.refreshes == 2
    assert git_http.ref_listings("public.git") == 2
    assert await versions_of(client) == ["1.2.0", "1.0.0"]
    assert git_http.ref_listings("public.git") == 2  # served from the refreshed cache


# --- anything else changes nothing ---------------------------------------------------------------


@pytest.mark.parametrize("signature", [None, "sha256=" + "0" * 64, "sha1=abc", "sha256=", "wrong-secret", "sha256=é"])
async def test_unsigned_or_wrongly_signed_github_webhook_is_401_and_changes_nothing(
    serve_client, git_http, tmp_path, signature
):
    repo = public_repo(tmp_path)
    url = git_http.url("public.git")
    client = await long_ttl_client(serve_client, [rule(url)])
    await versions_of(client)
    repo.tag("v1.2.0")
    body = json.dumps(pointed_at(fixture("github-push-tag.json"), url)).encode()
    headers = github_headers(body)
    if signature is None:
        del headers["X-Hub-Signature-256"]
    elif signature == "wrong-secret":
        headers = github_headers(body, secret="another-secret-of-16+")
    else:
        headers["X-Hub-Signature-256"] = signature
    resp = await client.post("/webhooks/github", data=body, headers=headers)
    await assert_error(resp, 401, "X-Hub-Signature-256")
    assert "WWW-Authenticate" not in resp.headers  # not a registry-token challenge
    assert await versions_of(client) == ["1.0.0"]
    assert git_http.ref_listings("public.git") == 1
    assert client.app[CACHE].stats.invalidations == 0


async def test_a_signature_over_a_different_body_is_refused(serve_client, git_http, tmp_path):
    public_repo(tmp_path)
    url = git_http.url("public.git")
    client = await long_ttl_client(serve_client, [rule(url)])
    signed = json.dumps(fixture("github-push-branch.json")).encode()
    tampered = json.dumps(pointed_at(fixture("github-push-tag.json"), url)).encode()
    resp = await client.post("/webhooks/github", data=tampered, headers=github_headers(signed))
    await assert_error(resp, 401)
    assert client.app[CACHE].stats.invalidations == 0


@pytest.mark.parametrize(
    "token", [None, "", "gitlab-webhook-token-93ad7", "gitlab-webhook-token-93ad7e ", "ünïcode-token"]
)
async def test_gitlab_webhook_with_a_wrong_token_is_401_and_changes_nothing(serve_client, git_http, tmp_path, token):
    repo = public_repo(tmp_path)
    client = await long_ttl_client(serve_client, [rule(git_http.url("public.git"), clone_url=GITLAB_CLONE)])
    await versions_of(client)
    repo.tag("v1.2.0")
    headers = gitlab_headers()
    if token is None:
        del headers["X-Gitlab-Token"]
    else:
        headers["X-Gitlab-Token"] = token
    body = json.dumps(fixture("gitlab-tag-push.json")).encode()
    resp = await client.post("/webhooks/gitlab", data=body, headers=headers)
    if token and token.strip() == GITLAB_TOKEN:
        assert resp.status == 200  # surrounding whitespace is not part of a header value
        return
    await assert_error(resp, 401, "X-Gitlab-Token")
    assert await versions_of(client) == ["1.0.0"]
    assert client.app[CACHE].stats.invalidations == 0


async def test_unknown_repository_is_202_with_a_note_and_no_git_call(serve_client, git_http, tmp_path):
    public_repo(tmp_path)
    client = await long_ttl_client(serve_client, [rule(git_http.url("public.git"))])
    await versions_of(client)
    resp = await post_github(client, fixture("github-push-tag.json"))  # github.com/Codertocat/Hello-World
    assert resp.status == 202
    body = await resp.json()
    assert body["result"] == "unknown_repository" and "no repository" in body["note"]
    await asyncio.sleep(0.05)
    assert git_http.ref_listings() == 1
    assert client.app[CACHE].stats.invalidations == 0


@pytest.mark.parametrize(
    ("provider", "name", "event"),
    [
        ("github", "github-push-branch.json", "push"),
        ("github", "github-create-tag.json", "issues"),
        ("gitlab", "gitlab-push-branch.json", "Push Hook"),
        ("gitlab", "gitlab-tag-push.json", "Merge Request Hook"),
    ],
)
async def test_events_that_are_not_tag_pushes_are_202_and_change_nothing(
    serve_client, git_http, tmp_path, provider, name, event
):
    public_repo(tmp_path)
    client = await long_ttl_client(serve_client, [rule(git_http.url("public.git"), clone_url=GITHUB_CLONE)])
    await versions_of(client)
    post = post_github if provider == "github" else post_gitlab
    payload = fixture(name)
    if "push-branch" in name:  # a push to the default branch re-reads .gitreg.toml (#35); another branch's does nothing
        payload["ref"] = "refs/heads/feature-x"
    resp = await post(client, payload, event=event)
    assert resp.status == 202
    assert (await resp.json())["result"] == "ignored"
    assert client.app[CACHE].stats.invalidations == 0
    assert git_http.ref_listings() == 1


async def test_github_ping_is_answered_so_the_hook_shows_as_working(serve_client, repo):
    client = await long_ttl_client(serve_client, [rule(repo.url)])
    resp = await post_github(client, fixture("github-ping.json"), event="ping")
    assert resp.status == 200
    assert (await resp.json())["result"] == "pong"


async def test_form_encoded_github_delivery_is_accepted(serve_client, git_http, tmp_path):
    repo = public_repo(tmp_path)
    url = git_http.url("public.git")
    client = await long_ttl_client(serve_client, [rule(url)])
    await versions_of(client)
    repo.tag("v1.2.0")
    body = urlencode({"payload": json.dumps(pointed_at(fixture("github-push-tag.json"), url))}).encode()
    headers = github_headers(body) | {"Content-Type": "application/x-www-form-urlencoded"}
    resp = await client.post("/webhooks/github", data=body, headers=headers)
    assert resp.status == 200, await resp.text()
    assert await versions_of(client) == ["1.2.0", "1.0.0"]


@pytest.mark.parametrize(
    ("body", "fragment"),
    [
        (b"{not json", "not a JSON document"),
        (b"\xff\xfe", "not a JSON document"),
        (b"[1, 2]", "JSON object"),
        (b"[" * 500_000, "not a JSON document"),
        (b'{"ref": "refs/tags/v1.0.0"}', "no repository"),
        (b'{"ref": "refs/tags/v1.0.0", "repository": {"clone_url": 7}}', "none of"),
        (b'{"ref": 5, "repository": {"clone_url": "https://github.com/a/b.git"}}', "'ref'"),
    ],
    ids=["truncated", "not-utf8", "array", "deeply-nested", "no-repository", "no-url", "ref-not-a-string"],
)
async def test_signed_but_malformed_github_body_is_400(serve_client, repo, body, fragment):
    client = await long_ttl_client(serve_client, [rule(repo.url)])
    resp = await client.post("/webhooks/github", data=body, headers=github_headers(body))
    await assert_error(resp, 400, fragment)


async def test_signed_but_malformed_gitlab_body_is_400(serve_client, repo):
    client = await long_ttl_client(serve_client, [rule(repo.url)])
    payload = fixture("gitlab-tag-push.json")
    del payload["project"], payload["repository"]
    await assert_error(await post_gitlab(client, payload), 400, "project")


async def test_oversized_payload_is_413_before_anything_is_parsed(serve_client, repo):
    client = await long_ttl_client(serve_client, [rule(repo.url)])
    body = b'{"padding": "' + b"x" * (1024 * 1024 + 10) + b'"}'
    resp = await client.post("/webhooks/github", data=body, headers=github_headers(body))
    await assert_error(resp, 413, "limited")


@pytest.mark.parametrize("path", ["/webhooks/github", "/webhooks/gitlab"])
async def test_webhook_without_a_configured_secret_is_404_with_the_error_shape(serve_client, repo, path):
    client = await serve_client(make_config([rule(repo.url)], index={"enabled": False}))
    body = json.dumps(fixture("github-push-tag.json")).encode()
    resp = await client.post(path, data=body, headers=github_headers(body) | gitlab_headers())
    await assert_error(resp, 404, "not enabled", "[webhooks]")


async def test_webhooks_are_not_behind_registry_tokens(serve_client, git_http, tmp_path):
    repo = public_repo(tmp_path)
    url = git_http.url("public.git")
    headers = {"Authorization": f"Bearer {REGISTRY_TOKEN}"}
    client = await long_ttl_client(serve_client, [rule(url)], auth={"tokens": [REGISTRY_TOKEN]})
    assert (await client.get("/v1/modules/demo/hello/null/versions", headers=headers)).status == 200
    repo.tag("v1.2.0")
    resp = await post_github(client, pointed_at(fixture("github-push-tag.json"), url))  # no bearer token
    assert resp.status == 200, await resp.text()
    await assert_error(await client.get("/v1/modules/demo/hello/null/versions"), 401)  # the API still needs one
    body = await (await client.get("/v1/modules/demo/hello/null/versions", headers=headers)).json()
    assert [v["version"] for v in body["modules"][0]["versions"]] == ["1.2.0", "1.0.0"]


async def test_wrong_method_on_a_webhook_is_405_json(serve_client, repo):
    client = await long_ttl_client(serve_client, [rule(repo.url)])
    await assert_error(await client.get("/webhooks/github"), 405)


def test_check_prints_the_webhook_url_for_each_host_and_whether_the_secret_is_set(tmp_path):
    config = tmp_path / "gitreg.toml"
    config.write_text(f"""
[server]
public_url = "https://registry.example.com"
[webhooks]
github_secret = "{GITHUB_SECRET}"
[[modules]]
namespace = "acme"
repository = "https://github.com/acme/terraform-{{system}}-{{name}}.git"
[[modules]]
namespace = "acme"
name = "vpc"
system = "aws"
repository = "{GITLAB_CLONE}"
""")
    result = run_gitreg("check", "--config", str(config))
    assert result.returncode == 0, result.stderr
    out = result.stdout
    assert "github.com (GitHub): https://registry.example.com/webhooks/github" in out
    assert "gitlab.example.com (GitLab): https://registry.example.com/webhooks/gitlab" in out
    assert "github_secret: set" in out and "gitlab_token: NOT SET" in out
    assert GITHUB_SECRET not in out


def test_check_without_public_url_prints_a_placeholder(tmp_path):
    result = run_gitreg("check", "--module", "demo/hello/null=https://github.com/acme/hello.git")
    assert result.returncode == 0, result.stderr
    assert "https://<this registry>/webhooks/github" in result.stdout
    assert "public_url" in result.stdout
